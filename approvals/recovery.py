"""Finding resumes whose worker died, and settling them without running anything twice.

RQ runs jobs at least once, and notices a dead worker only after minutes. A resume holds a
short lease in Redis while it runs; when the lease lapses, ``recover_dead_runs`` settles the
approval atomically: if the gated tool had not started, the approval simply goes back to its
decision and is resumed again; if it had, the approval becomes ``interrupted`` and a person
decides whether running it again is safe (``retry``).
"""

from __future__ import annotations

import logging

import redis

from approvals import queue, store
from approvals.config import Settings

log = logging.getLogger(__name__)

#: A live resume renews its lease every third of this; a dead one is found within it.
LEASE_SECONDS = 15


def recover_dead_runs(conn: redis.Redis, settings: Settings) -> dict[str, str]:
    """Settle every running approval whose worker is gone; returns what happened to each."""
    outcomes: dict[str, str] = {}
    for approval_id in store.running_ids(conn):
        outcome = store.recover(conn, approval_id)
        outcomes[approval_id] = outcome
        if outcome == "interrupted":
            log.warning("approval %s: worker died after the tool started", approval_id)
            store.audit(conn, approval_id, "interrupted", "system", reason="worker died")
            queue.enqueue_interrupted(conn, settings, approval_id)
        elif outcome == "requeue":
            log.warning(
                "approval %s: worker died before the tool started; resuming again", approval_id
            )
            store.audit(conn, approval_id, "requeued", "system", reason="worker died")
            queue.enqueue_resume(conn, settings, approval_id, again=True)
    return outcomes
