"""A run: its pauses in order, the stream that wakes whoever waits on it, and its outcome
with the ``on_finish`` still to call."""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from typing import Any, cast

import redis

from approvals.config import Settings
from approvals.errors import UnknownApproval
from approvals.models import (
    Approval,
)
from approvals.models.outcome import Outcome, compose
from approvals.store import queue
from approvals.store.connection import eval_script, json_value, text
from approvals.store.keys import (
    ENDED_KEY,
    ENDS_CHECKED_KEY,
    FINISHED_KEY,
    FINISHING_KEY,
    outcome_key,
    run_key,
    run_pauses_key,
)
from approvals.store.records import load, load_many


def run_pauses(conn: redis.Redis, run_id: str) -> list[str]:
    """The ids of a run's pauses, in order (empty when the run is unknown or expired)."""
    return [text(i) for i in cast(list[bytes], conn.lrange(run_pauses_key(run_id), 0, -1))]


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
            after = text(entries[-1][0])
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
    return [text(i) for i in cast(list[bytes], conn.zrangebyscore(FINISHING_KEY, since, until))]


def finished_between(conn: redis.Redis, since: float, until: float) -> list[Approval]:
    """The approvals that finished (``FINISHED_LUA``) after ``since`` and by ``until``."""
    ids = cast(list[bytes], conn.zrangebyscore(FINISHED_KEY, f"({since!r}", repr(until)))
    return load_many(conn, [text(i) for i in ids])


def ends_checked(conn: redis.Redis) -> float | None:
    """Up to when finished approvals were looked at for an outcome never stored."""
    value = conn.get(ENDS_CHECKED_KEY)
    return None if value is None else float(text(value))


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
    return json_value(raw[0]), text(raw[1]) or None


def load_run(conn: redis.Redis, run_id: str) -> list[Approval]:
    found = []
    for pause_id in run_pauses(conn, run_id):
        try:
            found.append(load(conn, pause_id))
        except UnknownApproval:
            continue
    return found


def finish_run(conn: redis.Redis, settings: Settings, approval: Approval) -> Outcome | None:
    """Record the end of the run ``approval`` (its last pause) belongs to, and queue its
    ``on_finish``; once per run (a second call changes nothing and returns None). A record
    without a run id (paused before runs had one), or a run its records do not show ended,
    has no outcome to record."""
    if approval.run_id is None:
        return None
    outcome = compose(approval.run_id, load_run(conn, approval.run_id) or [approval])
    if not outcome.ended:  # a call of its turn still waits, say: not an end to record
        return None
    encoded = json.dumps(outcome.to_dict(), ensure_ascii=False)
    ttl = settings.result_ttl
    if not save_outcome(conn, approval.run_id, encoded, approval.on_finish, ttl):
        return None
    if approval.on_finish:
        queue.enqueue_finish(conn, settings, approval.run_id)
    return outcome
