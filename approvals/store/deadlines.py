"""The one sorted set of every deadline (expiry, warning, reminder, escalation), scored by when
it is due; ``approvals.decisions.deadlines`` says what each kind means and sweeps them."""

from __future__ import annotations

from typing import Any, cast

import redis

from approvals.store.connection import eval_script, text
from approvals.store.keys import DEADLINES_KEY


def add_deadline(target: Any, kind: str, approval_id: str, due: float) -> None:
    """Remember that ``kind`` (expire, warn, remind, escalate) is due for an approval at ``due``.

    ``target`` is a client or a pipeline (the pause writes it in its own transaction).
    """
    target.zadd(DEADLINES_KEY, {f"{kind}:{approval_id}": due})


_TAKE_DUE_LUA = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', ARGV[2], member)
end
return due
"""


def take_due_deadlines(
    conn: redis.Redis, now: float, hold_for: float, limit: int = 100
) -> list[tuple[str, str]]:
    """The (kind, approval id) pairs due by ``now``, held back ``hold_for`` seconds so that no
    other worker takes them meanwhile; one not dropped by then (its taker died) is due again.
    """
    members = cast(
        list[bytes],
        eval_script(conn, _TAKE_DUE_LUA, [DEADLINES_KEY], [repr(now), repr(now + hold_for), limit]),
    )
    taken = []
    for member in members:
        kind, _, approval_id = text(member).partition(":")
        taken.append((kind, approval_id))
    return taken


def drop_deadline(conn: redis.Redis, kind: str, approval_id: str) -> None:
    conn.zrem(DEADLINES_KEY, f"{kind}:{approval_id}")


def deadline_counts(conn: redis.Redis, now: float, late_by: float) -> tuple[int, int]:
    """(deadlines ahead, deadlines more than ``late_by`` seconds overdue)."""
    pipe = conn.pipeline(transaction=False)
    pipe.zcard(DEADLINES_KEY)
    pipe.zcount(DEADLINES_KEY, "-inf", repr(now - late_by))
    total, late = cast(list[int], pipe.execute())
    return total - late, late
