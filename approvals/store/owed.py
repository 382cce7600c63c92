"""What a decision leaves owed, and carrying it out exactly once.

A decision's compare-and-set (``transitions``) also writes the field ``owed``: its audit entry,
webhook, metrics, and the caller woken or the resume queued are still to come. ``carry_out`` does
them in one transaction and clears the debt; the decider calls it at once, recovery later if the
decider could not. Decisions not yet shown on their card are kept apart (``note_unshown``), so a
worker redraws the card if Slack refused to.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from approvals.models import (
    Approval,
)
from approvals.store.audit import GENESIS, entry_hash, new_trail
from approvals.store.connection import eval_script, text
from approvals.store.keys import EVENTS_KEY, OWED_KEY, UNSHOWN_KEY, approval_key, audit_key
from approvals.store.records import flags, from_hash
from approvals.store.transitions import OWED


@dataclass(frozen=True)
class Owed:
    """What a decision (or a Retry) left owed, as read in the step that carries it out."""

    approval: Approval
    #: ``OWED_DECISION``, ``OWED_RECEIPT`` or ``OWED_RETRY``.
    what: str
    #: Why the decider could not sign the receipt (``keep_signature``), if it said so.
    receipt_error: str | None
    #: Who asked for the Retry (``OWED_RETRY``).
    retried_by: str | None


#: What ``carry_out`` asks of its caller: the audit lines to append, and a function that adds
#: the rest of the step's writes to its transaction (a pipeline in MULTI).
Plan = tuple[Sequence[str], Callable[[Any], None]]


def carry_out(conn: redis.Redis, approval_id: str, plan: Callable[[Owed], Plan]) -> Owed | None:
    """Carry out what a decision left owed, exactly once, in one transaction: the audit lines
    ``plan`` builds from what is owed (chained, with their webhook events), whatever else it
    adds (metrics, the caller woken, the resume queued), and the end of the debt.

    Optimistic: the record and its trail are watched while the step is built, so the decider
    and any number of workers may try at once; one carries it out, the others find it done.
    Returns what was owed when this call carried it out, None when nothing was owed.
    """
    key, trail = approval_key(approval_id), audit_key(approval_id)
    with conn.pipeline(transaction=True) as pipe:
        while True:
            try:
                cast(Any, pipe).watch(key, trail)  # redis-py leaves it untyped
                raw = cast(dict[bytes, bytes], pipe.hgetall(key))
                if OWED.encode() not in raw:
                    return None
                owed = Owed(
                    from_hash(approval_id, raw),
                    text(raw[OWED.encode()]),
                    text(raw.get(b"receipt_error")) or None,
                    text(raw.get(b"retried_by")) or None,
                )
                last = cast(bytes | None, pipe.lindex(trail, -1))
                events, more = plan(owed)
                prev = GENESIS if last is None else entry_hash(last)
                lines, outbox = new_trail(approval_id, events, prev)
                pipe.multi()
                if lines:
                    pipe.rpush(trail, *lines)
                if outbox:
                    pipe.rpush(EVENTS_KEY, *outbox)
                pipe.hdel(key, OWED, "receipt_error")
                pipe.zrem(OWED_KEY, approval_id)
                more(pipe)
                pipe.execute()
                return owed
            except redis.WatchError:  # the record or the trail moved meanwhile: again
                continue


# KEYS: approval hash. ARGV: field/value pairs. Written only while what follows the decision
# is still owed: a receipt signed after a worker carried the decision out would be one its
# audit entry does not carry.
_KEEP_SIGNATURE_LUA = """
if redis.call('HEXISTS', KEYS[1], 'owed') == 0 then return 0 end
for i = 1, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


def keep_signature(conn: redis.Redis, approval_id: str, signature: dict[str, str]) -> bool:
    """Store the decider's ``receipt`` (or ``receipt_error``: why it could not sign one) on a
    decision whose after-steps are still owed; False, and nothing written, once they are not."""
    pairs = [part for item in signature.items() for part in item]
    return bool(eval_script(conn, _KEEP_SIGNATURE_LUA, [approval_key(approval_id)], pairs))


def owed_until(conn: redis.Redis, until: float, limit: int = 100) -> list[str]:
    """Up to ``limit`` decisions made by ``until`` whose after-steps are still owed."""
    found = conn.zrangebyscore(OWED_KEY, "-inf", repr(until), start=0, num=limit)
    return [text(i) for i in cast(list[bytes], found)]


def owing(conn: redis.Redis, approval_ids: Sequence[str]) -> set[str]:
    """Which of these approvals still owe what follows their decision, in one round trip."""
    pipe = conn.pipeline(transaction=False)
    for approval_id in approval_ids:
        pipe.hexists(approval_key(approval_id), OWED)
    return {i for i, owes in zip(approval_ids, pipe.execute(), strict=True) if owes}


def forget_owed(conn: redis.Redis, approval_id: str) -> None:
    """Drop an entry of the owed index whose approval is gone (retention, or by hand)."""
    conn.zrem(OWED_KEY, approval_id)


def note_unshown(target: Any, approval_id: str, due: float) -> None:
    """Note a decision to show on its card, looked at again from ``due`` on if nobody has
    (``target``: a client or the pipeline of ``carry_out``)."""
    target.zadd(UNSHOWN_KEY, {approval_id: due})


def unshown_until(conn: redis.Redis, until: float, limit: int = 100) -> list[tuple[str, float]]:
    """Up to ``limit`` (id, due) of decisions not shown on their card, due by ``until``."""
    found = conn.zrangebyscore(UNSHOWN_KEY, "-inf", repr(until), start=0, num=limit,
                               withscores=True)  # fmt: skip
    return [(text(i), float(due)) for i, due in cast(list[tuple[bytes, float]], found)]


def forget_unshown(conn: redis.Redis, approval_id: str) -> None:
    """The decision is shown on its card (or there is no card to show it on)."""
    conn.zrem(UNSHOWN_KEY, approval_id)


# KEYS: unshown zset. ARGV: id, the due time it was read with, the next one.
_POSTPONE_LUA = """
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not due) or tonumber(due) ~= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
"""


def postpone_unshown(conn: redis.Redis, approval_id: str, due: float, until: float) -> bool:
    """Move an unshown decision's next look from ``due`` to ``until``; True for the one caller
    that found it still due at ``due`` (so two workers never both act on one look)."""
    args = [approval_id, repr(due), repr(until)]
    return bool(eval_script(conn, _POSTPONE_LUA, [UNSHOWN_KEY], args))


#: Claimed (with the decision's time) by whoever shows a decision on the card first.
DECISION_SHOWN = "decision_shown"


def shown_flag(approval: Approval) -> str:
    """The flag (``records.claim``) of showing this decision on the card: one per decision."""
    assert approval.decision is not None
    return f"{DECISION_SHOWN}:{approval.decision.at!r}"


#: Set once the reply that records a decision is in the card's thread (after ``DECISION_SHOWN``).
DECISION_REPLIED = "decision_replied"


def replied_flag(approval: Approval) -> str:
    """The flag set once this decision's thread reply is posted: one per decision."""
    assert approval.decision is not None
    return f"{DECISION_REPLIED}:{approval.decision.at!r}"


def mark_replied(conn: redis.Redis, approval: Approval) -> None:
    """The decision's reply is in the thread: what the run did may be posted after it."""
    conn.hset(approval_key(approval.id), replied_flag(approval), repr(time.time()))


def reply_state(conn: redis.Redis, approval: Approval) -> tuple[bool, bool, bool]:
    """Whether the decision's reply is owed (not shown yet, per ``note_unshown``), claimed by
    the one who shows it, and posted: read in one round trip."""
    with conn.pipeline(transaction=False) as pipe:
        pipe.zscore(UNSHOWN_KEY, approval.id)
        pipe.hmget(approval_key(approval.id), [shown_flag(approval), replied_flag(approval)])
        unshown, (shown, replied) = pipe.execute()
    return unshown is not None, shown is not None, replied is not None


def decision_shown(conn: redis.Redis, approval: Approval) -> bool:
    """Whether the approval's decision was shown on its card (``slack.web.announce_decision``).

    A decider that could not show it (Slack down, the process gone) leaves it to recovery,
    which finds it not shown and queues ``announce_decision`` as a job.
    """
    if approval.decision is None:
        return False
    return flags(conn, approval.id, shown_flag(approval))[0]
