"""The only code that talks to Redis about approvals; every key name is defined here.

Keys (all under the ``approvals:`` prefix)::

    approvals:approval:<id>   hash    record (JSON), status, decided_by, decision, result, card_ts
    approvals:history:<id>    string  the llm message history to resume from (JSON list)
    approvals:pending         zset    ids of pending approvals, scored by creation time
    approvals:audit:<id>      stream  what happened to the approval, with time and actor

The history lives apart from the hash so that listing and deciding never read it. Status
changes go through ``transition``, a Lua compare-and-set: it checks the current status against
``models.TRANSITIONS`` and writes in one step, so concurrent deciders cannot both win.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, cast

import redis

from approvals.config import Settings
from approvals.errors import CorruptRecord, UnknownApproval
from approvals.models import (
    Approval,
    Status,
    approval_from_parts,
    sources_of,
)

PREFIX = "approvals:"
PENDING_KEY = PREFIX + "pending"


def approval_key(approval_id: str) -> str:
    return f"{PREFIX}approval:{approval_id}"


def history_key(approval_id: str) -> str:
    return f"{PREFIX}history:{approval_id}"


def audit_key(approval_id: str) -> str:
    return f"{PREFIX}audit:{approval_id}"


def connect(settings: Settings) -> redis.Redis:
    """A client for ``REDIS_URL`` (``redis://``, ``rediss://`` and ACL users in the URL work).

    Responses stay bytes: RQ shares this connection and needs them so.
    """
    return redis.Redis.from_url(settings.redis_url, health_check_interval=30)


_TRANSITION_LUA = """
local current = redis.call('HGET', KEYS[1], 'status')
if not current then return {0, '', ''} end
local allowed = cjson.decode(ARGV[3])
for _, status in ipairs(allowed) do
  if status == current then
    redis.call('HSET', KEYS[1], 'status', ARGV[2])
    for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
    if current == 'pending' then redis.call('ZREM', KEYS[2], ARGV[1]) end
    return {1, current, ''}
  end
end
return {0, current, redis.call('HGET', KEYS[1], 'decided_by') or ''}
"""


@dataclass(frozen=True)
class TransitionResult:
    ok: bool
    #: The status found before the attempt ("" when the approval does not exist).
    previous: str
    #: Who decided, when the attempt lost against an earlier decision.
    decided_by: str | None


def transition(
    conn: redis.Redis, approval_id: str, target: Status, fields: dict[str, str] | None = None
) -> TransitionResult:
    """Move an approval to ``target`` if ``models.TRANSITIONS`` allows it from its current status.

    ``fields`` are written in the same atomic step. Returns what was found, so a loser can
    be told who won.
    """
    allowed = json.dumps([s.value for s in sources_of(target)])
    args: list[str] = [approval_id, target.value, allowed]
    for name, value in (fields or {}).items():
        args += [name, value]
    script = conn.register_script(_TRANSITION_LUA)
    ok, previous, decided_by = cast(
        list[Any], script(keys=[approval_key(approval_id), PENDING_KEY], args=args)
    )
    return TransitionResult(bool(ok), _text(previous), _text(decided_by) or None)


def create(conn: redis.Redis, approval: Approval, history: list[dict[str, Any]]) -> Any:
    """Queue the writes that create a pending approval on a transactional pipeline.

    Returned un-executed so the caller can add the card job to the same MULTI/EXEC: either
    both the approval and its card job exist, or neither does.
    """
    pipe = conn.pipeline(transaction=True)
    pipe.multi()  # explicit, so RQ's enqueue(pipeline=...) joins this transaction
    pipe.hset(
        approval_key(approval.id),
        mapping={"record": json.dumps(approval.record()), "status": Status.PENDING.value},
    )
    pipe.set(history_key(approval.id), json.dumps(history))
    pipe.zadd(PENDING_KEY, {approval.id: approval.created_at})
    _audit(pipe, approval.id, "paused", approval.agent, tool=approval.tool_name)
    return pipe


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
        )
    except UnicodeDecodeError:
        raise CorruptRecord(f"approval {approval_id} is not valid UTF-8") from None
    if approval.id != approval_id:
        raise CorruptRecord(f"approval {approval_id} holds the record of {approval.id}")
    return approval


def load_history(conn: redis.Redis, approval_id: str) -> list[dict[str, Any]]:
    """The message history saved at the pause."""
    raw = cast(bytes | None, conn.get(history_key(approval_id)))
    history = _json(raw)
    if not isinstance(history, list) or not all(isinstance(m, dict) for m in history):
        raise CorruptRecord(f"the history of approval {approval_id} is missing or malformed")
    return history


def pending(conn: redis.Redis, limit: int = 100) -> list[Approval]:
    """Pending approvals, newest first; records that fail to load are skipped, not fatal."""
    ids = [_text(i) for i in cast(list[bytes], conn.zrevrange(PENDING_KEY, 0, limit - 1))]
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


def pending_count(conn: redis.Redis) -> int:
    return int(conn.zcard(PENDING_KEY))


def set_card(conn: redis.Redis, approval_id: str, card_ts: str) -> bool:
    """Remember where the card was posted; False if a card was already recorded."""
    return bool(conn.hsetnx(approval_key(approval_id), "card_ts", card_ts))


def claim(conn: redis.Redis, approval_id: str, flag: str) -> bool:
    """Set a once-only flag on the approval; False when it was set already."""
    return bool(conn.hsetnx(approval_key(approval_id), flag, repr(time.time())))


def release(conn: redis.Redis, approval_id: str, flag: str) -> None:
    """Clear a flag set by ``claim`` (its work failed and will be retried)."""
    conn.hdel(approval_key(approval_id), flag)


def audit(conn: redis.Redis, approval_id: str, event: str, actor: str, **details: Any) -> None:
    """Append one event to the approval's audit stream."""
    _audit(conn, approval_id, event, actor, **details)


def _audit(target: Any, approval_id: str, event: str, actor: str, **details: Any) -> None:
    entry = {"event": event, "actor": actor, "at": repr(time.time())}
    entry.update({k: v if isinstance(v, str) else json.dumps(v) for k, v in details.items()})
    target.xadd(audit_key(approval_id), entry)


def audit_trail(conn: redis.Redis, approval_id: str) -> list[dict[str, str]]:
    """The audit events of one approval, oldest first."""
    entries = cast(list[tuple[bytes, dict[bytes, bytes]]], conn.xrange(audit_key(approval_id)))
    return [{_text(k): _text(v) for k, v in fields.items()} for _, fields in entries]


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _json(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except (ValueError, UnicodeDecodeError):
        raise CorruptRecord("a stored field is not valid JSON") from None
