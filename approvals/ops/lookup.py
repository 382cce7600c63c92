"""Finding an approval, a run's outcome or audit events: in Redis first, then the archive.

Redis holds what is waiting and what finished recently (``approvals.ops.retention``); the
archive holds what finished before. ``approvals show``, ``result`` and ``audit export`` read
both, so an old approval is still one command away.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import TYPE_CHECKING

import redis

from approvals import store
from approvals.calls import outcomes
from approvals.config import Settings
from approvals.errors import UnknownApproval
from approvals.models import Approval
from approvals.models.outcome import Outcome, compose

if TYPE_CHECKING:
    from approvals.ops import archive

AuditEvent = dict[str, str]
#: Audit trails read from Redis per round trip.
_BATCH = 500


def archive_of(settings: Settings) -> archive.Archive | None:
    """The process's archive, or None without ``APPROVALS_ARCHIVE_URL``.

    The archive's module is imported only then: SQLAlchemy and Alembic are much of a
    process's memory, and a worker without an archive should not carry them into every
    work-horse it forks.
    """
    if not settings.archive_url:
        return None
    from approvals.ops import archive

    return archive.shared(settings.archive_url)


def find_approval(
    conn: redis.Redis, settings: Settings, approval_id: str
) -> tuple[Approval, list[AuditEvent]]:
    """An approval and its audit trail; ``UnknownApproval`` when neither place has it."""
    try:
        return store.records.load(conn, approval_id), store.audit.audit_trail(conn, approval_id)
    except UnknownApproval:
        stored = archive_of(settings)
        found = None if stored is None else stored.load(approval_id)
        if stored is None or found is None:
            raise
        return found, stored.audit_trail(approval_id)


def find_audit_lines(conn: redis.Redis, settings: Settings, approval_id: str) -> list[bytes]:
    """An approval's audit entries exactly as stored, from Redis, else from the archive;
    ``UnknownApproval`` when neither place has the approval."""
    try:
        store.records.load(conn, approval_id)
    except UnknownApproval:
        stored = archive_of(settings)
        if stored is None or stored.load(approval_id) is None:
            raise
        return stored.audit_lines(approval_id)
    return store.audit.audit_lines(conn, approval_id)


def find_outcome(conn: redis.Redis, settings: Settings, some_id: str) -> Outcome:
    """How a run ended, or where it is now (``some_id``: a pause id or a run id)."""
    try:
        return outcomes.run_outcome(conn, outcomes.run_id_of(conn, some_id))
    except UnknownApproval:
        stored = archive_of(settings)
        if stored is None:
            raise
    approval = stored.load(some_id)
    run_id = some_id if approval is None else approval.run_id or approval.id
    kept = stored.outcome(run_id)
    if kept is not None:
        return Outcome.from_dict(kept)
    approvals = stored.run_of(run_id) or ([] if approval is None else [approval])
    if not approvals:
        raise UnknownApproval(some_id)
    return compose(run_id, approvals)


def audit_events(
    conn: redis.Redis, settings: Settings, since: float
) -> Iterator[tuple[str, AuditEvent]]:
    """(approval id, event) of every audit event at or after ``since``, oldest first, from
    Redis and the archive (an approval in both is read from Redis)."""
    in_redis = store.audit.audit_ids(conn)
    recent: list[tuple[str, AuditEvent]] = []
    for start in range(0, len(in_redis), _BATCH):
        ids = in_redis[start : start + _BATCH]
        for approval_id, trail in zip(ids, store.audit.audit_trails(conn, ids), strict=True):
            recent += [(approval_id, event) for event in trail if _at(event) >= since]
    recent.sort(key=lambda found: _at(found[1]))
    stored = archive_of(settings)
    if stored is None:
        yield from recent
        return
    skip = set(in_redis)
    older = (found for found in stored.events_since(since) if found[0] not in skip)
    yield from heapq.merge(recent, older, key=lambda found: _at(found[1]))


def _at(event: AuditEvent) -> float:
    try:
        return float(event.get("at", "0"))
    except ValueError:
        return 0.0
