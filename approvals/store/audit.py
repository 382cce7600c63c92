"""The audit trail: one list per approval of JSON lines, each chained to the one before.

Each entry carries the SHA-256 of the line before it (``prev``) and is appended by a
compare-and-append (the list must still have the length the hash was read at), so entries the
bot and a worker write at the same moment still form one chain. An entry that is a state change
also goes into the webhooks' outbox (``keys.EVENTS_KEY``) in the same step, so no webhook is
ever lost. A list of lines, not a Stream: a stream allocates a node of kilobytes even for the two
events of a waiting approval.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any, cast

import redis

from approvals.store.connection import eval_script, text
from approvals.store.keys import EVENTS_KEY, FINISHED_KEY, approval_key, audit_key

#: The ``prev`` of an approval's first audit entry.
GENESIS = ""
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
        "stale",
    }
)


def new_trail(
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


def audit_ids(conn: redis.Redis) -> list[str]:
    """Every approval with an audit trail in Redis (``approvals audit export``): a SCAN, so
    Redis keeps answering others while it runs."""
    prefix = audit_key("")
    found = conn.scan_iter(match=prefix + "*", count=1000)
    return [text(key)[len(prefix) :] for key in found]


# KEYS: audit list, events outbox, approval hash. ARGV: the length the line was chained at,
# the line, the outbox entry ("" for none), then field/value pairs for the approval hash.
_APPEND_AUDIT_LUA = """
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[2])
if ARGV[3] ~= '' then redis.call('RPUSH', KEYS[2], ARGV[3]) end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
return 1
"""


def append(
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
        line, length, outbox = chained(conn, approval_id, audit_entry(event, actor, **details))
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


def chained(conn: redis.Redis, approval_id: str, line: str) -> tuple[str, int, str]:
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
