"""The real parts every figure runs on, started the way the tests start them.

One private ``redis-server`` (on a free loopback port, in a temp dir) and one Slack stand-in
serve the whole run. Each *phase* flushes Redis and starts what its figures need: ``approvals
bot`` over HTTP and ``approvals worker`` processes of a given RQ worker class, with the helpers
the tests use (``tests/processes.py``). The stand-in records when each request arrived, so a
figure can end at "Slack received the card".
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

import redis
from rq import Queue
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from approvals import store
from approvals.calls.plugins import load_plugins
from approvals.config import Settings
from approvals.slack.cards import APPROVE_ACTION
from tests.processes import (
    Process,
    bot_url,
    redis_binary,
    start_bot,
    start_redis,
    start_worker,
    wait_for_workers,
    wait_until,
)
from tests.slack_requests import (
    FORM,
    JSON,
    block_actions_payload,
    event_callback_payload,
    signature_headers,
    slash_command_form,
)
from tests.slack_standin import SlackStandIn

BOT_TOKEN = "xoxb-bench-token"
SIGNING_SECRET = "bench-signing-secret"
CHANNEL = "C0BENCH"
USER = "UBENCH"
MODEL = "scripted"
PLUGINS = "tests.agents.scripted"
#: Variables of the caller's shell that would change what the processes do.
_SCRUBBED = (
    "SLACK_APP_TOKEN",
    "APPROVERS",
    "APPROVER_GROUPS",
    "APPROVALS_WORKER_CLASS",
    "APPROVALS_QUEUE",
    "APPROVALS_TOOL_MODULES",
    "BENCH_TOOL_LOG",
    "SCRIPTED_LEDGER",
    "TOOL_LEDGER",
)
T = TypeVar("T")


@dataclass(frozen=True)
class Arrival:
    at: float  # time.perf_counter() of this process
    path: str
    body: bytes


class TimedStandIn(SlackStandIn):
    """The tests' Slack stand-in, noting when each request arrived (``perf_counter``).

    Waiting for an arrival blocks on a condition instead of polling, so the waiting figure
    takes no CPU from the processes it measures.
    """

    def __init__(self) -> None:
        super().__init__(token=BOT_TOKEN)
        self._arrivals: list[Arrival] = []
        self._arrived = threading.Condition()

    def _handle(self, verb: str, path: str, headers: Any, body: bytes) -> Any:
        """Note the arrival, then answer as the stand-in does."""
        at = time.perf_counter()
        with self._arrived:
            self._arrivals.append(Arrival(at, path, body))
            self._arrived.notify_all()
        return super()._handle(verb, path, headers, body)

    def mark(self) -> int:
        """A position in the arrivals; ``arrival(since=mark)`` looks only after it."""
        with self._arrived:
            return len(self._arrivals)

    def since(self, mark: int) -> list[Arrival]:
        """Every request that arrived after ``mark``."""
        with self._arrived:
            return self._arrivals[mark:]

    def arrival(
        self, path_part: str, needle: bytes = b"", since: int = 0, timeout: float = 20
    ) -> float:
        """When the first request to ``path_part`` holding ``needle`` arrived (waits for it)."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while True:
                for arrival in self._arrivals[since:]:
                    if path_part in arrival.path and needle in arrival.body:
                        return arrival.at
                since = len(self._arrivals)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {path_part} call arrived within {timeout}s")
                self._arrived.wait(left)

    def clear(self) -> None:
        self.reset()
        with self._arrived:
            self._arrivals.clear()


@dataclass(frozen=True)
class SignedRequest:
    """An HTTP POST to the bot, built and signed before the clock starts."""

    body: bytes
    headers: dict[str, str]


def click_request(
    approval_id: str, response_url: str, bad_signature: bool = False
) -> SignedRequest:
    """An Approve click on the card of ``approval_id``, signed as Slack signs it."""
    payload = block_actions_payload(
        user_id=USER,
        action_id=APPROVE_ACTION,
        value=approval_id,
        channel_id=CHANNEL,
        response_url=response_url,
    )
    return _signed(urlencode({"payload": json.dumps(payload)}), bad_signature)


def pending_request(response_url: str) -> SignedRequest:
    """The ``/agent-pending`` slash command."""
    form = slash_command_form(user_id=USER, channel_id=CHANNEL, response_url=response_url)
    return _signed(urlencode(form), False)


def home_opened_request() -> SignedRequest:
    """The ``app_home_opened`` event Slack sends when the user opens the App Home tab."""
    event = {"type": "app_home_opened", "user": USER, "tab": "home", "channel": "D0BENCH"}
    return _signed(json.dumps(event_callback_payload(event)), False, JSON)


def _signed(body: str, bad_signature: bool, content_type: str = FORM) -> SignedRequest:
    headers = {"Content-Type": content_type, **signature_headers(SIGNING_SECRET, body)}
    if bad_signature:
        headers["X-Slack-Signature"] = "v0=" + "0" * 64
    return SignedRequest(body.encode(), headers)


def send(url: str, request: SignedRequest) -> int:
    """POST on a new connection, as each of Slack's requests comes; returns the status."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        conn.request("POST", parts.path, body=request.body, headers=request.headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def get(url: str) -> int:
    """GET on a new connection (the bot's ``/healthz``)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        conn.request("GET", parts.path)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def script(*turns: dict[str, Any]) -> str:
    """A prompt for the scripted model of ``tests/agents/scripted.py``."""
    return json.dumps({"script": list(turns)})


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in pairs]}


def rq_time(value: Any) -> float | None:
    """An RQ timestamp (``2025-01-01T00:00:00.123456Z``) as ``time.time()`` seconds."""
    if not value:
        return None
    text = value.decode() if isinstance(value, bytes) else str(value)
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class NamedProcess:
    """A worker process and the name it registered with RQ."""

    process: Process
    name: str


@dataclass
class Phase:
    """Processes and settings of one group of figures, on a flushed Redis."""

    name: str
    env: dict[str, str]
    settings: Settings
    conn: redis.Redis
    folder: Path
    standin: TimedStandIn
    bot: Process | None = None
    url: str | None = None
    workers: list[NamedProcess] = field(default_factory=list)

    @property
    def bot_url(self) -> str:
        assert self.url is not None, f"phase {self.name} runs no bot"
        return self.url

    @property
    def health_url(self) -> str:
        return self.bot_url.rsplit("/slack/events", 1)[0] + "/healthz"

    def start_worker(self) -> None:
        """Start one more ``approvals worker`` (see ``wait_for_workers``)."""
        name = f"bench-{self.name}-{len(self.workers)}"
        log = self.folder / f"worker{len(self.workers)}.log"
        self.workers.append(NamedProcess(start_worker(self.env, log, name), name))

    def wait_for_workers(self) -> None:
        wait_for_workers(self.env, [w.process for w in self.workers], len(self.workers))

    def queue(self) -> Queue:
        return Queue(self.settings.queue, connection=self.conn, serializer=JSONSerializer)

    def hold(self, workers: int) -> str:
        """Keep ``workers`` workers busy with a ``bench.jobs.hold`` job each; returns its key.

        Jobs enqueued meanwhile wait behind it until ``release``.
        """
        key = f"bench:hold:{uuid.uuid4().hex}"
        for _ in range(workers):
            self.queue().enqueue("bench.jobs.hold", key, 120, job_timeout=180, result_ttl=0)
        wait_until(
            lambda: int(self.conn.get(f"{key}:held") or 0) >= workers, 60, "every worker held"
        )
        return key

    def release(self, key: str, workers: int) -> float:
        """Let the held workers go at one instant; returns when (``time.time()``)."""
        released = time.time()
        self.conn.lpush(key, *["go"] * workers)
        return released

    def cpu(self) -> tuple[float, float]:
        """CPU seconds used so far by the workers (their work-horses included, once reaped)
        and by this process (the agent, the Slack stand-in and the bench's own checks)."""
        return sum(cpu_seconds(w.process.popen.pid) for w in self.workers), time.process_time()

    def check_alive(self) -> None:
        for process in [*([self.bot] if self.bot else []), *[w.process for w in self.workers]]:
            if process.popen.poll() is not None:
                raise RuntimeError(f"{process.log.name} exited:\n{process.output()[-3000:]}")

    def busy(self) -> bool:
        """Whether any job is queued, being handed to a worker, or running.

        RQ moves a job it dequeues to an intermediate list and keeps it there until it is in
        the started registry, so between the three nothing slips through.
        """
        queue = self.queue()
        pipe = self.conn.pipeline(transaction=True)
        pipe.llen(queue.key)
        pipe.llen(queue.intermediate_queue_key)
        pipe.zcard(StartedJobRegistry(queue=queue).key)
        for process in self.workers:
            pipe.hget(f"rq:worker:{process.name}", "state")
        found = pipe.execute()
        return any(found[:3]) or any(state != b"idle" for state in found[3:])

    def idle(self, timeout: float = 60, interval: float = 0.005) -> None:
        """Wait until no job is queued or running."""

        def quiet() -> bool:
            self.check_alive()
            return not self.busy()

        wait_until(quiet, timeout, "the workers to be idle", interval=interval)

    def audit_event(
        self, approval_id: str, event: str, timeout: float = 30, interval: float = 0.002
    ) -> None:
        """Wait until the approval's audit trail records ``event``."""

        def recorded() -> bool:
            return any(e["event"] == event for e in store.audit.audit_trail(self.conn, approval_id))

        wait_until(
            recorded, timeout, f"approval {approval_id} to record {event}", interval=interval
        )

    def tool_log(self) -> list[dict[str, Any]]:
        path = self.env.get("BENCH_TOOL_LOG")
        if not path or not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as log:
            return [json.loads(line) for line in log if line.strip()]

    def lines(self, variable: str) -> int:
        """How many lines the JSONL file named by ``variable`` has."""
        path = self.env.get(variable)
        if not path or not os.path.exists(path):
            return 0
        with open(path, encoding="utf-8") as log:
            return sum(1 for line in log if line.strip())


#: The bot runs as recommended for production: one gunicorn worker process per core.
BOT_WORKERS = os.cpu_count() or 1


class Bench:
    """The run's redis-server and Slack stand-in, and the phases started on them."""

    def __init__(self, folder: Path) -> None:
        binary = redis_binary()
        if binary is None:
            raise RuntimeError(
                "the benchmark needs redis-server on PATH (apt install redis-server)"
            )
        for name in _SCRUBBED:
            os.environ.pop(name, None)
        self.folder = folder
        (folder / "redis").mkdir(parents=True, exist_ok=True)
        self.redis, self.redis_base = start_redis(binary, folder / "redis")
        self.standin = TimedStandIn()
        self.standin.start()
        self._phases = 0

    def close(self) -> None:
        self.standin.stop()
        self.redis.terminate()
        self.redis.wait(10)

    @contextlib.contextmanager
    def phase(
        self,
        name: str,
        *,
        bot: bool = True,
        workers: int = 0,
        worker_class: str = "Worker",
        env: dict[str, str] | None = None,
    ) -> Iterator[Phase]:
        """Flush Redis, start the bot and ``workers`` workers, and stop them afterwards."""
        self._phases += 1
        folder = self.folder / f"{self._phases:02d}-{name}"
        folder.mkdir(parents=True)
        url = f"{self.redis_base}/0"
        conn = redis.Redis.from_url(url)
        conn.flushall()
        self.standin.clear()
        values = {
            "REDIS_URL": url,
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": self.standin.base_url,
            "APPROVALS_CHANNEL": CHANNEL,
            "APPROVALS_LLM_PLUGINS": PLUGINS,
            # The modules the tools live in, so the worker imports them before it forks:
            # the package alone would leave every work-horse to import it again.
            "APPROVALS_TOOL_MODULES": "bench.tools,bench.ungated",
            "APPROVALS_WORKER_CLASS": worker_class,
            "LLM_USER_PATH": str(folder / "llm"),
            # The stand-in keeps no pace here, and these figures measure our machinery, not
            # Slack's: cards are not held to Slack's rate (B12 sets its own, and the stand-in's).
            "APPROVALS_SLACK_PACE": "1000",
            "APPROVALS_SLACK_BURST": "100",
            **(env or {}),
        }
        saved = dict(os.environ)
        os.environ.update(values)  # the agent runs in this process, with the same settings
        settings = Settings.from_env(values)
        load_plugins(settings)
        current = Phase(name, values, settings, conn, folder, self.standin)
        try:
            if bot:
                args = ("--workers", str(BOT_WORKERS))
                current.bot = start_bot(values, folder / "bot.log", args=args)
            for _ in range(workers):
                current.start_worker()
            if bot:
                assert current.bot is not None
                current.url = bot_url(current.bot)
            if workers:
                current.wait_for_workers()
            yield current
        finally:
            for process in [
                *([current.bot] if current.bot else []),
                *[w.process for w in current.workers],
            ]:
                process.stop()
            os.environ.clear()
            os.environ.update(saved)
            conn.close()


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a process and of its children it has waited for (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    # After the command's closing parenthesis: utime, stime, cutime, cstime are 12..15.
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def used_memory(conn: redis.Redis) -> int:
    return int(conn.info("memory")["used_memory"])


def memory_by_family(conn: redis.Redis) -> dict[str, int]:
    """``MEMORY USAGE`` of every key, summed by the key's family (its name without ids)."""
    families: dict[str, int] = {}
    for key in conn.scan_iter(count=1000):
        name = key.decode()
        family = _family(name)
        families[family] = families.get(family, 0) + int(conn.memory_usage(key, samples=0) or 0)
    return dict(sorted(families.items(), key=lambda item: -item[1]))


def _family(name: str) -> str:
    parts = name.split(":")
    if name.startswith("approvals:") and len(parts) >= 3:
        return ":".join(parts[:2]) + ":<id>"
    if name.startswith("rq:job:"):
        return "rq:job:" + parts[2].split("-", 1)[0] + "-<id>"
    if name.startswith("rq:results:"):
        return "rq:results:<job>"
    if name.startswith("rq:execution"):
        return "rq:execution:<id>"
    return name
