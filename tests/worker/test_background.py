"""The worker's background loops (``worker.main._every``): the deadline sweep and recovery."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
import redis

from approvals import deadlines, queue, store
from approvals.config import Settings
from tests.processes import redis_binary, start_redis, wait_until
from worker import main as worker_main


@pytest.mark.skipif(redis_binary() is None, reason="needs a redis-server binary to restart")
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
    caplog.set_level(logging.INFO, logger="worker.main")
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
        store.add_deadline(conn, queue.EXPIRE_DEADLINE, "gone", time.time() - 1)
        wait_until(lambda: conn.zcard(store.DEADLINES_KEY) == 0, 10, "the deadline swept")
        conn.close()
    finally:
        stop.set()
        loop.join(10)
        server.terminate()
        server.wait(10)


def _logged(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]
