"""The only code that talks to Redis about approvals; every key name is defined here.

Keys (all under the ``approvals:`` prefix)::

    approvals:approval:<id>   hash    record (JSON), status, decided_by, decision, result, card_ts
    approvals:history:<id>    string  the llm message history to resume from (JSON list)
    approvals:pending         zset    ids of pending approvals, scored by creation time
    approvals:decided         zset    the most recent decisions, scored by decision time
    approvals:running         zset    ids of approvals whose resume is running, by start time
    approvals:lease:<id>      string  held (with a TTL) by the worker running the resume
    approvals:lock:<id>:<what> string a short lock on one piece of work (posting the card)
    approvals:usergroup:<id>  string  cached members of a Slack user group (JSON list, TTL)
    approvals:audit:<id>      list    what happened to the approval (JSON lines: event, actor, at)
    approvals:deadlines       zset    "expire:<id>", "warn:<id>", "remind:<id>", "escalate:<id>",
                                      scored by when they are due
    approvals:seen:<sig>      string  a Slack request signature already accepted (TTL)
    approvals:run:<run_id>    stream  wakes a run's waiters: "paused" again after a resume, "ended"
    approvals:run:<run_id>:pauses list  the run's pause ids, in order (TTL)
    approvals:outcome:<run_id> hash   outcome (JSON), on_finish, on_finish_called (TTL)
    approvals:finishing       zset    runs whose on_finish has not returned, by when they ended
    approvals:grant:<id>      hash    record (JSON), expires_at, uses, revoked_at, revoked_by
    approvals:grants          zset    grant ids, scored by creation time
    approvals:grants:tool:<name> zset grant ids for one tool (what a gated call looks at)

The history lives apart from the hash so that listing and deciding never read it. Status
changes go through ``transition``, a Lua compare-and-set: it checks the current status against
``models.TRANSITIONS`` and writes in one step, so concurrent deciders cannot both win.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import redis
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
RUNNING_KEY = PREFIX + "running"
DEADLINES_KEY = PREFIX + "deadlines"
#: Runs whose ``on_finish`` has not returned yet, by when they ended.
FINISHING_KEY = PREFIX + "finishing"
GRANTS_KEY = PREFIX + "grants"


def approval_key(approval_id: str) -> str:
    return f"{PREFIX}approval:{approval_id}"


def history_key(approval_id: str) -> str:
    return f"{PREFIX}history:{approval_id}"


def audit_key(approval_id: str) -> str:
    return f"{PREFIX}audit:{approval_id}"


def run_key(run_id: str) -> str:
    return f"{PREFIX}run:{run_id}"


def run_pauses_key(run_id: str) -> str:
    return f"{PREFIX}run:{run_id}:pauses"


def outcome_key(run_id: str) -> str:
    return f"{PREFIX}outcome:{run_id}"


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


# Shared by the scripts: keep the pending, recent-decision and running indexes in step.
_LEAVE_PENDING_LUA = """
local function leave_pending(current)
  if current == 'pending' then
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
end
""".replace("RECENT_KEPT", "200")

# KEYS: approval hash, pending zset, decided zset, running zset. ARGV: id, now, target,
# allowed (JSON), then field/value pairs written in the same step ("" deletes the field).
_TRANSITION_LUA = (
    _LEAVE_PENDING_LUA
    + """
local current = redis.call('HGET', KEYS[1], 'status')
if not current then return {0, '', ''} end
for _, status in ipairs(cjson.decode(ARGV[4])) do
  if status == current then
    redis.call('HSET', KEYS[1], 'status', ARGV[3])
    if ARGV[5] ~= '' then redis.call('RPUSH', KEYS[6], ARGV[5]) end
    if ARGV[6] ~= '' then redis.call('SET', KEYS[7], ARGV[2], 'EX', ARGV[6]) end
    if current == 'running' and ARGV[3] ~= 'running' then redis.call('DEL', KEYS[7]) end
    for i = 7, #ARGV, 2 do
      if ARGV[i + 1] == '' then
        redis.call('HDEL', KEYS[1], ARGV[i])
      else
        redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
      end
    end
    leave_pending(current)
    track_running(current, ARGV[3])
    return {1, current, ''}
  end
end
return {0, current, redis.call('HGET', KEYS[1], 'decided_by') or ''}
"""
)

# KEYS as above. ARGV: id, now, target, actor, approvals required, decision JSON.
# Adds the actor's approval; the approval is decided once enough distinct people approved.
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
leave_pending(current)
return {1, current, ''}
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


def _keys(approval_id: str) -> list[str]:
    return [approval_key(approval_id), PENDING_KEY, DECIDED_KEY, RUNNING_KEY, DEADLINES_KEY]


def transition(
    conn: redis.Redis,
    approval_id: str,
    target: Status,
    fields: dict[str, str] | None = None,
    *,
    sources: Iterable[Status] | None = None,
    event: str | None = None,
    lease: int | None = None,
) -> TransitionResult:
    """Move an approval to ``target`` if ``models.TRANSITIONS`` allows it from its current status.

    ``sources`` narrows where it may come from: a decision only ever leaves ``pending``, even
    though ``running`` may also return to a decided status when recovery requeues it.
    ``fields`` are written in the same atomic step, and so are, when the move happens, the
    audit entry ``event`` (an ``audit_entry`` line) and a lease of ``lease`` seconds (see
    ``hold_lease``): one round trip, and no moment where one is there without the other. A
    move out of ``running`` ends the run's lease.
    Returns what was found, so a loser can be told who won.
    """
    legal = sources_of(target)
    chosen = legal if sources is None else [s for s in sources if s in legal]
    assert sources is None or len(chosen) == len(set(sources)), "not in TRANSITIONS"
    allowed = json.dumps([s.value for s in chosen])
    args: list[str] = [approval_id, repr(time.time()), target.value, allowed]
    args += [event or "", str(lease) if lease is not None else ""]
    for name, value in (fields or {}).items():
        args += [name, value]
    keys = [*_keys(approval_id), audit_key(approval_id), lease_key(approval_id)]
    ok, previous, decided_by = cast(list[Any], eval_script(conn, _TRANSITION_LUA, keys, args))
    return TransitionResult(bool(ok), _text(previous), _text(decided_by) or None)


def vote(
    conn: redis.Redis, approval_id: str, target: Status, actor: str, required: int, decision: str
) -> VoteResult:
    """Count ``actor``'s approval; decide (``target``, ``decision`` JSON) once ``required``."""
    assert Status.PENDING in sources_of(target)
    args = [approval_id, repr(time.time()), target.value, actor, str(required), decision]
    found = eval_script(conn, _VOTE_LUA, _keys(approval_id), args)
    code, detail, decided_by = cast(list[Any], found)
    if code == 1:
        return VoteResult("decided", count=required)
    if code in (2, 3):
        return VoteResult("counted" if code == 2 else "duplicate", count=int(_text(detail)))
    return VoteResult("lost", previous=_text(detail), decided_by=_text(decided_by) or None)


def lease_key(approval_id: str) -> str:
    return f"{PREFIX}lease:{approval_id}"


def hold_lease(conn: redis.Redis, approval_id: str, ttl: int) -> None:
    """Say "a live worker runs this resume"; it lapses ``ttl`` seconds after its holder dies."""
    conn.set(lease_key(approval_id), repr(time.time()), ex=ttl)


def drop_lease(conn: redis.Redis, approval_id: str) -> None:
    conn.delete(lease_key(approval_id))


def mark_tool_started(conn: redis.Redis, approval_id: str) -> bool:
    """Record, before the gated tool starts, that it is about to run; False if already marked.

    The mark is what lets a later attempt know the tool may have run: at most once per decision.
    """
    return bool(conn.hsetnx(approval_key(approval_id), "tool_started", repr(time.time())))


def mark_tool_finished(conn: redis.Redis, approval_id: str) -> None:
    conn.hset(approval_key(approval_id), "tool_finished", repr(time.time()))


def running_ids(conn: redis.Redis) -> list[str]:
    """Approvals whose resume is (or was, if its worker died) running."""
    return [_text(i) for i in cast(list[bytes], conn.zrange(RUNNING_KEY, 0, -1))]


# KEYS: approval hash, running zset, lease. ARGV: id.
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
    keys = [approval_key(approval_id), RUNNING_KEY, lease_key(approval_id)]
    return _text(eval_script(conn, _RECOVER_LUA, keys, [approval_id]))


def create(
    conn: redis.Redis,
    approval: Approval,
    history: list[dict[str, Any]],
    run_ttl: int | None = 0,
) -> Any:
    """Queue the writes that create a pending approval on a transactional pipeline.

    Returned un-executed so the caller can add the card job to the same MULTI/EXEC: either
    both the approval and its card job exist, or neither does. An approval with a ``run_id``
    is also added to its run's list of pauses, kept ``run_ttl`` seconds from now (a list, not
    the run's stream: a stream's first entry allocates a node of kilobytes, which every waiting
    approval would carry).
    """
    pipe = conn.pipeline(transaction=True)
    pipe.multi()  # explicit, so RQ's enqueue(pipeline=...) joins this transaction
    pipe.hset(
        approval_key(approval.id),
        # Compact: it is kept for every waiting approval, so its size is Redis's memory.
        mapping={
            "record": json.dumps(approval.record(), separators=(",", ":")),
            "status": Status.PENDING.value,
        },
    )
    pipe.set(history_key(approval.id), json.dumps(history))
    pipe.zadd(PENDING_KEY, {approval.id: approval.created_at})
    audit(pipe, approval.id, "paused", approval.agent, tool=approval.tool_name)
    if approval.run_id is not None:
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
           'decision', ARGV[5], 'decided_by', ARGV[6])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(RECENT_KEPT + 1))
for i = 7, #ARGV do redis.call('RPUSH', KEYS[3], ARGV[i]) end
return 1
""".replace("RECENT_KEPT", "200")


def record_automatic(
    conn: redis.Redis, approval: Approval, target: Status, decision: str, events: list[str]
) -> bool:
    """Write an approval decided the moment it was asked for (by a rule or a grant), at once.

    One step creates the record already ``target`` with its ``decision`` (JSON) and audit
    lines (``audit_entry``), and lists it among the recent decisions; no card, deadline or
    resume job is written, because the agent's process carries the decision out itself.
    False when the id exists already (nothing was written).
    """
    assert target in TRANSITIONS[Status.PENDING], "an automatic decision leaves pending"
    record = json.dumps(approval.record(), separators=(",", ":"))
    actor = approval.decision.actor if approval.decision else "system"
    args = [approval.id, repr(time.time()), record, target.value, decision, actor, *events]
    keys = [approval_key(approval.id), DECIDED_KEY, audit_key(approval.id)]
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


# KEYS: outcome hash, run stream, finishing zset. ARGV: outcome JSON, on_finish ("" for
# none), ttl, run id, now.
_SAVE_OUTCOME_LUA = """
if redis.call('HSETNX', KEYS[1], 'outcome', ARGV[1]) == 0 then return 0 end
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
    keys = [outcome_key(run_id), run_key(run_id), FINISHING_KEY]
    args = [outcome, on_finish or "", ttl, run_id, repr(time.time())]
    return bool(eval_script(conn, _SAVE_OUTCOME_LUA, keys, args))


def finishing_between(conn: redis.Redis, since: float, until: float) -> list[str]:
    """Runs whose ``on_finish`` has not returned, that ended between the two times."""
    return [_text(i) for i in cast(list[bytes], conn.zrangebyscore(FINISHING_KEY, since, until))]


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


def load_outcome(conn: redis.Redis, run_id: str) -> tuple[Any, str | None]:
    """A run's stored outcome (decoded JSON, None when not ended or expired) and on_finish."""
    raw = cast(list[bytes | None], conn.hmget(outcome_key(run_id), ["outcome", "on_finish"]))
    return _json(raw[0]), _text(raw[1]) or None


def load(conn: redis.Redis, approval_id: str) -> Approval:
    """Read an approval (without its history); ``UnknownApproval`` or ``CorruptRecord``."""
    raw = cast(dict[bytes, bytes], conn.hgetall(approval_key(approval_id)))
    if not raw:
        raise UnknownApproval(approval_id)
    return _from_hash(approval_id, raw)


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
    return _from_hash(approval_id, raw), history


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


def cached_group(conn: redis.Redis, group_id: str) -> list[str] | None:
    """Members of a Slack user group as last fetched, or None when not cached."""
    members = _json(cast(bytes | None, conn.get(f"{PREFIX}usergroup:{group_id}")))
    if isinstance(members, list) and all(isinstance(m, str) for m in members):
        return members
    return None


def cache_group(conn: redis.Redis, group_id: str, members: list[str], ttl: int) -> None:
    conn.set(f"{PREFIX}usergroup:{group_id}", json.dumps(members), ex=ttl)


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
    return bool(recorded), _from_hash(approval_id, raw)


def lock(conn: redis.Redis, approval_id: str, purpose: str, ttl: int) -> bool:
    """Take a short-lived lock on some work for an approval; False while someone holds it."""
    return bool(conn.set(f"{PREFIX}lock:{approval_id}:{purpose}", "1", nx=True, ex=ttl))


def unlock(conn: redis.Redis, approval_id: str, purpose: str) -> None:
    conn.delete(f"{PREFIX}lock:{approval_id}:{purpose}")


def claim(conn: redis.Redis, approval_id: str, flag: str) -> bool:
    """Set a once-only flag on the approval; False when it was set already."""
    return bool(conn.hsetnx(approval_key(approval_id), flag, repr(time.time())))


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


def audit(target: Any, approval_id: str, event: str, actor: str, **details: Any) -> None:
    """Append one event to the approval's audit trail (``target``: a client or a pipeline)."""
    target.rpush(audit_key(approval_id), audit_entry(event, actor, **details))


def audit_entry(event: str, actor: str, **details: Any) -> str:
    """One line of an audit trail, as ``audit`` appends it (``transition`` takes one too)."""
    # A list of JSON lines, not a Stream: a stream allocates a 4 KB node even for the two
    # events of a waiting approval, which doubled the memory of one with a 10 KB history.
    entry = {"event": event, "actor": actor, "at": repr(time.time())}
    entry.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in details.items()})
    return json.dumps(entry, ensure_ascii=False)


def audit_trail(conn: redis.Redis, approval_id: str) -> list[dict[str, str]]:
    """The audit events of one approval, oldest first (entries that do not parse are shown
    as such: Redis is a trust boundary)."""
    lines = cast(list[bytes], conn.lrange(audit_key(approval_id), 0, -1))
    return [_audit_entry(line) for line in lines]


def _audit_entry(line: bytes) -> dict[str, str]:
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
