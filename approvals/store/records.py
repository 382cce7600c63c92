"""The approval's record: created with its history, read back (checked field by field: Redis is
a trust boundary), and the small marks a resume and a card leave on it (tool started and
finished, the card's ts, locks and one-time claims)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, cast

import redis

from approvals.errors import CorruptRecord, UnknownApproval
from approvals.models import (
    TRANSITIONS,
    Approval,
    Status,
    approval_from_parts,
)
from approvals.models.preview import Preview, PreviewKind
from approvals.secrets import mask_text
from approvals.store.audit import audit_entry, new_trail
from approvals.store.connection import eval_script, json_value, text
from approvals.store.deadlines import drop_deadline
from approvals.store.keys import (
    DECIDED_KEY,
    EVENTS_KEY,
    FINISHED_KEY,
    METRICS_KEY,
    PENDING_KEY,
    approval_key,
    audit_key,
    history_key,
    lock_key,
    preview_key,
    run_pauses_key,
)
from approvals.store.metrics import _OBSERVE_LUA, HISTOGRAM_BUCKETS, bucket_name

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


def mark_tool_finished(conn: redis.Redis, approval_id: str) -> None:
    conn.hset(approval_key(approval_id), "tool_finished", repr(time.time()))


def create(
    conn: redis.Redis,
    approval: Approval,
    history: list[dict[str, Any]],
    run_ttl: int | None = 0,
    events: Sequence[str] = (),
    *,
    pipeline: Any = None,
    in_run: bool = True,
    preview: Preview | None = None,
    outbox: list[str] | None = None,
) -> Any:
    """Queue the writes that create a pending approval on a transactional pipeline (a new
    one, or ``pipeline`` when several approvals are created together: the calls of a turn).

    ``events`` are audit lines (``audit_entry``) that follow its first one, "paused".

    Returned un-executed so the caller can add the card job to the same MULTI/EXEC: either
    both the approval and its card job exist, or neither does. An approval with a ``run_id``
    is also added to its run's list of pauses, kept ``run_ttl`` seconds from now (a list, not
    the run's stream: a stream's first entry allocates a node of kilobytes, which every waiting
    approval would carry). Given ``outbox``, the webhooks' entries go there instead of to the
    outbox, for the caller to push once the pause stands (``push_outbox``).
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
    if preview is not None and approval.preview_cut:
        pipe.set(preview_key(approval.id), preview.text)
    pipe.zadd(PENDING_KEY, {approval.id: approval.created_at})
    first = audit_entry(
        "paused", approval.agent, tool=approval.tool_name, **preview_shown(approval)
    )
    lines, entries = new_trail(approval.id, [first, *events])
    pipe.rpush(audit_key(approval.id), *lines)
    if outbox is not None:
        outbox.extend(entries)
    elif entries:
        pipe.rpush(EVENTS_KEY, *entries)
    if approval.run_id is not None and in_run:
        pipe.rpush(run_pauses_key(approval.run_id), approval.id)
        if run_ttl is None:  # it waits indefinitely, and so may its run's waiters
            pipe.persist(run_pauses_key(approval.run_id))
        else:
            pipe.expire(run_pauses_key(approval.run_id), max(run_ttl, 1))
    return pipe


def push_outbox(pipe: Any, entries: Sequence[str]) -> None:
    """Queue the webhooks' entries ``create`` set aside on ``pipe``."""
    if entries:
        pipe.rpush(EVENTS_KEY, *entries)


def withdraw(conn: redis.Redis, approvals: Sequence[Approval]) -> None:
    """Delete pauses just created, before anyone was told of them (no card job, no webhook
    entry yet): their records, histories, trails, places in the indexes and deadlines."""
    pipe = conn.pipeline(transaction=True)
    for approval in approvals:
        pipe.delete(
            approval_key(approval.id),
            history_key(approval.id),
            audit_key(approval.id),
            preview_key(approval.id),
        )
        pipe.zrem(PENDING_KEY, approval.id)
        for kind in ("expire", "warn", "remind", "escalate"):
            drop_deadline(pipe, kind, approval.id)
        if approval.run_id is not None:
            pipe.lrem(run_pauses_key(approval.run_id), 0, approval.id)
    pipe.execute()


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
    lines, outbox = new_trail(approval.id, events)
    args = [approval.id, repr(time.time()), record, target.value, decision, actor]
    args += [str(len(lines)), *lines, *outbox]
    keys = [approval_key(approval.id), DECIDED_KEY, audit_key(approval.id), EVENTS_KEY]
    keys.append(FINISHED_KEY)
    return bool(eval_script(conn, _AUTOMATIC_LUA, keys, args))


def load(conn: redis.Redis, approval_id: str) -> Approval:
    """Read an approval (without its history); ``UnknownApproval`` or ``CorruptRecord``.

    A call that shares its turn's card comes with every call of the turn (``turn_calls``),
    read just after it, so the card drawn from any of them lists them all.
    """
    raw = cast(dict[bytes, bytes], conn.hgetall(approval_key(approval_id)))
    if not raw:
        raise UnknownApproval(approval_id)
    return _with_turn(conn, from_hash(approval_id, raw))


def _with_turn(conn: redis.Redis, approval: Approval) -> Approval:
    if approval.in_turn:
        approval.turn_calls = tuple(load_many(conn, list(approval.turn)))
    return approval


def from_hash(approval_id: str, raw: dict[bytes, bytes]) -> Approval:
    try:
        fields = {k.decode(): v for k, v in raw.items()}
        approval = approval_from_parts(
            record=json_value(fields.get("record")),
            status=text(fields.get("status")),
            card_ts=text(fields.get("card_ts")) or None,
            decision=json_value(fields.get("decision")),
            result=json_value(fields.get("result")),
            votes=json_value(fields.get("votes")),
            marks={k: text(fields.get(k)) for k in ("tool_started", "tool_finished", "escalated")},
        )
    except UnicodeDecodeError:
        raise CorruptRecord(f"approval {approval_id} is not valid UTF-8") from None
    if approval.id != approval_id:
        raise CorruptRecord(f"approval {approval_id} holds the record of {approval.id}")
    approval.receipt = text(raw.get(b"receipt")) or None
    approval.stale = _count(raw.get(b"stale"))
    # The state it waits on again, once the state changed after a decision.
    approval.fingerprint = text(raw.get(b"fingerprint")) or approval.fingerprint
    _preview_again(approval, raw.get(PREVIEW_AGAIN.encode()))
    return approval


#: The hash field holding the preview computed again on a changed state (``preview_fields``);
#: it stands in for the record's own preview, which was computed at the pause.
PREVIEW_AGAIN = "preview_again"


def preview_fields(preview: Preview | None) -> dict[str, str]:
    """The fields that make ``preview`` the approval's preview (a transition writes them with
    the status), for a preview computed after the pause; keep its whole with
    ``keep_whole_preview``."""
    if preview is None:
        return {}
    shown = {
        "head": preview.head,
        "kind": preview.kind.value,
        "sha256": preview.sha256,
        "length": len(preview.text),
    }
    return {PREVIEW_AGAIN: json.dumps(shown)}


def keep_whole_preview(conn: redis.Redis, approval_id: str, preview: Preview | None) -> None:
    """Keep the whole of a preview longer than its head, for the View preview modal."""
    if preview is not None and len(preview.text) > len(preview.head):
        conn.set(preview_key(approval_id), preview.text)


def _preview_again(approval: Approval, raw: bytes | None) -> None:
    """Apply a preview computed again (``preview_fields``); one that is not well formed is
    ignored (Redis is a trust boundary: it is only shown), leaving the pause's."""
    try:
        stored = json_value(raw)
    except CorruptRecord:
        return
    if not isinstance(stored, dict):
        return
    head, kind, digest, length = (stored.get(k) for k in ("head", "kind", "sha256", "length"))
    kinds = {k.value for k in PreviewKind}
    if not (isinstance(head, str) and kind in kinds and isinstance(digest, str)):
        return
    if not isinstance(length, int) or length < len(head):
        return
    approval.preview, approval.preview_kind = head, PreviewKind(kind)
    approval.preview_sha256, approval.preview_length = digest, length


#: Characters of a preview's head an audit entry and a webhook body carry (its digest names
#: the whole).
SHOWN_HEAD = 500


def preview_shown(approval: Approval) -> dict[str, str]:
    """The preview people were shown, as audit entries and webhooks record it: its SHA-256
    and its head (secrets masked); nothing without a preview."""
    shown = approval.shown_preview
    if shown is None or approval.preview_sha256 is None:
        return {}
    return {"preview_sha256": approval.preview_sha256, "preview_head": shown.text[:SHOWN_HEAD]}


def load_preview(conn: redis.Redis, approval: Approval) -> Preview | None:
    """The whole of the approval's preview (None: it has none). Secrets of its arguments are
    masked, as on the card; when the whole is gone (or does not match the digest the record
    holds), the head the record holds, saying so."""
    head = approval.shown_preview
    if head is None or not approval.preview_cut:
        return head
    raw = cast(bytes | None, conn.get(preview_key(approval.id)))
    whole = None if raw is None else Preview(raw.decode("utf-8", "replace"), head.kind)
    if whole is None or whole.sha256 != approval.preview_sha256:
        return Preview(f"{head.text}\n… (the rest of this preview is no longer kept)", head.kind)
    return Preview(mask_text(whole.text, approval.arguments, approval.shown_arguments), head.kind)


def _count(raw: bytes | None) -> int:
    """A count the hash holds (0 when absent or not a count: Redis is a trust boundary)."""
    try:
        return max(0, int(text(raw) or 0))
    except ValueError:
        return 0


def load_history(conn: redis.Redis, approval_id: str) -> list[dict[str, Any]]:
    """The message history saved at the pause."""
    return parse_history(approval_id, cast(bytes | None, conn.get(history_key(approval_id))))


def parse_history(approval_id: str, raw: bytes | None) -> list[dict[str, Any]]:
    """A saved history as ``load_history`` returns it, from its stored bytes."""
    history = json_value(raw)
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
    return _with_turn(conn, from_hash(approval_id, raw)), history


def load_many(conn: redis.Redis, ids: list[str]) -> list[Approval]:
    """Approvals by id in one round trip; missing or corrupt records are skipped, not fatal."""
    pipe = conn.pipeline(transaction=False)
    for approval_id in ids:
        pipe.hgetall(approval_key(approval_id))
    found = []
    for approval_id, raw in zip(ids, pipe.execute(), strict=True):
        if not raw:
            continue
        try:
            found.append(from_hash(approval_id, raw))
        except CorruptRecord:
            continue
    return found


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
    return bool(recorded), _with_turn(conn, from_hash(approval_id, raw))


def lock(conn: redis.Redis, approval_id: str, purpose: str, ttl: int) -> bool:
    """Take a short-lived lock on some work for an approval; False while someone holds it."""
    return bool(conn.set(lock_key(approval_id, purpose), "1", nx=True, ex=ttl))


def unlock(conn: redis.Redis, approval_id: str, purpose: str) -> None:
    conn.delete(lock_key(approval_id, purpose))


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
