"""Real parts for every test: a private redis-server, the Slack stand-in, and, for end-to-end
tests, ``approvals bot`` and ``approvals worker`` running as their own processes."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from tests.slack_standin import SlackStandIn

ROOT = Path(__file__).resolve().parent.parent
SIGNING_SECRET = "test-signing-secret"
BOT_TOKEN = "xoxb-test-token"
CHANNEL = "C0CARDS"
T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 15.0, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    url_base: str
    private: bool
    process: subprocess.Popen[bytes] | None = None
    _dbs: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def new_db(self) -> str:
        """A fresh database: flushed when the server is ours, checked empty when it is not."""
        db = next(self._dbs)
        url = f"{self.url_base}/{db}"
        conn = redis.Redis.from_url(url)
        if self.private:
            conn.flushdb()
        elif conn.dbsize():
            pytest.fail(f"{url} is not empty; the tests never flush a database they did not create")
        conn.close()
        return url


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server on a free port (else ``REDIS_URL``, used read-carefully)."""
    binary = shutil.which("redis-server")
    if binary is None:
        base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0").rsplit("/", 1)[0]
        yield RedisServer(base, private=False, _dbs=itertools.count(9))
        return
    folder = tmp_path_factory.mktemp("redis")
    port = _free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(folder),
            "--save",
            "",
            "--appendonly",
            "no",
            "--databases",
            "1000",
            "--daemonize",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"redis://127.0.0.1:{port}"
    probe = redis.Redis.from_url(base)
    wait_until(lambda: _pings(probe), 10, "redis-server to start")
    probe.close()
    yield RedisServer(base, private=True, process=process)
    process.terminate()
    process.wait(10)


def _pings(conn: redis.Redis) -> bool:
    try:
        return bool(conn.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture(scope="session")
def slack_server() -> Iterator[SlackStandIn]:
    standin = SlackStandIn(token=BOT_TOKEN).start()
    yield standin
    standin.stop()


@pytest.fixture
def slack(slack_server: SlackStandIn) -> SlackStandIn:
    slack_server.reset()
    return slack_server


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


class Process:
    """A child process whose output goes to a log file, shown when a test fails."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        child_env = {**os.environ, **env, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.popen = subprocess.Popen(
            args,
            env=child_env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        self._out.close()


def approvals_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "approvals", *args]


@dataclass
class Services:
    bot_url: str
    bot: Process
    workers: list[Process]


def start_bot(env: dict[str, str], log: Path, extra_env: dict[str, str] | None = None) -> Process:
    bot = Process(
        approvals_command("bot", "--host", "127.0.0.1", "--port", "0"),
        {**env, **(extra_env or {})},
        log,
    )
    return bot


def bot_url(bot: Process) -> str:
    def listening() -> str | None:
        if bot.popen.poll() is not None:
            raise AssertionError(f"the bot exited:\n{bot.output()}")
        for line in bot.output().splitlines():
            if "listening on " in line:
                return line.split("listening on ", 1)[1].strip()
        return None

    return wait_until(listening, 30, "the bot to listen")


def start_worker(env: dict[str, str], log: Path, name: str) -> Process:
    return Process(approvals_command("worker", "--name", name), env, log)


def wait_for_workers(env: dict[str, str], workers: list[Process], count: int) -> None:
    from rq import Worker

    conn = redis.Redis.from_url(env["REDIS_URL"])

    def registered() -> bool:
        for worker in workers:
            if worker.popen.poll() is not None:
                raise AssertionError(f"a worker exited:\n{worker.output()}")
        return len(Worker.all(connection=conn)) >= count

    wait_until(registered, 30, f"{count} worker(s) to register")
    conn.close()


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
    url = bot_url(bot)
    wait_for_workers(env, [worker], 1)
    yield Services(bot_url=url, bot=bot, workers=[worker])
    for process in [bot, worker]:
        process.stop()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        for process in [bot, worker]:
            sys.stderr.write(f"\n----- {process.log.name} -----\n{process.output()[-6000:]}\n")


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
