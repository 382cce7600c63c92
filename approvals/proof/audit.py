"""Checking an audit trail nobody can quietly change, and exporting trails for a SIEM.

Each entry carries ``prev``, the SHA-256 of the line before it (``store`` appends them so), and
the decisions that released a call carry their signed receipt (or, when none could be signed,
``receipt_error``, which a check reports: such a call never looks verified). So an entry
edited or removed in Redis breaks the chain at the next entry, and a decision rewritten to
other arguments no longer matches a receipt that only the signing key could have made.
Whoever can write Redis could still rewrite a whole trail from some entry on: the webhooks
and exports, which leave Redis as they happen, are the copies to compare it with (their ids
are the entries' hashes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from approvals import store
from approvals.errors import InvalidReceipt
from approvals.proof import receipts

#: Every trail begins with this event (``store.records.create`` writes it with the approval).
FIRST_EVENT = "paused"


@dataclass(frozen=True)
class TrailCheck:
    """What ``check_trail`` found: entries, receipts that verified, and every problem."""

    entries: int
    receipts: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_trail(conn: redis.Redis, approval_id: str, keys: receipts.Keys) -> TrailCheck:
    """Check the approval's audit chain and the signatures of the receipts it carries."""
    return check_lines(approval_id, store.audit.audit_lines(conn, approval_id), keys)


def check_lines(approval_id: str, lines: list[bytes], keys: receipts.Keys) -> TrailCheck:
    """``check_trail`` on lines already read (the entries as stored, oldest first)."""
    problems: list[str] = []
    verified = 0
    prev = store.audit.GENESIS
    if not lines:
        problems.append(
            "the audit trail is empty: removed from Redis (APPROVALS_AUDIT_TTL, or by hand)"
        )
    elif (_parse(lines[0]) or {}).get("event") != FIRST_EVENT:
        problems.append(
            f"entry 1 is not {FIRST_EVENT!r}, where every trail begins: its start was removed"
        )
    for number, line in enumerate(lines, start=1):
        entry = _parse(line)
        if entry is None:
            problems.append(f"entry {number} is not a JSON object")
        elif entry.get("prev") != prev:
            problems.append(
                f"entry {number} ({entry.get('event')}) does not follow entry "
                f"{number - 1}: an entry was changed, removed or inserted"
            )
        if entry is not None and entry.get("receipt"):
            problem = _receipt_problem(approval_id, entry, keys)
            if problem is None:
                verified += 1
            else:
                problems.append(f"entry {number} ({entry.get('event')}): {problem}")
        if entry is not None and entry.get("receipt_error"):
            # The call was released without the receipt its decider owed it.
            problems.append(f"entry {number} ({entry.get('event')}): {entry['receipt_error']}")
        prev = store.audit.entry_hash(line)
    return TrailCheck(len(lines), verified, problems)


def _receipt_problem(approval_id: str, entry: dict[str, Any], keys: receipts.Keys) -> str | None:
    """Why the entry's receipt does not back it (None when it does). Old receipts have
    expired long ago, so only the signature and what it names are checked."""
    try:
        receipt = receipts.read_receipt(str(entry["receipt"]), keys, check_time=False)
    except InvalidReceipt as exc:
        return str(exc)
    if receipt.approval_id != approval_id:
        return f"its receipt is for approval {receipt.approval_id}"
    approved = entry.get("approved")
    if isinstance(approved, str) and receipts.args_sha256(json.loads(approved)) != (
        receipt.args_sha256
    ):
        return "its approved arguments differ from the ones its receipt was signed for"
    return None


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return entry if isinstance(entry, dict) else None


def export(conn: redis.Redis, since: float) -> Iterator[dict[str, Any]]:
    """Every audit entry written at or after ``since`` (epoch seconds), one dict each, with
    its approval id and its own hash (for comparing with the chain later). Entries of one
    approval come in order; approvals come in no particular order."""
    for approval_id in store.audit.audit_ids(conn):
        for line in store.audit.audit_lines(conn, approval_id):
            entry = _parse(line)
            if entry is None or _at(entry) < since:
                continue
            yield {"approval_id": approval_id, **entry, "hash": store.audit.entry_hash(line)}


def _at(entry: dict[str, Any]) -> float:
    try:
        return float(entry.get("at", 0))
    except (TypeError, ValueError):
        return 0.0
