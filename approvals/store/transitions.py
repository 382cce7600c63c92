"""The one atomic move between statuses: a Lua compare-and-set that checks
``models.TRANSITIONS`` and writes the new status, its fields, its audit entry and every index in
one step, so two deciders can never both leave ``pending``; and ``vote``, which counts the
approvals of a quorum the same way."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from approvals.models import (
    Approval,
    Status,
    sources_of,
)
from approvals.store.audit import chained
from approvals.store.connection import eval_script, text
from approvals.store.keys import (
    DEADLINES_KEY,
    DECIDED_KEY,
    EVENTS_KEY,
    FINISHED_HISTORY_KEY,
    FINISHED_KEY,
    METRICS_KEY,
    OWED_KEY,
    PENDING_KEY,
    RUNNING_KEY,
    approval_key,
    audit_key,
    lease_key,
)
from approvals.store.records import FINISHED_LUA

#: The approval hash's field that a decision's compare-and-set writes, in the same step:
#: what follows the decision (its audit entry, webhook, metrics, the caller woken or the
#: resume queued) is owed. ``carry_out`` does it and removes the field, exactly once; the
#: decider calls it at once, recovery when the decider did not. Its value says what is owed.
OWED = "owed"
#: What is owed: what follows a decision; the same, with the receipt its decider signs (kept
#: by ``keep_signature``; a worker finishing it says none was signed); what follows a Retry.
OWED_DECISION = "decision"
OWED_RECEIPT = "receipt"
OWED_RETRY = "retry"

# Shared by the scripts: keep the pending, recent-decision and running indexes in step, and
# note what a decision leaves owed (KEYS[11], the owed zset).
_LEAVE_PENDING_LUA = (
    FINISHED_LUA
    + """
local function owe(what)
  redis.call('HSET', KEYS[1], 'owed', what)
  redis.call('ZADD', KEYS[11], ARGV[2], ARGV[1])
end
local function leave_pending(current, owed)
  if current == 'pending' then
    if owed == '' then owed = 'OWED_DECISION' end
    owe(owed)
    redis.call('HSET', KEYS[1], 'decided_status', ARGV[3])
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
    redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(RECENT_KEPT + 1))
    redis.call('ZREM', KEYS[5], 'expire:' .. ARGV[1], 'warn:' .. ARGV[1],
               'remind:' .. ARGV[1], 'escalate:' .. ARGV[1])
  end
end
local function track_running(current, target)
  if current == 'running' then redis.call('ZREM', KEYS[4], ARGV[1]) end
  if target == 'running' then redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1]) end
  if current == 'running' and (target == 'completed' or target == 'paused'
      or target == 'failed' or target == 'interrupted') then
    redis.call('HINCRBY', KEYS[8], 'resumes:' .. target, 1)
  end
end
local function index_finished(target)
  if finished(KEYS[1], target) then
    redis.call('ZADD', KEYS[9], ARGV[2], ARGV[1])
    redis.call('ZADD', KEYS[10], ARGV[2], ARGV[1])
  end
end
""".replace("RECENT_KEPT", "200").replace("OWED_DECISION", OWED_DECISION)
)

# KEYS: approval hash, pending zset, decided zset, running zset, deadlines zset, audit list,
# lease, metrics hash, finished zset, finished-history zset, owed zset, events outbox. ARGV:
# id, now, target, allowed (JSON), audit line, lease seconds, the audit length the line was
# chained at, outbox entry, what the move leaves owed ("": nothing, unless it is a decision),
# then field/value pairs written in the same step ("" deletes the field).
# Returns {2, ...} without writing when the audit moved on.
_TRANSITION_LUA = (
    _LEAVE_PENDING_LUA
    + """
local current = redis.call('HGET', KEYS[1], 'status')
if not current then return {0, '', ''} end
for _, status in ipairs(cjson.decode(ARGV[4])) do
  if status == current then
    if ARGV[5] ~= '' and redis.call('LLEN', KEYS[6]) ~= tonumber(ARGV[7]) then
      return {2, current, ''}
    end
    redis.call('HSET', KEYS[1], 'status', ARGV[3])
    if ARGV[5] ~= '' then redis.call('RPUSH', KEYS[6], ARGV[5]) end
    if ARGV[8] ~= '' then redis.call('RPUSH', KEYS[12], ARGV[8]) end
    if ARGV[6] ~= '' then redis.call('SET', KEYS[7], ARGV[2], 'EX', ARGV[6]) end
    if current == 'running' and ARGV[3] ~= 'running' then redis.call('DEL', KEYS[7]) end
    for i = 10, #ARGV, 2 do
      if ARGV[i + 1] == '' then
        redis.call('HDEL', KEYS[1], ARGV[i])
      else
        redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
      end
    end
    leave_pending(current, ARGV[9])
    if current ~= 'pending' and ARGV[9] ~= '' then owe(ARGV[9]) end
    track_running(current, ARGV[3])
    index_finished(ARGV[3])
    if ARGV[3] == 'pending' then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1]) end
    return {1, current, ''}
  end
end
return {0, current, redis.call('HGET', KEYS[1], 'decided_by') or ''}
"""
)

# KEYS as above. ARGV: id, now, target, actor, approvals required, decision JSON, what the
# decision leaves owed. Adds the actor's approval; the approval is decided once enough
# distinct people approved.
_VOTE_LUA = (
    _LEAVE_PENDING_LUA
    + """
local current = redis.call('HGET', KEYS[1], 'status')
if not current then return {0, '', ''} end
if current ~= 'pending' then
  return {0, current, redis.call('HGET', KEYS[1], 'decided_by') or ''}
end
local votes = cjson.decode(redis.call('HGET', KEYS[1], 'votes') or '[]')
for _, voter in ipairs(votes) do
  if voter == ARGV[4] then return {3, tostring(#votes), ''} end
end
table.insert(votes, ARGV[4])
redis.call('HSET', KEYS[1], 'votes', cjson.encode(votes))
if #votes < tonumber(ARGV[5]) then return {2, tostring(#votes), ''} end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'decided_by', ARGV[4], 'decision', ARGV[6])
leave_pending(current, ARGV[7])
return {1, current, cjson.encode(votes)}
"""
)


@dataclass(frozen=True)
class TransitionResult:
    ok: bool
    #: The status found before the attempt ("" when the approval does not exist).
    previous: str
    #: Who decided, when the attempt lost against an earlier decision.
    decided_by: str | None


@dataclass(frozen=True)
class VoteResult:
    #: ``decided``, ``counted`` (quorum not reached yet), ``duplicate`` or ``lost``.
    outcome: str
    #: For ``lost``: the status found ("" when the approval does not exist).
    previous: str = ""
    decided_by: str | None = None
    #: Approvals counted so far, for ``counted`` and ``duplicate``.
    count: int = 0
    #: For ``decided``: everyone whose approval counted, in order.
    voters: tuple[str, ...] = ()


def _index_keys(approval_id: str) -> list[str]:
    return [approval_key(approval_id), PENDING_KEY, DECIDED_KEY, RUNNING_KEY, DEADLINES_KEY]


def _transition_keys(approval_id: str) -> list[str]:
    return [
        *_index_keys(approval_id),
        audit_key(approval_id),
        lease_key(approval_id),
        METRICS_KEY,
        FINISHED_KEY,
        FINISHED_HISTORY_KEY,
        OWED_KEY,
    ]


def transition(
    conn: redis.Redis,
    approval_id: str,
    target: Status,
    fields: dict[str, str] | None = None,
    *,
    sources: Iterable[Status] | None = None,
    event: str | None = None,
    lease: int | None = None,
    owed: str = "",
) -> TransitionResult:
    """Move an approval to ``target`` if ``models.TRANSITIONS`` allows it from its current status.

    ``sources`` narrows where it may come from: a decision only ever leaves ``pending``, even
    though ``running`` may also return to a decided status when recovery requeues it.
    ``fields`` are written in the same atomic step, and so are, when the move happens, the
    audit entry ``event`` (an ``audit_entry`` line) and a lease of ``lease`` seconds (see
    ``hold_lease``): one round trip, and no moment where one is there without the other. A
    move out of ``running`` ends the run's lease. A move out of ``pending`` (a decision)
    leaves what follows it owed (``OWED``, ``owed`` says what: ``OWED_DECISION`` by
    default), and so does any move given ``owed``.
    Returns what was found, so a loser can be told who won.
    """
    legal = sources_of(target)
    chosen = legal if sources is None else [s for s in sources if s in legal]
    assert sources is None or len(chosen) == len(set(sources)), "not in TRANSITIONS"
    allowed = json.dumps([s.value for s in chosen])
    keys = [*_transition_keys(approval_id), EVENTS_KEY]
    while True:
        line, length, outbox = chained(conn, approval_id, event) if event else ("", 0, "")
        args: list[str] = [approval_id, repr(time.time()), target.value, allowed, line]
        args += [str(lease) if lease is not None else "", str(length), outbox, owed]
        for name, value in (fields or {}).items():
            args += [name, value]
        found = cast(list[Any], eval_script(conn, _TRANSITION_LUA, keys, args))
        ok, previous, decided_by = found
        if ok != 2:  # 2: another entry was appended meanwhile; chain to that one instead
            return TransitionResult(bool(ok), text(previous), text(decided_by) or None)


def vote(
    conn: redis.Redis,
    approval_id: str,
    target: Status,
    actor: str,
    required: int,
    decision: str,
    owed: str = OWED_DECISION,
) -> VoteResult:
    """Count ``actor``'s approval; decide (``target``, ``decision`` JSON) once ``required``,
    leaving ``owed`` what follows the decision (see ``transition``)."""
    assert Status.PENDING in sources_of(target)
    args = [approval_id, repr(time.time()), target.value, actor, str(required), decision, owed]
    found = eval_script(conn, _VOTE_LUA, _transition_keys(approval_id), args)
    code, detail, decided_by = cast(list[Any], found)
    if code == 1:
        voters = tuple(str(v) for v in json.loads(text(decided_by)))
        return VoteResult("decided", count=required, voters=voters)
    if code in (2, 3):
        return VoteResult("counted" if code == 2 else "duplicate", count=int(text(detail)))
    return VoteResult("lost", previous=text(detail), decided_by=text(decided_by) or None)


# KEYS: approval hash, pending zset, decided zset, owed zset, deadlines zset. ARGV: id, actor,
# target status, created_at, then deadline member/score pairs to put back.
_UNDO_LUA = """
local votes = cjson.decode(redis.call('HGET', KEYS[1], 'votes') or '[]')
local kept = {}
for _, voter in ipairs(votes) do
  if voter ~= ARGV[2] then table.insert(kept, voter) end
end
if #kept == 0 then redis.call('HDEL', KEYS[1], 'votes')
elseif #kept ~= #votes then redis.call('HSET', KEYS[1], 'votes', cjson.encode(kept)) end
if redis.call('HGET', KEYS[1], 'status') ~= ARGV[3]
    or redis.call('HGET', KEYS[1], 'decided_by') ~= ARGV[2]
    or not redis.call('HGET', KEYS[1], 'owed') then
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'pending')
redis.call('HDEL', KEYS[1], 'decision', 'decided_by', 'decided_status', 'owed')
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
for i = 5, #ARGV, 2 do redis.call('ZADD', KEYS[5], ARGV[i + 1], ARGV[i]) end
return 1
"""

#: The deadlines a decision removes (``leave_pending``), which its undoing puts back.
_DEADLINE_KINDS = ("expire", "warn", "remind", "escalate")


def deadlines_of(conn: redis.Redis, approval_id: str) -> list[tuple[str, float]]:
    """The pending approval's deadlines, as ``undo_decision`` puts them back."""
    members = [f"{kind}:{approval_id}" for kind in _DEADLINE_KINDS]
    scores = cast(list[Any], conn.zmscore(DEADLINES_KEY, members))
    return [(m, float(s)) for m, s in zip(members, scores, strict=True) if s is not None]


def undo_decision(
    conn: redis.Redis,
    approval: Approval,
    actor: str,
    target: Status,
    deadlines: Sequence[tuple[str, float]],
) -> bool:
    """Take back ``actor``'s vote or decision, which replicas did not confirm: the approval
    is pending again, with its ``deadlines``, as if the click never came. Only while nothing
    followed it (what it owed is still owed); True when a decision was undone."""
    keys = [approval_key(approval.id), PENDING_KEY, DECIDED_KEY, OWED_KEY, DEADLINES_KEY]
    args: list[Any] = [approval.id, actor, target.value, repr(approval.created_at)]
    for member, score in deadlines:
        args += [member, repr(score)]
    return bool(eval_script(conn, _UNDO_LUA, keys, args))
