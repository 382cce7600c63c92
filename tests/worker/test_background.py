"""The worker's background loops (``approvals.worker.main._every``): the deadline sweep,
recovery and retention."""

from __future__ import annotations

import logging
import os
import threading
import time

import redis

from approvals import store
from approvals.config import Settings
from approvals.decisions import deadlines
from approvals.worker import main as worker_main
from tests.ops.test_retention import finish, held, pause
from tests.processes import redis_binary, start_redis, start_worker, wait_for_workers, wait_until


def test_a_redis_outage_is_reported_once_and_the_sweep_resumes_after_it(env, tmp_path, caplog):
    """Redis goes away for many rounds of the worker's sweep: it says so once (not twice a
    second), and sweeps deadlines again when Redis is back."""
    binary = redis_binary()
    assert binary is not None
    folder = tmp_path / "redis"
    folder.mkdir()
    server, base = start_redis(binary, folder)
    port = int(base.rsplit(":", 1)[1])
    settings = Settings.from_env(os.environ | {"REDIS_URL": f"{base}/0"})
    rounds = []

    def counted(conn, settings):
        rounds.append(time.monotonic())
        return deadlines.sweep(conn, settings)

    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="approvals.worker.main")
    loop = worker_main._every("sweep", 0.01, settings, counted, stop)
    try:
        wait_until(lambda: len(rounds) >= 3, 10, "a few rounds")
        server.terminate()
        server.wait(10)
        failed_at = len(wait_until(lambda: _logged(caplog, "round failed"), 10, "the outage"))
        at = len(rounds)
        wait_until(lambda: len(rounds) >= at + 20, 30, "twenty rounds into the outage")
        server, _ = start_redis(binary, folder, port=port)
        wait_until(lambda: _logged(caplog, "working again"), 30, "Redis back")

        assert failed_at == 1 and len(_logged(caplog, "round failed")) == 1
        conn = redis.Redis.from_url(f"{base}/0")
        deadlines.add(conn, deadlines.Kind.EXPIRE, "gone", time.time() - 1)
        wait_until(lambda: conn.zcard(store.keys.DEADLINES_KEY) == 0, 10, "the deadline swept")
        conn.close()
    finally:
        stop.set()
        loop.join(10)
        server.terminate()
        server.wait(10)


def _logged(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_a_running_worker_removes_what_finished_long_ago_and_nothing_else(env, conn, tmp_path):
    """An approval that finished a month ago leaves Redis within seconds of a worker
    starting; one waiting since then stays."""
    pause(conn, "old-done")
    finish(conn, "old-done")
    for key in (store.keys.FINISHED_KEY, store.keys.FINISHED_HISTORY_KEY):
        conn.zadd(key, {"old-done": time.time() - 31 * 24 * 3600})
    pause(conn, "old-waiting")
    worker = start_worker(env, tmp_path / "worker.log", f"w-retention-{os.getpid()}")
    try:
        wait_for_workers(env, [worker], 1)
        wait_until(lambda: not held(conn, "old-done"), 10, "the old approval removed")
        assert held(conn, "old-waiting") == {"record", "history", "audit"}
    finally:
        worker.stop()


def _finished_a_month_ago(conn, approval_id: str) -> None:
    pause(conn, approval_id)
    finish(conn, approval_id)
    for key in (store.keys.FINISHED_KEY, store.keys.FINISHED_HISTORY_KEY):
        conn.zadd(key, {approval_id: time.time() - 31 * 24 * 3600})


def test_a_worker_says_once_at_start_that_its_archive_was_never_upgraded(env, conn, tmp_path):
    """APPROVALS_ARCHIVE_URL names a database `approvals archive upgrade` never ran on: the
    worker says so once, before it takes jobs, naming the command; round after round of the
    sweep (each one seen removing a history) adds no line, and every record stays."""
    worker_env = {**env, "APPROVALS_ARCHIVE_URL": f"sqlite:///{tmp_path / 'archive.db'}"}
    worker = start_worker(worker_env, tmp_path / "worker.log", f"w-archive-{os.getpid()}")
    try:
        wait_for_workers(env, [worker], 1)
        for n in range(3):  # one round of the sweep each, a second apart
            _finished_a_month_ago(conn, f"done-{n}")
            wait_until(lambda n=n: held(conn, f"done-{n}") == {"record", "audit"}, 20, "a round")
        log = worker.output()
    finally:
        worker.stop()
    said = [line for line in log.splitlines() if "the archive cannot be used" in line]
    assert len(said) == 1 and " ERROR " in said[0], log
    assert "has no tables: run `approvals archive upgrade`" in said[0]
    assert log.index(said[0]) < log.index("Listening on"), log
    assert "Traceback" not in log and "round failed" not in log, log
    assert all(held(conn, f"done-{n}") == {"record", "audit"} for n in range(3))
