"""Deadlines (an approval's expiry, and the warning before it) turned into jobs when due.

The deadlines live in one Redis sorted set (``store.deadlines.add_deadline``), written with the
pause, so they survive restarts of every process. Each worker sweeps it a few times a second; a
due entry is taken atomically (one worker gets it), becomes a job, and is dropped. A worker
that dies between taking and dropping leaves the entry held for ``HOLD_SECONDS``, after which
it is due again: a deadline may become two jobs, never none, and its jobs are idempotent (a
decided approval does not expire, a warning is posted once).
"""

from __future__ import annotations

import time

import redis

from approvals import store
from approvals.config import Settings
from approvals.store import queue

#: How often each worker looks for due deadlines: an expiry fires at most this late.
SWEEP_INTERVAL = 0.5
#: How long a taken deadline is held back from other workers before it counts as lost.
HOLD_SECONDS = 30.0
#: A deadline this far overdue means no worker is sweeping (``approvals doctor`` says so).
OVERDUE_SECONDS = 60.0


def sweep(conn: redis.Redis, settings: Settings, now: float | None = None) -> int:
    """Enqueue a job for every deadline due by ``now``; returns how many."""
    taken = store.deadlines.take_due_deadlines(
        conn, time.time() if now is None else now, HOLD_SECONDS
    )
    for kind, approval_id in taken:
        queue.enqueue_deadline(conn, settings, kind, approval_id)
        store.deadlines.drop_deadline(conn, kind, approval_id)
    return len(taken)
