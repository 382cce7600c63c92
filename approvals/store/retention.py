"""What retention reads and removes: finished approvals, their histories and ended runs, by
when they finished; removal is one atomic step per batch that leaves alone anything not
finished, or whose trail grew since it was archived."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import redis

from approvals.errors import CorruptRecord
from approvals.models import (
    Approval,
)
from approvals.store.connection import eval_script, json_value, text
from approvals.store.keys import (
    DECIDED_KEY,
    ENDED_KEY,
    FINISHED_HISTORY_KEY,
    FINISHED_KEY,
    METRICS_KEY,
    RETENTION_LOCK_KEY,
    approval_key,
    audit_key,
    history_key,
    outcome_key,
    preview_key,
)
from approvals.store.records import FINISHED_LUA, from_hash

# --------------------------------------------------------------------------- retention


def finished_until(
    conn: redis.Redis, key: str, until: float, limit: int
) -> list[tuple[str, float]]:
    """Up to ``limit`` (id, finished at) of ``FINISHED_KEY`` or ``FINISHED_HISTORY_KEY`` that
    finished by ``until``, oldest first."""
    found = conn.zrangebyscore(key, "-inf", repr(until), start=0, num=limit, withscores=True)
    return [(text(i), float(at)) for i, at in cast(list[tuple[bytes, float]], found)]


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
        yield text(key)[len(prefix) :]


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
            found.append(Finished(from_hash(approval_id, raw), list(lines)))
        except CorruptRecord:
            continue
    return found


# KEYS: finished zset, finished-history zset, decided zset, metrics hash, then each id's
# approval hash, history, audit list and preview. ARGV: pairs of id and how many audit lines the
# archive holds ("-1": no archive). An approval that is not finished is left alone; one whose
# audit trail grew after it was archived, or whose decision still owes its after-steps, stays
# for the next round (its new lines are archived then). Returns the ids removed.
_FORGET_APPROVALS_LUA = (
    FINISHED_LUA
    + """
local removed = {}
for i = 1, #ARGV / 2 do
  local id, archived = ARGV[2 * i - 1], tonumber(ARGV[2 * i])
  local hash, history, audit = KEYS[1 + 4 * i], KEYS[2 + 4 * i], KEYS[3 + 4 * i]
  local preview = KEYS[4 + 4 * i]
  local status = redis.call('HGET', hash, 'status')
  local gone = not status or finished(hash, status)
  if redis.call('HEXISTS', hash, 'owed') == 1 then
    -- What follows its decision is still owed (its audit entry, say): a later round.
  elseif gone and (archived < 0 or redis.call('LLEN', audit) <= archived) then
    redis.call('DEL', hash, history, audit, preview)
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
    """Delete these finished approvals' records, histories, audit trails and previews.

    ``archived`` maps each id to how many audit lines the archive holds (None: there is no
    archive). Never touches an approval that is not finished. Returns the ids removed.
    """
    if not archived:
        return []
    keys = [FINISHED_KEY, FINISHED_HISTORY_KEY, DECIDED_KEY, METRICS_KEY]
    args: list[str] = []
    for approval_id, lines in archived.items():
        keys += [approval_key(approval_id), history_key(approval_id), audit_key(approval_id),
                 preview_key(approval_id)]  # fmt: skip
        args += [approval_id, str(-1 if lines is None else lines)]
    return [
        text(i) for i in cast(list[bytes], eval_script(conn, _FORGET_APPROVALS_LUA, keys, args))
    ]


def ended_runs(conn: redis.Redis, limit: int) -> list[tuple[str, Any, float]]:
    """Up to ``limit`` ended runs not archived yet, oldest first, each with its stored
    outcome (decoded; None when it has expired already) and when it ended."""
    ended = cast(list[tuple[bytes, float]], conn.zrange(ENDED_KEY, 0, limit - 1, withscores=True))
    pipe = conn.pipeline(transaction=False)
    for run_id, _ in ended:
        pipe.hget(outcome_key(text(run_id)), "outcome")
    found = []
    for (run_id, at), raw in zip(ended, pipe.execute(), strict=True):
        try:
            outcome = json_value(raw)
        except CorruptRecord:
            outcome = None
        found.append((text(run_id), outcome, float(at)))
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
