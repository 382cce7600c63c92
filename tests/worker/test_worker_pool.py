"""`approvals worker --processes N` runs RQ's WorkerPool: N workers, a dead one replaced."""

from __future__ import annotations

import os
import signal

import redis
from rq import Worker

from approvals import run_agent
from approvals.config import Settings
from approvals.decisions.review import decide
from approvals.models import DecisionKind, Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.e2e import card_of, reply_containing, tool_runs, wait_status
from tests.processes import Process, approvals_command, wait_until


def _worker_pids(conn: redis.Redis) -> set[int]:
    """The pids of the workers registered in RQ (a killed one stays until its TTL lapses)."""
    return {w.pid for w in Worker.all(connection=conn) if w.pid}


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except FileNotFoundError:
        return None


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
            found |= {int(child) for child in f.read().split()}
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return _parent(pid) is not None


def test_a_pool_keeps_its_workers_resumes_and_stops_on_sigterm(slack, env, conn, tmp_path):
    """Two workers under one pool; SIGKILL one and a new one registers while the other keeps
    running; an approval is resumed; SIGTERM to the pool stops every worker."""
    pool = Process(approvals_command("worker", "--processes", "2"), env, tmp_path / "pool.log")
    try:
        first = wait_until(
            lambda: len(_worker_pids(conn)) == 2 and _worker_pids(conn), 60, "2 workers"
        )
        assert {_parent(pid) for pid in first} == {pool.popen.pid}  # one pool forked both
        victim, survivor = sorted(first)
        # The worker dies with what it forked (RQ's scheduler, if it holds the lock). A child
        # left alive keeps the dead worker's Redis socket open, blocked in its dequeue: Redis
        # would hand it the next job, which RQ puts back in the queue only a minute later.
        for pid in (victim, *_children(victim)):
            os.kill(pid, signal.SIGKILL)
        second = wait_until(
            lambda: _worker_pids(conn) - first and _worker_pids(conn), 60, "a replacement worker"
        )
        (replacement,) = second - first
        assert survivor in second and _alive(survivor)
        assert _parent(replacement) == pool.popen.pid

        prompt = script(calls(("delete_path", {"path": "/tmp/pooled"})), say("done in the pool"))
        pause_id = run_agent("scripted", prompt, tools=[delete_path]).pause_id
        assert pause_id
        card = card_of(slack, pause_id)
        decide(conn, Settings.from_env(), pause_id, DecisionKind.APPROVE, "UALICE")
        wait_status(conn, pause_id, Status.COMPLETED)
        reply_containing(slack, card.ts, "done in the pool")
        assert len(tool_runs(env, "delete_path")) == 1

        os.kill(pool.popen.pid, signal.SIGTERM)  # the pool alone, as a service manager would
        assert pool.popen.wait(30) == 0
        assert not _alive(survivor) and not _alive(replacement)
        # Each stopped worker took itself out of RQ's registry; only the killed one is left.
        assert _worker_pids(conn) == {victim}
    finally:
        pool.stop()
