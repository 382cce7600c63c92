"""A turn: the calls of one model response that share a card, and the one decision that
settles the turn's last call (and so queues its single resume)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import redis

from approvals.errors import CorruptRecord
from approvals.models import (
    Status,
)
from approvals.store.connection import eval_script, json_value, text
from approvals.store.keys import approval_key

# KEYS: the hashes of every approval of a turn, its lead's first. ARGV: the flag.
_TURN_SETTLED_LUA = """
for i = 1, #KEYS do
  local status = redis.call('HGET', KEYS[i], 'status')
  if (not status) or status == 'pending' then return 0 end
  -- Decided, but its receipt and audit entry are not carried out yet: its own step settles.
  if redis.call('HEXISTS', KEYS[i], 'owed') == 1 then return 0 end
end
return redis.call('HSETNX', KEYS[1], ARGV[1], '1')
"""

#: Set on a turn's lead by the one decision that settled the turn's last call.
TURN_SETTLED = "turn_settled"


def settle_turn(conn: redis.Redis, turn: Sequence[str]) -> bool:
    """True for exactly one caller, the first to find every call of the turn decided (or
    expired) and carried out (``carry_out``): that caller queues the turn's one resume. Each
    decision calls it after its own step, so the last of two simultaneous decisions always
    finds both, and the resume never starts before a call's receipt is stored."""
    return bool(eval_script(conn, _TURN_SETTLED_LUA, [approval_key(i) for i in turn],
                            [TURN_SETTLED]))  # fmt: skip


def turn_of(conn: redis.Redis, approval_id: str) -> tuple[str, ...]:
    """The calls of the turn ``approval_id`` is part of, lead first (empty when it is alone
    in its turn, or unknown), read from its record alone: the resume job asks before every
    run, so it does not build the whole approval for it."""
    record = json_value(cast(bytes | None, conn.hget(approval_key(approval_id), "record")))
    turn = record.get("turn", []) if isinstance(record, dict) else []
    if not isinstance(turn, list) or not all(isinstance(call, str) for call in turn):
        raise CorruptRecord("field 'turn' must be a list of strings")
    return tuple(turn) if len(turn) > 1 else ()


def turn_pending(conn: redis.Redis, turn: Sequence[str]) -> list[str]:
    """The calls of a turn still waiting for a decision."""
    pipe = conn.pipeline(transaction=False)
    for approval_id in turn:
        pipe.hget(approval_key(approval_id), "status")
    return [i for i, s in zip(turn, pipe.execute(), strict=True)
            if text(s) in ("", Status.PENDING.value)]  # fmt: skip
