"""One stack for all of tests/api: a private Redis database, the bot, a worker and
``approvals api``, all real processes. Tests tell their approvals apart by id and use tokens
of their own agents, so they share it (three processes per test would cost most of the time).

The tests of the API's edge (hostile input, the OpenAPI contract) use ``lone_api`` instead:
``approvals api`` alone on a database of its own. Nothing else writes there, so "a refused
request changed nothing" can be read off the whole database, and fuzzers post no cards.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from approvals import store
from approvals.client import Client
from approvals.models import DecisionKind, decision_to_dict
from approvals.proof.tokens import create_token
from tests.conftest import BOT_TOKEN, CHANNEL, SIGNING_SECRET, RedisServer
from tests.e2e import key_value
from tests.factories import make_decision
from tests.processes import (
    Process,
    bot_url,
    free_port,
    start_api,
    start_bot,
    start_worker,
    stop_all,
    wait_for_workers,
)
from tests.slack_standin import SlackStandIn

#: The stack's APPROVALS_POLICY. Every rule names an agent only tests/api/test_rules.py uses,
#: so the other tests' requests are asked of a person as before.
POLICY = """
[[rule]]
id = "docs-are-fine"
agent = "rules-approve"
tool = "publish"
when = 'args.path.startsWith("docs/")'
action = "approve"

[[rule]]
id = "prod-is-frozen"
agent = "rules-reject"
when = 'args.env == "prod"'
action = "reject"
reason = "prod is frozen until Monday"

[[rule]]
id = "would-reject"
agent = "rules-shadow"
action = "reject"
mode = "shadow"

[[rule]]
id = "two-sres"
agent = "rules-require"
action = "require"
[rule.require]
approvers = ["UALICE", "UBOB"]
approvals_required = 2
expires_in = 120
channel = "C0PROD"

[[rule]]
id = "needs-a-ticket"
agent = "rules-broken"
when = 'args.ticket.startsWith("OPS-")'
action = "approve"
"""


#: The agent of the APPROVALS_API_TOKEN in the API's own environment: set there as a deployment
#: sharing one environment with ``approvals mcp`` over stdio would, so that the tests hold the
#: /mcp mount to never acting as it.
AMBIENT_AGENT = "api-environment-agent"


@dataclass
class Stack:
    env: dict[str, str]
    bot_url: str
    api_url: str
    conn: redis.Redis
    slack: SlackStandIn
    processes: list[Process]
    clients: list[Client] = field(default_factory=list)
    #: The token of AMBIENT_AGENT in the API's environment.
    ambient_token: str = ""

    def token(self, agent: str, tools: tuple[str, ...] = ()) -> str:
        """A new token for ``agent`` (each test makes its own)."""
        return create_token(self.conn, agent, tools)[1]

    def client(self, token: str) -> Client:
        """A ``Client`` with ``token``, closed with the stack."""
        client = Client(self.api_url, token)
        self.clients.append(client)
        return client


@pytest.fixture(scope="package")
def stack(
    redis_server: RedisServer,
    slack_server: SlackStandIn,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("api-stack")
    (folder / "policy.toml").write_text(POLICY)
    env = {
        "REDIS_URL": redis_server.new_db(),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack_server.base_url,
        "APPROVALS_CHANNEL": CHANNEL,
        "APPROVALS_TOOL_MODULES": "tests.agents",
        "LLM_USER_PATH": str(folder / "llm"),
        "APPROVALS_WARN_BEFORE": "0",
        "APPROVALS_POLICY": str(folder / "policy.toml"),
    }
    for name in ("SLACK_APP_TOKEN", "APPROVERS", "APPROVALS_WORKER_CLASS"):
        os.environ.pop(name, None)
    conn = redis.Redis.from_url(env["REDIS_URL"])
    ambient = create_token(conn, AMBIENT_AGENT)[1]
    port = free_port()
    api_env = {
        **env,
        "APPROVALS_API_URL": f"http://127.0.0.1:{port}",
        "APPROVALS_API_TOKEN": ambient,
    }
    bot = start_bot(env, folder / "bot.log")
    worker = start_worker(env, folder / "worker.log", f"w-api-{time.monotonic_ns()}")
    api, url = start_api(api_env, folder / "api.log", port)
    processes = [bot, worker, api]
    running: Stack | None = None
    try:
        found_bot = bot_url(bot)
        wait_for_workers(env, [worker], 1)
        running = Stack(env, found_bot, url, conn, slack_server, processes, ambient_token=ambient)
        yield running
    finally:
        for client in running.clients if running else []:
            client.close()
        stop_all(processes)
        conn.close()
        if os.environ.get("API_STACK_LOGS"):
            for process in processes:
                sys.stderr.write(f"\n----- {process.log.name} -----\n{process.output()[-4000:]}\n")


@dataclass
class LoneApi:
    url: str
    conn: redis.Redis
    process: Process

    def token(self, agent: str, tools: tuple[str, ...] = ()) -> str:
        return create_token(self.conn, agent, tools)[1]

    def decide(self, approval_id: str, arguments: dict[str, Any], **fields: Any) -> None:
        """Mark an approval approved with ``arguments`` by writing Redis directly, as any
        version could have (no bot here to click)."""
        decision = make_decision(DecisionKind.APPROVE, arguments=arguments, **fields)
        key = store.keys.approval_key(approval_id)
        self.conn.hset(key, "decision", json.dumps(decision_to_dict(decision)))
        self.conn.hset(key, "status", "approved")

    def state(self) -> dict[bytes, Any]:
        """Every key of its database (``e2e.key_value``) but the tokens' request counters (a
        refused request with a valid token still counts against its rate)."""
        rate = f"{store.keys.PREFIX}rate:".encode()
        keys = sorted(k for k in self.conn.keys("*") if not k.startswith(rate))
        return {key: key_value(self.conn, key) for key in keys}


@pytest.fixture(scope="package")
def lone_api(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoneApi]:
    """``approvals api`` with no bot and no worker, on a database of its own."""
    folder = tmp_path_factory.mktemp("lone-api")
    env = {
        "REDIS_URL": redis_server.new_db(),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "APPROVALS_CHANNEL": CHANNEL,
        "LLM_USER_PATH": str(folder / "llm"),
        # The fuzzers send many requests a minute from one token.
        "APPROVALS_API_RATE_LIMIT": "100000",
    }
    api, url = start_api(env, folder / "api.log")
    conn = redis.Redis.from_url(env["REDIS_URL"])
    try:
        yield LoneApi(url, conn, api)
    finally:
        api.stop()
        conn.close()
