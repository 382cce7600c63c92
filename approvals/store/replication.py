"""Whether enough replicas hold what was just written (``APPROVALS_MIN_REPLICAS``).

Redis replicates asynchronously: a primary acknowledges a write before any replica has it,
and a failover to a replica that had not got it yet loses it. ``WAIT`` closes that gap: it
blocks until that many replicas acknowledged the writes of the connection it is sent on.
The writes it should cover were made on other pooled connections, so a small write of our
own goes first, on the WAIT's own connection: Redis runs commands one at a time, so a replica
that has it has everything written before it.
"""

from __future__ import annotations

import time

import redis

from approvals.config import Settings
from approvals.store.keys import REPLICATED_KEY


def replicated(conn: redis.Redis, settings: Settings) -> bool:
    """Whether ``settings.min_replicas`` replicas hold every write made before this call,
    waiting at most ``settings.min_replicas_timeout`` for them (True at once without a
    minimum)."""
    wanted = settings.min_replicas
    if wanted <= 0:
        return True
    pipe = conn.pipeline(transaction=False)  # one connection: the write, then its WAIT
    pipe.set(REPLICATED_KEY, repr(time.time()))
    pipe.wait(wanted, max(1, round(settings.min_replicas_timeout * 1000)))
    _, acknowledged = pipe.execute()
    return int(acknowledged) >= wanted
