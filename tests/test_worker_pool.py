"""`approvals worker --processes N` keeps N workers alive."""

from __future__ import annotations

import os
import signal

import redis
from rq import Worker

from tests.processes import Process, approvals_command, wait_until


def _worker_pids(conn: redis.Redis) -> set[int]:
    return {w.pid for w in Worker.all(connection=conn) if w.pid}


def test_a_worker_that_dies_is_replaced(env, tmp_path):
    """SIGKILL one of two pooled workers: a new one registers; the other keeps running."""
    conn = redis.Redis.from_url(env["REDIS_URL"])
    pool = Process(approvals_command("worker", "--processes", "2"), env, tmp_path / "pool.log")
    try:
        first = wait_until(
            lambda: len(_worker_pids(conn)) == 2 and _worker_pids(conn), 60, "2 workers"
        )
        victim, survivor = sorted(first)
        os.kill(victim, signal.SIGKILL)
        # The dead one stays registered until its TTL lapses: look for a new pid.
        second = wait_until(
            lambda: _worker_pids(conn) - first and _worker_pids(conn), 60, "a replacement worker"
        )
        assert survivor in second
        assert "worker-" in pool.output() and "exited with code" in pool.output()
    finally:
        pool.stop()
        conn.close()
