"""The only code that talks to Redis about approvals; every key name is defined here.

Keys (all under the ``approvals:`` prefix)::

    approvals:approval:<id>   hash    record (JSON), status, decided_by, decision, result, card_ts
    approvals:history:<id>    string  the llm message history to resume from (JSON list)
    approvals:pending         zset    ids of pending approvals, scored by creation time
    approvals:decided         zset    the most recent decisions, scored by decision time
    approvals:owed            zset    decisions whose after-steps are not carried out yet, by
                                      decision time (the field ``owed`` of their hash says what)
    approvals:unshown         zset    decisions not shown on their card yet, by when a worker
                                      should look again
    approvals:running         zset    ids of approvals whose resume is running, by start time
    approvals:lease:<id>      string  held (with a TTL) by the worker running the resume
    approvals:lock:<id>:<what> string a short lock on one piece of work (posting the card)
    approvals:usergroup:<id>  string  cached members of a Slack user group (JSON list, TTL)
    approvals:channel-members:<id> string  cached members of an escalation channel (JSON, TTL)
    approvals:audit:<id>      list    what happened to the approval (JSON lines: event, actor, at,
                                      prev: the SHA-256 of the line before, a chain per approval)
    approvals:events          list    the outbox: one entry per state change, for the webhooks
    approvals:events:taking   list    outbox entries a worker is turning into delivery jobs
    approvals:webhook:<msg>   string  a webhook body, the same bytes on every retry (TTL)
    approvals:webhook-failing hash    receiver URL -> when it began failing (until it answers)
    approvals:receipt:<jti>   string  a receipt already presented (``check_not_replayed``, TTL)
    approvals:deadlines       zset    "expire:<id>", "warn:<id>", "remind:<id>", "escalate:<id>",
                                      scored by when they are due
    approvals:seen:<sig>      string  a Slack request signature already accepted (TTL)
    approvals:run:<run_id>    stream  wakes a run's waiters: "paused" again after a resume, "ended"
    approvals:run:<run_id>:pauses list  the run's pause ids, in order (TTL)
    approvals:outcome:<run_id> hash   outcome (JSON), on_finish, on_finish_called (TTL)
    approvals:finishing       zset    runs whose on_finish has not returned, by when they ended
    approvals:finished        zset    finished approvals whose record is still here, by when
    approvals:finished:history zset   finished approvals whose history is still here, by when
    approvals:ended           zset    ended runs whose outcome is not archived yet, by when
    approvals:metrics         hash    counters and histogram buckets behind ``/metrics``
    approvals:lock:retention  string  held by the worker sweeping retention (TTL)
    approvals:grant:<id>      hash    record (JSON), expires_at, uses, revoked_at, revoked_by
    approvals:grants          zset    grant ids, scored by creation time
    approvals:grants:tool:<name> zset grant ids for one tool (what a gated call looks at)
    approvals:answer:<id>     stream  wakes the caller waiting on an external approval (TTL)
    approvals:tokens          hash    API token digest (SHA-256) -> its record (JSON)
    approvals:idem:<agent>:<digest> string the approval an idempotency key created (TTL)
    approvals:rate:<token>:<minute> string requests a token made in that minute (TTL)

Audit entries are chained: each carries the hash of the one before it, and is appended by a
compare-and-append (the list must still have the length the hash was read at), so entries
written at the same moment by the bot and a worker still form one chain. An entry that is a
state change is put in the ``events`` outbox in the same step, so a webhook is never lost.

The history lives apart from the hash so that listing and deciding never read it. Status
changes go through ``transition``, a Lua compare-and-set: it checks the current status against
``models.TRANSITIONS`` and writes in one step, so concurrent deciders cannot both win.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
import redis.asyncio as redis_async
from redis.commands.core import Script
from redis.driver_info import DriverInfo

from approvals.config import Settings
from approvals.errors import CorruptRecord, UnknownApproval
from approvals.models import (
    TRANSITIONS,
    Approval,
    Status,
    approval_from_parts,
    sources_of,
)

PREFIX = "approvals:"
PENDING_KEY = PREFIX + "pending"
DECIDED_KEY = PREFIX + "decided"
#: The ``prev`` of an approval's first audit entry.
GENESIS = ""
#: Decisions whose after-steps are owed (see ``OWED``), by decision time.
OWED_KEY = PREFIX + "owed"
#: Decisions not shown on their card yet, by when recovery should look at them again.
UNSHOWN_KEY = PREFIX + "unshown"
RUNNING_KEY = PREFIX + "running"
DEADLINES_KEY = PREFIX + "deadlines"
#: Runs whose ``on_finish`` has not returned yet, by when they ended.
FINISHING_KEY = PREFIX + "finishing"
#: How far (a time of ``FINISHED_KEY``) the workers have looked for runs that ended with no
#: outcome stored (``recovery.store_missing_outcomes``).
ENDS_CHECKED_KEY = PREFIX + "ends-checked"
#: Finished approvals (see ``FINISHED_LUA``) whose record and audit trail are still in Redis,
#: scored by when they finished; the retention sweep reads it, oldest first.
FINISHED_KEY = PREFIX + "finished"
#: The same, for the finished approvals whose message history is still in Redis.
FINISHED_HISTORY_KEY = PREFIX + "finished:history"
#: Ended runs whose outcome the retention sweep has not archived yet, by when they ended.
ENDED_KEY = PREFIX + "ended"
#: Counters and histogram buckets: every process adds to the same ones, so ``/metrics`` on
#: any bot or worker shows the whole deployment.
METRICS_KEY = PREFIX + "metrics"
#: Held by the one worker that sweeps retention at a time.
RETENTION_LOCK_KEY = PREFIX + "lock:retention"

#: Buckets (upper bounds, seconds) of the histograms kept in ``METRICS_KEY``. Here, beside
#: the Lua that fills one of them. A person takes seconds to days to decide; a worker takes
#: milliseconds to start the tool, or minutes when every worker is busy.
HISTOGRAM_BUCKETS: dict[str, tuple[float, ...]] = {
    "decision_seconds": (
        1,
        5,
        15,
        30,
        60,
        300,
        900,
        1800,
        3600,
        7200,
        14400,
        28800,
        86400,
        172800,
        604800,
    ),
    "tool_start_seconds": (
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1,
        2.5,
        5,
        10,
        30,
        60,
        300,
    ),
}
#: The outbox of state changes (webhooks), and the entries being turned into jobs.
EVENTS_KEY = PREFIX + "events"
EVENTS_TAKING_KEY = PREFIX + "events:taking"
#: Webhook receiver URL -> when its current run of failures began.
WEBHOOK_FAILING_KEY = PREFIX + "webhook-failing"
#: The audit events that are state changes: each becomes a webhook.
STATE_EVENTS = frozenset(
    {
        "paused",
        "approved",
        "edited",
        "rejected",
        "responded",
        "expired",
        "escalated",
        "resume_started",
        "resume_finished",
        "interrupted",
    }
)
GRANTS_KEY = PREFIX + "grants"


def approval_key(approval_id: str) -> str:
    return f"{PREFIX}approval:{approval_id}"


def history_key(approval_id: str) -> str:
    return f"{PREFIX}history:{approval_id}"


def audit_key(approval_id: str) -> str:
    return f"{PREFIX}audit:{approval_id}"


def webhook_key(message_id: str) -> str:
    return f"{PREFIX}webhook:{message_id}"


def receipt_key(jti: str) -> str:
    return f"{PREFIX}receipt:{jti}"


def run_key(run_id: str) -> str:
    return f"{PREFIX}run:{run_id}"


def run_pauses_key(run_id: str) -> str:
    return f"{PREFIX}run:{run_id}:pauses"


def outcome_key(run_id: str) -> str:
    return f"{PREFIX}outcome:{run_id}"


def answer_key(approval_id: str) -> str:
    return f"{PREFIX}answer:{approval_id}"


TOKENS_KEY = PREFIX + "tokens"


def idempotency_key(agent: str, digest: str) -> str:
    return f"{PREFIX}idem:{agent}:{digest}"


def rate_key(token_id: str, minute: int) -> str:
    return f"{PREFIX}rate:{token_id}:{minute}"


_shared: dict[str, redis.Redis] = {}


def shared_connection(settings: Settings) -> redis.Redis:
    """One client per ``REDIS_URL`` for the whole process (agents call ``run_agent`` often)."""
    client = _shared.get(settings.redis_url)
    if client is None:
        client = _shared.setdefault(settings.redis_url, connect(settings))
    return client


def close_shared_connections() -> None:
    """Close the clients ``shared_connection`` kept (a process that used many Redis URLs,
    such as the test suite, would otherwise hold every one's connections until it exits)."""
    while _shared:
        _, client = _shared.popitem()
        client.close()


#: redis-py 8 caps a client's pool at 100 connections and fails the command past that: an agent
#: program whose many threads pause at once would lose pauses instead of opening more.
MAX_CONNECTIONS = 2000


def connect(settings: Settings) -> redis.Redis:
    """A client for ``REDIS_URL`` (``redis://``, ``rediss://`` and ACL users in the URL work).

    Responses stay bytes: RQ shares this connection and needs them so.
    """
    return redis.Redis.from_url(
        settings.redis_url,
        health_check_interval=30,
        driver_info=_DRIVER_INFO,
        max_connections=MAX_CONNECTIONS,
    )


_scripts: dict[str, Script] = {}


def eval_script(conn: redis.Redis, lua: str, keys: list[str], args: list[Any]) -> Any:
    """Run a Lua script by its SHA1 (loading it when Redis does not know it yet).

    One ``Script`` per text for the whole process: built per call, each hashed its text again.
    """
    script = _scripts.get(lua)
    if script is None:
        script = _scripts.setdefault(lua, conn.register_script(lua))
    return script(keys=keys, args=args, client=conn)


# Given once: left to redis-py, every new client re-reads the package's metadata from disk.
_DRIVER_INFO = DriverInfo(lib_version=redis.__version__)


#: Lua: whether the approval in hash ``key`` is finished, so retention may remove it. Finished
#: is for good: completed, paused (its resume paused again: a new approval goes on), failed,
#: or rejected or expired by a gate that stops the run (``on_reject="stop"``, in the record).
#: Pending, decided-and-resuming, running and interrupted approvals are never finished.
FINISHED_LUA = """
local function finished(key, status)
  if status == 'completed' or status == 'paused' or status == 'failed' then return true end
  -- Decided by a rule or a grant: carried out in the agent's process, nothing follows here.
  if redis.call('HGET', key, 'automatic') == '1' then return true end
  if status ~= 'rejected' and status ~= 'expired' then return false end
  local ok, record = pcall(cjson.decode, redis.call('HGET', key, 'record') or '')
  return ok and type(record) == 'table' and type(record['policy']) == 'table'
    and record['policy']['on_reject'] == 'stop'
end
"""

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


def _keys(approval_id: str) -> list[str]:
    return [approval_key(approval_id), PENDING_KEY, DECIDED_KEY, RUNNING_KEY, DEADLINES_KEY]


def _transition_keys(approval_id: str) -> list[str]:
    return [
        *_keys(approval_id),
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
        line, length, outbox = _chained(conn, approval_id, event) if event else ("", 0, "")
        args: list[str] = [approval_id, repr(time.time()), target.value, allowed, line]
        args += [str(lease) if lease is not None else "", str(length), outbox, owed]
        for name, value in (fields or {}).items():
            args += [name, value]
        found = cast(list[Any], eval_script(conn, _TRANSITION_LUA, keys, args))
        ok, previous, decided_by = found
        if ok != 2:  # 2: another entry was appended meanwhile; chain to that one instead
            return TransitionResult(bool(ok), _text(previous), _text(decided_by) or None)


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
        voters = tuple(str(v) for v in json.loads(_text(decided_by)))
        return VoteResult("decided", count=required, voters=voters)
    if code in (2, 3):
        return VoteResult("counted" if code == 2 else "duplicate", count=int(_text(detail)))
    return VoteResult("lost", previous=_text(detail), decided_by=_text(decided_by) or None)


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
                    _from_hash(approval_id, raw),
                    _text(raw[OWED.encode()]),
                    _text(raw.get(b"receipt_error")) or None,
                    _text(raw.get(b"retried_by")) or None,
                )
                last = cast(bytes | None, pipe.lindex(trail, -1))
                events, more = plan(owed)
                prev = GENESIS if last is None else entry_hash(last)
                lines, outbox = _new_trail(approval_id, events, prev)
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
    return [_text(i) for i in cast(list[bytes], found)]


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
    return [(_text(i), float(due)) for i, due in cast(list[tuple[bytes, float]], found)]


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


def lease_key(approval_id: str) -> str:
    return f"{PREFIX}lease:{approval_id}"


def hold_lease(conn: redis.Redis, approval_id: str, ttl: int) -> None:
    """Say "a live worker runs this resume"; it lapses ``ttl`` seconds after its holder dies."""
    conn.set(lease_key(approval_id), repr(time.time()), ex=ttl)


def drop_lease(conn: redis.Redis, approval_id: str) -> None:
    conn.delete(lease_key(approval_id))


# Lua: add ``value`` to histogram ``name`` of the metrics hash ``key``; its bucket bounds are
# ARGV[first] onwards. The fields are those ``observe`` writes.
_OBSERVE_LUA = """
local function observe(key, name, value, first)
  local bucket = '+Inf'
  for i = first, #ARGV do
    if value <= tonumber(ARGV[i]) then bucket = ARGV[i] break end
  end
  redis.call('HINCRBY', key, name .. ':le:' .. bucket, 1)
  redis.call('HINCRBYFLOAT', key, name .. ':sum', value)
  redis.call('HINCRBY', key, name .. ':count', 1)
end
"""

# KEYS: approval hash, metrics hash. ARGV: now, then the buckets of tool_start_seconds.
_TOOL_STARTED_LUA = (
    _OBSERVE_LUA
    + """
if redis.call('HSETNX', KEYS[1], 'tool_started', ARGV[1]) == 0 then return 0 end
local ok, decision = pcall(cjson.decode, redis.call('HGET', KEYS[1], 'decision') or '')
if ok and type(decision) == 'table' and tonumber(decision['at']) then
  observe(KEYS[2], 'tool_start_seconds', tonumber(ARGV[1]) - tonumber(decision['at']), 2)
end
return 1
"""
)


def mark_tool_started(conn: redis.Redis, approval_id: str) -> bool:
    """Record, before the gated tool starts, that it is about to run; False if already marked.

    The mark is what lets a later attempt know the tool may have run: at most once per decision.
    The time from the decision to this moment goes to the ``tool_start_seconds`` histogram in
    the same step, so measuring it costs the tool's start no round trip.
    """
    args = [repr(time.time()), *map(bucket_name, HISTOGRAM_BUCKETS["tool_start_seconds"])]
    keys = [approval_key(approval_id), METRICS_KEY]
    return bool(eval_script(conn, _TOOL_STARTED_LUA, keys, args))


def clear_tool_marks(target: Any, approval_ids: Sequence[str]) -> None:
    """Forget that these calls' tools started (a Retry of their turn runs them once more);
    ``target`` is a client or the Retry's own transaction."""
    for approval_id in approval_ids:
        target.hdel(approval_key(approval_id), "tool_started", "tool_finished")


def bucket_name(value: float) -> str:
    """A bucket bound as its field names spell it (``0.005``, ``60``, ``+Inf``)."""
    return "+Inf" if value == float("inf") else f"{value:g}"


def observe(target: Any, name: str, value: float) -> None:
    """Add ``value`` to the histogram ``name`` (``target``: a client or a pipeline)."""
    bounds = HISTOGRAM_BUCKETS[name]
    bucket = next((bucket_name(b) for b in bounds if value <= b), "+Inf")
    target.hincrby(METRICS_KEY, f"{name}:le:{bucket}", 1)
    target.hincrbyfloat(METRICS_KEY, f"{name}:sum", value)
    target.hincrby(METRICS_KEY, f"{name}:count", 1)


def count(target: Any, name: str, by: int = 1) -> None:
    """Add to the counter ``name`` (``target``: a client or a pipeline)."""
    target.hincrby(METRICS_KEY, name, by)


def metric_values(conn: redis.Redis) -> dict[str, float]:
    """Every counter and histogram field, by name (``/metrics`` reads them at each scrape)."""
    raw = cast(dict[bytes, bytes], conn.hgetall(METRICS_KEY))
    values = {}
    for name, value in raw.items():
        try:
            values[_text(name)] = float(value)
        except ValueError:  # Redis is a trust boundary: an odd field is not a crash
            continue
    return values


def mark_tool_finished(conn: redis.Redis, approval_id: str) -> None:
    conn.hset(approval_key(approval_id), "tool_finished", repr(time.time()))


def running_ids(conn: redis.Redis) -> list[str]:
    """Approvals whose resume is (or was, if its worker died) running."""
    return [_text(i) for i in cast(list[bytes], conn.zrange(RUNNING_KEY, 0, -1))]


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
    return _text(eval_script(conn, _RECOVER_LUA, keys, [approval_id]))


def create(
    conn: redis.Redis,
    approval: Approval,
    history: list[dict[str, Any]],
    run_ttl: int | None = 0,
    events: Sequence[str] = (),
    *,
    pipeline: Any = None,
    in_run: bool = True,
) -> Any:
    """Queue the writes that create a pending approval on a transactional pipeline (a new
    one, or ``pipeline`` when several approvals are created together: the calls of a turn).

    ``events`` are audit lines (``audit_entry``) that follow its first one, "paused".

    Returned un-executed so the caller can add the card job to the same MULTI/EXEC: either
    both the approval and its card job exist, or neither does. An approval with a ``run_id``
    is also added to its run's list of pauses, kept ``run_ttl`` seconds from now (a list, not
    the run's stream: a stream's first entry allocates a node of kilobytes, which every waiting
    approval would carry).
    """
    pipe = pipeline
    if pipe is None:
        pipe = conn.pipeline(transaction=True)
        pipe.multi()  # explicit, so RQ's enqueue(pipeline=...) joins this transaction
    pipe.hset(
        approval_key(approval.id),
        mapping={
            "record": approval.stored_record(),
            "status": Status.PENDING.value,
        },
    )
    if history or in_run:
        pipe.set(history_key(approval.id), json.dumps(history))
    pipe.zadd(PENDING_KEY, {approval.id: approval.created_at})
    first = audit_entry("paused", approval.agent, tool=approval.tool_name)
    lines, outbox = _new_trail(approval.id, [first, *events])
    pipe.rpush(audit_key(approval.id), *lines)
    if outbox:
        pipe.rpush(EVENTS_KEY, *outbox)
    if approval.run_id is not None and in_run:
        pipe.rpush(run_pauses_key(approval.run_id), approval.id)
        if run_ttl is None:  # it waits indefinitely, and so may its run's waiters
            pipe.persist(run_pauses_key(approval.run_id))
        else:
            pipe.expire(run_pauses_key(approval.run_id), max(run_ttl, 1))
    return pipe


# KEYS: approval hash, decided zset, audit list. ARGV: id, now, record, status, decision,
# actor, then audit lines.
_AUTOMATIC_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'record', ARGV[3], 'status', ARGV[4], 'decided_status', ARGV[4],
           'decision', ARGV[5], 'decided_by', ARGV[6], 'automatic', '1')
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(RECENT_KEPT + 1))
redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
local count = tonumber(ARGV[7])
for i = 8, 7 + count do redis.call('RPUSH', KEYS[3], ARGV[i]) end
for i = 8 + count, #ARGV do redis.call('RPUSH', KEYS[4], ARGV[i]) end
return 1
""".replace("RECENT_KEPT", "200")


def _new_trail(
    approval_id: str, events: Sequence[str], prev: str = GENESIS
) -> tuple[list[str], list[str]]:
    """Audit lines (``audit_entry``) chained after the entry whose hash is ``prev`` (a new
    approval's: the empty trail), and the outbox entries of the state changes among them."""
    lines: list[str] = []
    outbox: list[str] = []
    for event in events:
        entry = json.loads(event)
        entry["prev"] = prev
        line = _line(entry)
        lines.append(line)
        message = _outbox_entry(approval_id, entry, line)
        if message:
            outbox.append(message)
        prev = entry_hash(line)
    return lines, outbox


def record_automatic(
    conn: redis.Redis, approval: Approval, target: Status, decision: str, events: list[str]
) -> bool:
    """Write an approval decided the moment it was asked for (by a rule or a grant), at once.

    One step creates the record already ``target`` with its ``decision`` (JSON) and audit
    lines (``audit_entry``, chained as every trail is, with their webhook events), lists it
    among the recent decisions, and notes it finished for retention; no card, deadline or
    resume job is written, because the agent's process carries the decision out itself.
    False when the id exists already (nothing was written).
    """
    assert target in TRANSITIONS[Status.PENDING], "an automatic decision leaves pending"
    record = approval.stored_record()
    actor = approval.decision.actor if approval.decision else "system"
    lines, outbox = _new_trail(approval.id, events)
    args = [approval.id, repr(time.time()), record, target.value, decision, actor]
    args += [str(len(lines)), *lines, *outbox]
    keys = [approval_key(approval.id), DECIDED_KEY, audit_key(approval.id), EVENTS_KEY]
    keys.append(FINISHED_KEY)
    return bool(eval_script(conn, _AUTOMATIC_LUA, keys, args))


def grant_key(grant_id: str) -> str:
    return f"{PREFIX}grant:{grant_id}"


def grants_tool_key(tool_name: str) -> str:
    return f"{PREFIX}grants:tool:{tool_name}"


def save_grant(
    conn: redis.Redis,
    grant_id: str,
    record: str,
    tool_name: str,
    created_at: float,
    expires_at: float | None,
) -> None:
    """Store a new grant (``record``: JSON) and index it, in one transaction."""
    pipe = conn.pipeline(transaction=True)
    pipe.hset(
        grant_key(grant_id),
        mapping={"record": record, "uses": "0", "expires_at": repr(expires_at or 0.0)},
    )
    if expires_at:
        # A day past its end it is gone; until then lists show it as expired.
        pipe.expireat(grant_key(grant_id), int(expires_at) + 24 * 3600)
    pipe.zadd(GRANTS_KEY, {grant_id: created_at})
    pipe.zadd(grants_tool_key(tool_name), {grant_id: created_at})
    pipe.execute()


def grant_ids(conn: redis.Redis, tool_name: str | None = None) -> list[str]:
    """Grant ids, newest first: all of them, or one tool's."""
    key = GRANTS_KEY if tool_name is None else grants_tool_key(tool_name)
    return [_text(i) for i in cast(list[bytes], conn.zrevrange(key, 0, -1))]


def load_grants(conn: redis.Redis, ids: list[str]) -> list[tuple[str, dict[str, str]]]:
    """The stored hashes of these grants, in one round trip (missing ones left out)."""
    pipe = conn.pipeline(transaction=False)
    for grant_id in ids:
        pipe.hgetall(grant_key(grant_id))
    found = []
    for grant_id, raw in zip(ids, pipe.execute(), strict=True):
        if raw:
            found.append((grant_id, {_text(k): _text(v) for k, v in raw.items()}))
    return found


def forget_grants(conn: redis.Redis, tool_name: str, ids: list[str]) -> None:
    """Drop ids whose grant is gone (expired past keeping) from the indexes."""
    if ids:
        conn.zrem(GRANTS_KEY, *ids)
        conn.zrem(grants_tool_key(tool_name), *ids)


# KEYS: grant hash. ARGV: now. Takes one use of a live grant; 0 when revoked, expired or gone.
_USE_GRANT_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[1], 'revoked_at') == 1 then return 0 end
local ends = tonumber(redis.call('HGET', KEYS[1], 'expires_at') or '0')
if ends > 0 and ends <= tonumber(ARGV[1]) then return 0 end
return redis.call('HINCRBY', KEYS[1], 'uses', 1)
"""


def use_grant(conn: redis.Redis, grant_id: str, now: float) -> int:
    """Take one use of a grant, atomically: its new use count, or 0 when it is not live."""
    return int(eval_script(conn, _USE_GRANT_LUA, [grant_key(grant_id)], [repr(now)]))


# KEYS: grant hash. ARGV: now, actor. 1: revoked now; 0: already revoked or gone.
_REVOKE_GRANT_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HSETNX', KEYS[1], 'revoked_at', ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'revoked_by', ARGV[2])
return 1
"""


def revoke_grant(conn: redis.Redis, grant_id: str, actor: str) -> int:
    """Revoke a grant once: 1 revoked now, 0 revoked already, -1 no such grant."""
    keys = [grant_key(grant_id)]
    return int(eval_script(conn, _REVOKE_GRANT_LUA, keys, [repr(time.time()), actor]))


def run_pauses(conn: redis.Redis, run_id: str) -> list[str]:
    """The ids of a run's pauses, in order (empty when the run is unknown or expired)."""
    return [_text(i) for i in cast(list[bytes], conn.lrange(run_pauses_key(run_id), 0, -1))]


def wake_run(conn: redis.Redis, run_id: str, event: str, ttl: int) -> None:
    """Wake whoever waits on the run (``wait_run_event``): it paused again, say."""
    pipe = conn.pipeline(transaction=True)
    pipe.xadd(run_key(run_id), {"event": event})
    pipe.expire(run_key(run_id), max(ttl, 1))
    pipe.execute()


def wait_run_event(conn: redis.Redis, run_id: str, after: str, block: float) -> str:
    """Block up to ``block`` seconds for an event of the run after stream id ``after``;
    returns the id of the last event read (``after`` when none came)."""
    found = conn.xread({run_key(run_id): after}, block=max(1, int(block * 1000)))
    for _, entries in cast(list[tuple[bytes, list[tuple[bytes, Any]]]], found or []):
        if entries:
            after = _text(entries[-1][0])
    return after


# KEYS: outcome hash, run stream, finishing zset, ended zset. ARGV: outcome JSON, on_finish
# ("" for none), ttl, run id, now.
_SAVE_OUTCOME_LUA = """
if redis.call('HSETNX', KEYS[1], 'outcome', ARGV[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'on_finish', ARGV[2])
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[4])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('XADD', KEYS[2], '*', 'event', 'ended')
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""


def save_outcome(
    conn: redis.Redis, run_id: str, outcome: str, on_finish: str | None, ttl: int
) -> bool:
    """Store a run's final outcome (JSON) for ``ttl`` seconds and wake its waiters, once;
    False when it was stored already (the first one stands). A run with an ``on_finish`` is
    noted as finishing in the same step, until ``set_outcome_flag``."""
    keys = [outcome_key(run_id), run_key(run_id), FINISHING_KEY, ENDED_KEY]
    args = [outcome, on_finish or "", ttl, run_id, repr(time.time())]
    return bool(eval_script(conn, _SAVE_OUTCOME_LUA, keys, args))


def finishing_between(conn: redis.Redis, since: float, until: float) -> list[str]:
    """Runs whose ``on_finish`` has not returned, that ended between the two times."""
    return [_text(i) for i in cast(list[bytes], conn.zrangebyscore(FINISHING_KEY, since, until))]


def finished_between(conn: redis.Redis, since: float, until: float) -> list[Approval]:
    """The approvals that finished (``FINISHED_LUA``) after ``since`` and by ``until``."""
    ids = cast(list[bytes], conn.zrangebyscore(FINISHED_KEY, f"({since!r}", repr(until)))
    return _load_many(conn, [_text(i) for i in ids])


def ends_checked(conn: redis.Redis) -> float | None:
    """Up to when finished approvals were looked at for an outcome never stored."""
    value = conn.get(ENDS_CHECKED_KEY)
    return None if value is None else float(_text(value))


def note_ends_checked(conn: redis.Redis, until: float) -> None:
    """Finished approvals up to ``until`` were looked at (never moves back)."""
    eval_script(conn, _NOTE_ENDS_CHECKED_LUA, [ENDS_CHECKED_KEY], [repr(until)])


_NOTE_ENDS_CHECKED_LUA = """
local now = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > now then redis.call('SET', KEYS[1], ARGV[1]) end
"""


def forget_finishing(conn: redis.Redis, until: float) -> None:
    """Stop tracking runs that ended before ``until`` (their outcome has expired)."""
    conn.zremrangebyscore(FINISHING_KEY, "-inf", until)


def outcome_flag_set(conn: redis.Redis, run_id: str) -> bool:
    """Whether the run's ``on_finish`` call has returned."""
    return bool(conn.hexists(outcome_key(run_id), "on_finish_called"))


def set_outcome_flag(conn: redis.Redis, run_id: str) -> None:
    """Note that the run's ``on_finish`` returned: it is not finishing any more."""
    pipe = conn.pipeline(transaction=True)
    pipe.hset(outcome_key(run_id), "on_finish_called", repr(time.time()))
    pipe.zrem(FINISHING_KEY, run_id)
    pipe.execute()


def runs_without_outcome(conn: redis.Redis, run_ids: Collection[str]) -> set[str]:
    """Those of these runs that have no outcome stored (not ended, or expired)."""
    ordered = list(run_ids)
    pipe = conn.pipeline(transaction=False)
    for run_id in ordered:
        pipe.hexists(outcome_key(run_id), "outcome")
    return {run_id for run_id, held in zip(ordered, pipe.execute(), strict=True) if not held}


def load_outcome(conn: redis.Redis, run_id: str) -> tuple[Any, str | None]:
    """A run's stored outcome (decoded JSON, None when not ended or expired) and on_finish."""
    raw = cast(list[bytes | None], conn.hmget(outcome_key(run_id), ["outcome", "on_finish"]))
    return _json(raw[0]), _text(raw[1]) or None


def wake_caller(target: Any, approval_id: str, ttl: int) -> None:
    """Wake the caller waiting on an external approval (``wait_answer``); ``target`` is a
    client or a pipeline (the decision's own transaction)."""
    target.xadd(answer_key(approval_id), {"event": "decided"})
    target.expire(answer_key(approval_id), max(ttl, 1))


async def wait_answer(aconn: redis_async.Redis, approval_id: str, block: float) -> bool:
    """Block up to ``block`` seconds (an asyncio client: a waiting caller costs no thread)
    until the approval's caller is woken; True when it was, or had been already.

    Read from the stream's start, so a decision made just before the read is not missed.
    The block is rounded up to a whole millisecond: Redis reads ``BLOCK 0`` as "forever".
    """
    milliseconds = max(1, math.ceil(block * 1000))
    found = await aconn.xread({answer_key(approval_id): "0"}, count=1, block=milliseconds)
    return bool(found)


def save_token(conn: redis.Redis, digest: str, record: dict[str, Any]) -> None:
    conn.hset(TOKENS_KEY, digest, json.dumps(record))


def token_record(conn: redis.Redis, digest: str) -> Any:
    """The record of the token with this digest (decoded JSON; None when unknown)."""
    return _json(cast(bytes | None, conn.hget(TOKENS_KEY, digest)))


def token_records(conn: redis.Redis) -> dict[str, Any]:
    """Every token's record by digest (decoded JSON)."""
    raw = cast(dict[bytes, bytes], conn.hgetall(TOKENS_KEY))
    return {_text(k): _json(v) for k, v in raw.items()}


def delete_token(conn: redis.Redis, digest: str) -> bool:
    return bool(conn.hdel(TOKENS_KEY, digest))


def claim_idempotency(
    conn: redis.Redis, agent: str, digest: str, approval_id: str, ttl: int
) -> str | None:
    """Bind an idempotency key to ``approval_id``; returns the id it was bound to already
    (None: this call bound it)."""
    key = idempotency_key(agent, digest)
    if conn.set(key, approval_id, nx=True, ex=max(ttl, 1)):
        return None
    return _text(conn.get(key)) or None


def idempotent_id(conn: redis.Redis, agent: str, digest: str) -> str | None:
    """The approval an idempotency key of ``agent`` created (None: none, or its TTL passed)."""
    return _text(conn.get(idempotency_key(agent, digest))) or None


def forget_idempotency(conn: redis.Redis, agent: str, digest: str) -> None:
    conn.delete(idempotency_key(agent, digest))


def count_request(conn: redis.Redis, token_id: str, now: float) -> int:
    """Count one request of a token in the current minute; returns the minute's count."""
    minute = int(now // 60)
    pipe = conn.pipeline(transaction=True)
    pipe.incr(rate_key(token_id, minute))
    pipe.expire(rate_key(token_id, minute), 120)
    count, _ = pipe.execute()
    return int(count)


def load(conn: redis.Redis, approval_id: str) -> Approval:
    """Read an approval (without its history); ``UnknownApproval`` or ``CorruptRecord``.

    A call that shares its turn's card comes with every call of the turn (``turn_calls``),
    read just after it, so the card drawn from any of them lists them all.
    """
    raw = cast(dict[bytes, bytes], conn.hgetall(approval_key(approval_id)))
    if not raw:
        raise UnknownApproval(approval_id)
    return _with_turn(conn, _from_hash(approval_id, raw))


def _with_turn(conn: redis.Redis, approval: Approval) -> Approval:
    if approval.in_turn:
        approval.turn_calls = tuple(_load_many(conn, list(approval.turn)))
    return approval


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
    record = _json(cast(bytes | None, conn.hget(approval_key(approval_id), "record")))
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
            if _text(s) in ("", Status.PENDING.value)]  # fmt: skip


def _from_hash(approval_id: str, raw: dict[bytes, bytes]) -> Approval:
    try:
        fields = {k.decode(): v for k, v in raw.items()}
        approval = approval_from_parts(
            record=_json(fields.get("record")),
            status=_text(fields.get("status")),
            card_ts=_text(fields.get("card_ts")) or None,
            decision=_json(fields.get("decision")),
            result=_json(fields.get("result")),
            votes=_json(fields.get("votes")),
            marks={k: _text(fields.get(k)) for k in ("tool_started", "tool_finished", "escalated")},
        )
    except UnicodeDecodeError:
        raise CorruptRecord(f"approval {approval_id} is not valid UTF-8") from None
    if approval.id != approval_id:
        raise CorruptRecord(f"approval {approval_id} holds the record of {approval.id}")
    approval.receipt = _text(raw.get(b"receipt")) or None
    return approval


def load_history(conn: redis.Redis, approval_id: str) -> list[dict[str, Any]]:
    """The message history saved at the pause."""
    return parse_history(approval_id, cast(bytes | None, conn.get(history_key(approval_id))))


def parse_history(approval_id: str, raw: bytes | None) -> list[dict[str, Any]]:
    """A saved history as ``load_history`` returns it, from its stored bytes."""
    history = _json(raw)
    if not isinstance(history, list) or not all(isinstance(m, dict) for m in history):
        raise CorruptRecord(f"the history of approval {approval_id} is missing or malformed")
    return history


def load_with_history(conn: redis.Redis, approval_id: str) -> tuple[Approval, bytes | None]:
    """An approval and its history's stored bytes (for ``parse_history``), in one round trip."""
    pipe = conn.pipeline(transaction=False)
    pipe.hgetall(approval_key(approval_id))
    pipe.get(history_key(approval_id))
    raw, history = pipe.execute()
    if not raw:
        raise UnknownApproval(approval_id)
    return _with_turn(conn, _from_hash(approval_id, raw)), history


def _load_many(conn: redis.Redis, ids: list[str]) -> list[Approval]:
    """Approvals by id in one round trip; missing or corrupt records are skipped, not fatal."""
    pipe = conn.pipeline(transaction=False)
    for approval_id in ids:
        pipe.hgetall(approval_key(approval_id))
    found = []
    for approval_id, raw in zip(ids, pipe.execute(), strict=True):
        if not raw:
            continue
        try:
            found.append(_from_hash(approval_id, raw))
        except CorruptRecord:
            continue
    return found


def pending_models(conn: redis.Redis, batch: int = 500) -> dict[tuple[str, bool], int]:
    """How many pending approvals resume on each (model id, async) pair.

    Reads only each record's model fields, in batches: a doctor must answer with a hundred
    thousand approvals waiting.
    """
    counts: dict[tuple[str, bool], int] = {}
    ids: list[str] = []

    def count(chunk: list[str]) -> None:
        pipe = conn.pipeline(transaction=False)
        for approval_id in chunk:
            pipe.hget(approval_key(approval_id), "record")
        for raw in pipe.execute():
            try:
                record: Any = json.loads(raw) if raw else {}
                if record.get("external") is True:
                    continue  # no model resumes it
                key = (str(record["model_id"]), record.get("asynchronous") is True)
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # a corrupt record is reported where it is loaded
            counts[key] = counts.get(key, 0) + 1

    for member, _ in conn.zscan_iter(PENDING_KEY, count=batch):
        ids.append(_text(member))
        if len(ids) >= batch:
            count(ids)
            ids = []
    if ids:
        count(ids)
    return counts


def pending(conn: redis.Redis, limit: int = 100) -> list[Approval]:
    """Pending approvals, newest first."""
    ids = [_text(i) for i in cast(list[bytes], conn.zrevrange(PENDING_KEY, 0, limit - 1))]
    return _load_many(conn, ids)


@dataclass(frozen=True)
class Page:
    """One page of a filtered list of pending approvals."""

    approvals: list[Approval]
    #: Accepted approvals after this page (a lower bound unless ``exact``).
    remaining: int
    exact: bool


def pending_page(
    conn: redis.Redis,
    keep: Callable[[Approval], bool],
    offset: int,
    count: int,
    batch: int = 100,
) -> Page:
    """One page of the pending approvals that ``keep`` accepts, newest first.

    Reads in batches and stops at the batch that fills the page, so a page costs the same
    with 10 or 10,000 approvals waiting; what remains after it is then only a lower bound.
    """
    page: list[Approval] = []
    skipped = remaining = 0
    start = 0
    while True:
        raw = cast(list[bytes], conn.zrevrange(PENDING_KEY, start, start + batch - 1))
        ids = [_text(i) for i in raw]
        for approval in _load_many(conn, ids):
            if not keep(approval):
                continue
            if skipped < offset:
                skipped += 1
            elif len(page) < count:
                page.append(approval)
            else:
                remaining += 1
        if len(ids) < batch:
            return Page(page, remaining, exact=True)
        if remaining:
            return Page(page, remaining, exact=False)
        start += batch


def decided_between(conn: redis.Redis, since: float, until: float) -> list[Approval]:
    """The recently decided approvals whose decision was made between the two times."""
    ids = cast(list[bytes], conn.zrangebyscore(DECIDED_KEY, since, until))
    return _load_many(conn, [_text(i) for i in ids])


def recent_decisions(conn: redis.Redis, limit: int = 10) -> list[Approval]:
    """The most recently decided approvals, newest first."""
    ids = [_text(i) for i in cast(list[bytes], conn.zrevrange(DECIDED_KEY, 0, limit - 1))]
    return _load_many(conn, ids)


def members_key(target: str) -> str:
    """Where the members of a Slack user group (``S...``) or a channel are cached."""
    kind = "usergroup" if target.startswith("S") else "channel-members"
    return f"{PREFIX}{kind}:{target}"


def cached_members(conn: redis.Redis, target: str) -> list[str] | None:
    """Members of a user group or a channel as last fetched, or None when not cached."""
    members = _json(cast(bytes | None, conn.get(members_key(target))))
    if isinstance(members, list) and all(isinstance(m, str) for m in members):
        return members
    return None


def cache_members(conn: redis.Redis, target: str, members: list[str], ttl: int) -> None:
    conn.set(members_key(target), json.dumps(members), ex=ttl)


def seen_key(signature: str) -> str:
    return f"{PREFIX}seen:{signature}"


def first_sighting(conn: redis.Redis, signature: str, ttl: int) -> bool:
    """Remember a request signature for ``ttl`` seconds; False when it was remembered already.

    Every bot replica shares these keys, so a replayed request is refused wherever it lands.
    """
    return bool(conn.set(seen_key(signature), b"1", nx=True, ex=ttl))


def pending_count(conn: redis.Redis) -> int:
    return int(conn.zcard(PENDING_KEY))


def card_posted(conn: redis.Redis, approval_id: str) -> bool:
    return bool(conn.hexists(approval_key(approval_id), "card_ts"))


def set_card(conn: redis.Redis, approval_id: str, card_ts: str) -> bool:
    """Remember where the card was posted; False if a card was already recorded."""
    return record_card(conn, approval_id, card_ts)[0]


def record_card(conn: redis.Redis, approval_id: str, card_ts: str) -> tuple[bool, Approval]:
    """``set_card``, and the approval as it is at that moment, in one atomic round trip (a
    click may have decided it while its card was being posted)."""
    pipe = conn.pipeline(transaction=True)
    pipe.hsetnx(approval_key(approval_id), "card_ts", card_ts)
    pipe.hgetall(approval_key(approval_id))
    recorded, raw = pipe.execute()
    if not raw:
        raise UnknownApproval(approval_id)
    return bool(recorded), _with_turn(conn, _from_hash(approval_id, raw))


def lock(conn: redis.Redis, approval_id: str, purpose: str, ttl: int) -> bool:
    """Take a short-lived lock on some work for an approval; False while someone holds it."""
    return bool(conn.set(f"{PREFIX}lock:{approval_id}:{purpose}", "1", nx=True, ex=ttl))


def unlock(conn: redis.Redis, approval_id: str, purpose: str) -> None:
    conn.delete(f"{PREFIX}lock:{approval_id}:{purpose}")


def claim(conn: redis.Redis, approval_id: str, flag: str) -> bool:
    """Set a once-only flag on the approval; False when it was set already."""
    return bool(conn.hsetnx(approval_key(approval_id), flag, repr(time.time())))


def flags(conn: redis.Redis, approval_id: str, *names: str) -> list[bool]:
    """Whether each of these ``claim`` flags is set on the approval."""
    values = cast(list[bytes | None], conn.hmget(approval_key(approval_id), list(names)))
    return [value is not None for value in values]


def release(conn: redis.Redis, approval_id: str, flag: str) -> None:
    """Clear a flag set by ``claim`` (its work failed and will be retried)."""
    conn.hdel(approval_key(approval_id), flag)


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
        kind, _, approval_id = _text(member).partition(":")
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


# --------------------------------------------------------------------------- retention


def finished_until(
    conn: redis.Redis, key: str, until: float, limit: int
) -> list[tuple[str, float]]:
    """Up to ``limit`` (id, finished at) of ``FINISHED_KEY`` or ``FINISHED_HISTORY_KEY`` that
    finished by ``until``, oldest first."""
    found = conn.zrangebyscore(key, "-inf", repr(until), start=0, num=limit, withscores=True)
    return [(_text(i), float(at)) for i, at in cast(list[tuple[bytes, float]], found)]


# KEYS: finished-history zset, metrics hash, then each id's approval hash and history.
# ARGV: the ids. Only a finished approval's history goes; a missing record's too (an orphan).
_FORGET_HISTORIES_LUA = (
    FINISHED_LUA
    + """
local removed = 0
for i, id in ipairs(ARGV) do
  local hash, history = KEYS[1 + 2 * i], KEYS[2 + 2 * i]
  local status = redis.call('HGET', hash, 'status')
  if not status or finished(hash, status) then
    removed = removed + redis.call('DEL', history)
  end
  redis.call('ZREM', KEYS[1], id)
end
redis.call('HINCRBY', KEYS[2], 'retention:history', removed)
return removed
"""
)


def forget_histories(conn: redis.Redis, ids: list[str]) -> int:
    """Delete the histories of these finished approvals (never of one that is not finished);
    returns how many were deleted."""
    if not ids:
        return 0
    keys = [FINISHED_HISTORY_KEY, METRICS_KEY]
    for approval_id in ids:
        keys += [approval_key(approval_id), history_key(approval_id)]
    return int(eval_script(conn, _FORGET_HISTORIES_LUA, keys, ids))


# KEYS: finished zset, finished-history zset, then each id's approval hash and history.
# ARGV: the ids. Notes every finished approval not noted yet (one written before retention
# existed), by when it finished as far as its record tells: the tool's end, else the
# decision, else the pause. Returns how many it noted.
_NOTE_FINISHED_LUA = (
    FINISHED_LUA
    + """
local function field_number(hash, name, inner)
  local raw = redis.call('HGET', hash, name)
  if not raw then return nil end
  if not inner then return tonumber(raw) end
  local ok, value = pcall(cjson.decode, raw)
  if ok and type(value) == 'table' then return tonumber(value[inner]) end
  return nil
end
local noted = 0
for i, id in ipairs(ARGV) do
  local hash, history = KEYS[1 + 2 * i], KEYS[2 + 2 * i]
  local status = redis.call('HGET', hash, 'status')
  if status and finished(hash, status) and not redis.call('ZSCORE', KEYS[1], id) then
    local at = field_number(hash, 'tool_finished') or field_number(hash, 'decision', 'at')
      or field_number(hash, 'record', 'created_at') or 0
    redis.call('ZADD', KEYS[1], at, id)
    if redis.call('EXISTS', history) == 1 then redis.call('ZADD', KEYS[2], at, id) end
    noted = noted + 1
  end
end
return noted
"""
)


def note_finished(conn: redis.Redis, ids: list[str]) -> int:
    """Add these approvals to the retention indexes if they are finished and not there yet
    (written by a version without retention); returns how many were added."""
    if not ids:
        return 0
    keys = [FINISHED_KEY, FINISHED_HISTORY_KEY]
    for approval_id in ids:
        keys += [approval_key(approval_id), history_key(approval_id)]
    return int(eval_script(conn, _NOTE_FINISHED_LUA, keys, ids))


def approval_ids(conn: redis.Redis) -> Iterator[str]:
    """Every approval id in Redis: a SCAN, so Redis keeps answering others meanwhile."""
    prefix = approval_key("")
    for key in conn.scan_iter(match=prefix + "*", count=1000):
        yield _text(key)[len(prefix) :]


@dataclass(frozen=True)
class Finished:
    """What Redis holds of one finished approval, as the archive copies it."""

    approval: Approval
    #: The audit trail's lines exactly as stored (the archive keeps them byte for byte).
    audit: list[bytes]


def load_finished(conn: redis.Redis, ids: list[str]) -> list[Finished]:
    """The records and audit trails of these approvals, in one round trip (missing or
    unreadable records are left out: the sweep drops their entries)."""
    pipe = conn.pipeline(transaction=False)
    for approval_id in ids:
        pipe.hgetall(approval_key(approval_id))
        pipe.lrange(audit_key(approval_id), 0, -1)
    answers = pipe.execute()
    found = []
    for i, approval_id in enumerate(ids):
        raw, lines = answers[2 * i], answers[2 * i + 1]
        if not raw:
            continue
        try:
            found.append(Finished(_from_hash(approval_id, raw), list(lines)))
        except CorruptRecord:
            continue
    return found


# KEYS: finished zset, finished-history zset, decided zset, metrics hash, then each id's
# approval hash, history and audit list. ARGV: pairs of id and how many audit lines the
# archive holds ("-1": no archive). An approval that is not finished is left alone; one whose
# audit trail grew after it was archived, or whose decision still owes its after-steps, stays
# for the next round (its new lines are archived then). Returns the ids removed.
_FORGET_APPROVALS_LUA = (
    FINISHED_LUA
    + """
local removed = {}
for i = 1, #ARGV / 2 do
  local id, archived = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local hash, history, audit = KEYS[2 + 3 * i], KEYS[3 + 3 * i], KEYS[4 + 3 * i]
  local status = redis.call('HGET', hash, 'status')
  local gone = not status or finished(hash, status)
  if redis.call('HEXISTS', hash, 'owed') == 1 then
    -- What follows its decision is still owed (its audit entry, say): a later round.
  elseif gone and (archived < 0 or redis.call('LLEN', audit) <= archived) then
    redis.call('DEL', hash, history, audit)
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    if status then table.insert(removed, id) end
  elseif not gone then
    redis.call('ZREM', KEYS[1], id)
  end
end
redis.call('HINCRBY', KEYS[4], 'retention:approval', #removed)
return removed
"""
)


def forget_approvals(conn: redis.Redis, archived: dict[str, int | None]) -> list[str]:
    """Delete these finished approvals' records, histories and audit trails.

    ``archived`` maps each id to how many audit lines the archive holds (None: there is no
    archive). Never touches an approval that is not finished. Returns the ids removed.
    """
    if not archived:
        return []
    keys = [FINISHED_KEY, FINISHED_HISTORY_KEY, DECIDED_KEY, METRICS_KEY]
    args: list[str] = []
    for approval_id, lines in archived.items():
        keys += [approval_key(approval_id), history_key(approval_id), audit_key(approval_id)]
        args += [approval_id, str(-1 if lines is None else lines)]
    return [
        _text(i) for i in cast(list[bytes], eval_script(conn, _FORGET_APPROVALS_LUA, keys, args))
    ]


def ended_runs(conn: redis.Redis, limit: int) -> list[tuple[str, Any, float]]:
    """Up to ``limit`` ended runs not archived yet, oldest first, each with its stored
    outcome (decoded; None when it has expired already) and when it ended."""
    ended = cast(list[tuple[bytes, float]], conn.zrange(ENDED_KEY, 0, limit - 1, withscores=True))
    pipe = conn.pipeline(transaction=False)
    for run_id, _ in ended:
        pipe.hget(outcome_key(_text(run_id)), "outcome")
    found = []
    for (run_id, at), raw in zip(ended, pipe.execute(), strict=True):
        try:
            outcome = _json(raw)
        except CorruptRecord:
            outcome = None
        found.append((_text(run_id), outcome, float(at)))
    return found


def forget_ended(conn: redis.Redis, run_ids: list[str]) -> None:
    """The runs' outcomes are archived (or there is no archive): stop tracking them."""
    if run_ids:
        conn.zrem(ENDED_KEY, *run_ids)


def take_retention_lock(conn: redis.Redis, token: str, ttl: int) -> bool:
    """One worker sweeps retention at a time; False while another holds the lock."""
    return bool(conn.set(RETENTION_LOCK_KEY, token, nx=True, ex=ttl))


_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def release_retention_lock(conn: redis.Redis, token: str) -> None:
    """Give the lock back, if this holder still has it."""
    eval_script(conn, _RELEASE_LUA, [RETENTION_LOCK_KEY], [token])


@dataclass(frozen=True)
class RetentionCounts:
    """What retention holds and will free (``approvals doctor``)."""

    histories_held: int
    histories_due: int
    approvals_held: int
    approvals_due: int


def retention_counts(
    conn: redis.Redis, history_until: float, approval_until: float
) -> RetentionCounts:
    pipe = conn.pipeline(transaction=False)
    pipe.zcard(FINISHED_HISTORY_KEY)
    pipe.zcount(FINISHED_HISTORY_KEY, "-inf", repr(history_until))
    pipe.zcard(FINISHED_KEY)
    pipe.zcount(FINISHED_KEY, "-inf", repr(approval_until))
    return RetentionCounts(*(int(n) for n in pipe.execute()))


def gauges(conn: redis.Redis) -> tuple[int, int, dict[str, Any]]:
    """(approvals waiting, resumes running, Redis's INFO memory), in one round trip."""
    pipe = conn.pipeline(transaction=False)
    pipe.zcard(PENDING_KEY)
    pipe.zcard(RUNNING_KEY)
    pipe.info("memory")
    waiting, running, memory = pipe.execute()
    return int(waiting), int(running), dict(memory)


def audit_ids(conn: redis.Redis) -> list[str]:
    """Every approval with an audit trail in Redis (``approvals audit export``): a SCAN, so
    Redis keeps answering others while it runs."""
    prefix = audit_key("")
    found = conn.scan_iter(match=prefix + "*", count=1000)
    return [_text(key)[len(prefix) :] for key in found]


# KEYS: audit list, events outbox, approval hash. ARGV: the length the line was chained at,
# the line, the outbox entry ("" for none), then field/value pairs for the approval hash.
_APPEND_AUDIT_LUA = """
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[2])
if ARGV[3] ~= '' then redis.call('RPUSH', KEYS[2], ARGV[3]) end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
return 1
"""


def audit(
    conn: redis.Redis,
    approval_id: str,
    event: str,
    actor: str,
    *,
    fields: dict[str, str] | None = None,
    **details: Any,
) -> None:
    """Append one event to the approval's audit trail, chained to the entry before it.

    ``fields`` are written to the approval's hash in the same step (a decision's receipt is
    stored with the entry that carries it).
    """
    pairs = [part for item in (fields or {}).items() for part in item]
    keys = [audit_key(approval_id), EVENTS_KEY, approval_key(approval_id)]
    while True:
        line, length, outbox = _chained(conn, approval_id, audit_entry(event, actor, **details))
        if eval_script(conn, _APPEND_AUDIT_LUA, keys, [length, line, outbox, *pairs]):
            return


def audit_head(conn: redis.Redis, approval_id: str) -> tuple[int, str]:
    """(entries in the trail, the hash the next entry must carry as ``prev``)."""
    pipe = conn.pipeline(transaction=False)
    pipe.llen(audit_key(approval_id))
    pipe.lindex(audit_key(approval_id), -1)
    length, last = pipe.execute()
    return int(length), GENESIS if last is None else entry_hash(last)


def entry_hash(line: bytes | str) -> str:
    """The hex SHA-256 of an audit line, as the next entry's ``prev`` names it."""
    return hashlib.sha256(line if isinstance(line, bytes) else line.encode()).hexdigest()


def _chained(conn: redis.Redis, approval_id: str, line: str) -> tuple[str, int, str]:
    """(``line`` chained to the trail's last entry, the trail's length, its outbox entry)."""
    length, prev = audit_head(conn, approval_id)
    try:
        entry = json.loads(line)
    except ValueError:
        entry = None
    if not isinstance(entry, dict):  # not an ``audit_entry`` line: kept as its text
        entry = json.loads(audit_entry("note", "", text=line))
    entry["prev"] = prev
    linked = _line(entry)
    return linked, length, _outbox_entry(approval_id, entry, linked)


def _outbox_entry(approval_id: str, entry: dict[str, Any], line: str) -> str:
    """The outbox entry of a state change ("" for other events); its id is the hash of the
    audit line, so a webhook and the audit entry it reports name each other."""
    if entry["event"] not in STATE_EVENTS:
        return ""
    message = {
        "id": "msg_" + entry_hash(line)[:32],
        "approval_id": approval_id,
        "event": entry["event"],
        "status": entry.get("status", ""),
        "at": entry["at"],
    }
    return json.dumps(message)


def audit_entry(event: str, actor: str, **details: Any) -> str:
    """One line of an audit trail, before it is chained (``audit`` and ``transition`` add
    the ``prev`` hash when they append it)."""
    # A list of JSON lines, not a Stream: a stream allocates a 4 KB node even for the two
    # events of a waiting approval, which doubled the memory of one with a 10 KB history.
    entry = {"event": event, "actor": actor, "at": repr(time.time())}
    entry.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in details.items()})
    return _line(entry)


def _line(entry: dict[str, Any]) -> str:
    """An audit entry as its line: readable UTF-8, or, when some text in it is not Unicode (a
    lone surrogate in a reason typed at a terminal), every such character escaped: writing
    an entry never fails on what it says."""
    line = json.dumps(entry, ensure_ascii=False)
    try:
        line.encode()
    except UnicodeEncodeError:
        return json.dumps(entry)
    return line


def audit_lines(conn: redis.Redis, approval_id: str) -> list[bytes]:
    """The audit trail's lines exactly as stored (to check their chain)."""
    return cast(list[bytes], conn.lrange(audit_key(approval_id), 0, -1))


def expire_audit(conn: redis.Redis, approval_id: str, ttl: int) -> bool:
    """Keep a finished approval's audit trail ``ttl`` more seconds (``APPROVALS_AUDIT_TTL``);
    False, and nothing changed, for one that has not finished: a trail that vanished while
    its approval waits or runs would restart its chain halfway."""
    keys = [FINISHED_KEY, audit_key(approval_id)]
    return bool(eval_script(conn, _EXPIRE_AUDIT_LUA, keys, [approval_id, ttl]))


_EXPIRE_AUDIT_LUA = """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
"""


def webhook_failed(conn: redis.Redis, url: str) -> None:
    """Note that a webhook receiver failed (kept from its first failure until it answers)."""
    conn.hsetnx(WEBHOOK_FAILING_KEY, url, repr(time.time()))


def webhook_answered(conn: redis.Redis, url: str) -> None:
    conn.hdel(WEBHOOK_FAILING_KEY, url)


def webhooks_failing(conn: redis.Redis) -> dict[str, float]:
    """Receiver URL -> since when it has failed, for every receiver failing now."""
    raw = cast(dict[bytes, bytes], conn.hgetall(WEBHOOK_FAILING_KEY))
    found = {}
    for url, since in raw.items():
        try:
            found[_text(url)] = float(since)
        except ValueError:
            continue
    return found


def first_receipt_use(conn: redis.Redis, jti: str, ttl: int) -> bool:
    """Remember a receipt id for ``ttl`` seconds; False when it was remembered already."""
    return bool(conn.set(receipt_key(jti), b"1", nx=True, ex=ttl))


def audit_trail(conn: redis.Redis, approval_id: str) -> list[dict[str, str]]:
    """The audit events of one approval, oldest first (entries that do not parse are shown
    as such: Redis is a trust boundary)."""
    lines = cast(list[bytes], conn.lrange(audit_key(approval_id), 0, -1))
    return [parse_audit_line(line) for line in lines]


def audit_trails(conn: redis.Redis, ids: list[str]) -> list[list[dict[str, str]]]:
    """``audit_trail`` of each of these approvals, in one round trip."""
    pipe = conn.pipeline(transaction=False)
    for approval_id in ids:
        pipe.lrange(audit_key(approval_id), 0, -1)
    return [[parse_audit_line(line) for line in lines] for lines in pipe.execute()]


def parse_audit_line(line: bytes) -> dict[str, str]:
    """One stored audit line as ``audit_trail`` shows it."""
    try:
        entry = json.loads(line)
    except ValueError:
        entry = None
    if not isinstance(entry, dict):
        raw = line.decode(errors="replace")[:200]
        return {"event": "unreadable", "actor": "", "at": "0", "raw": raw}
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in entry.items()}


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _json(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise CorruptRecord("a stored field is not valid JSON") from None
