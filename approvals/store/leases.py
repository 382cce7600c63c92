"""A running resume's lease: held by its worker with a TTL, so a dead worker's resume is found
(``recover``) and settled atomically: resumed again, or ``interrupted`` if its tool started."""

from __future__ import annotations

import time
from typing import cast

import redis

from approvals.models import (
    TRANSITIONS,
    Status,
)
from approvals.store.connection import eval_script, text
from approvals.store.keys import METRICS_KEY, RUNNING_KEY, approval_key, lease_key


def hold_lease(conn: redis.Redis, approval_id: str, ttl: int) -> None:
    """Say "a live worker runs this resume"; it lapses ``ttl`` seconds after its holder dies."""
    conn.set(lease_key(approval_id), repr(time.time()), ex=ttl)


def drop_lease(conn: redis.Redis, approval_id: str) -> None:
    conn.delete(lease_key(approval_id))


def running_ids(conn: redis.Redis) -> list[str]:
    """Approvals whose resume is (or was, if its worker died) running."""
    return [text(i) for i in cast(list[bytes], conn.zrange(RUNNING_KEY, 0, -1))]


# KEYS: approval hash, running zset, lease, metrics hash. ARGV: id.
_RECOVER_LUA = """
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'running' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 'gone'
end
if redis.call('EXISTS', KEYS[3]) == 1 then return 'alive' end
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('HEXISTS', KEYS[1], 'tool_started') == 1 then
  redis.call('HSET', KEYS[1], 'status', 'interrupted')
  redis.call('HINCRBY', KEYS[4], 'resumes:interrupted', 1)
  return 'interrupted'
end
redis.call('HSET', KEYS[1], 'status', redis.call('HGET', KEYS[1], 'decided_status'))
return 'requeue'
"""


def recover(conn: redis.Redis, approval_id: str) -> str:
    """Settle a running approval whose worker died (its lease lapsed), atomically.

    Returns ``alive`` (a worker still holds it), ``gone`` (no longer running), ``interrupted``
    (the gated tool may have run: a person must decide) or ``requeue`` (the tool never
    started: the approval is back to its decided status and can simply be resumed again).
    """
    assert Status.INTERRUPTED in TRANSITIONS[Status.RUNNING]
    keys = [approval_key(approval_id), RUNNING_KEY, lease_key(approval_id), METRICS_KEY]
    return text(eval_script(conn, _RECOVER_LUA, keys, [approval_id]))
