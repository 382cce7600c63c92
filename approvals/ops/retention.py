"""Retention: how long a finished approval stays in Redis, and the sweep that removes it.

Nothing that finishes would ever leave Redis otherwise, and Redis holds everything in memory.
A finished approval (completed, paused again, failed, or stopped by a rejection or an expiry
under ``on_reject="stop"``; see ``store.records.FINISHED_LUA``) is noted, by when it finished, in
the same atomic step that finishes it. Then:

- its message history goes after ``APPROVALS_HISTORY_RETENTION``: it is needed only to
  resume, and the audit trail keeps what ran;
- its record and audit trail go after ``APPROVALS_RETENTION``; with ``APPROVALS_ARCHIVE_URL``
  set they are written to the archive first, and Redis lets them go only once that write
  has committed;
- an ended run's outcome is copied to the archive soon after the run ends (in Redis it
  expires after ``APPROVALS_RESULT_TTL`` on its own, so that ``approvals result`` can still
  answer afterwards).

Every worker runs the sweep in the background, as it runs the deadline sweep; a lock in Redis
lets one worker at a time do it. Each step handles a small batch in one short Lua script,
which checks again, atomically, that the approval is finished: the sweep never touches an
approval that is not. A round stops after a bounded amount of work, so a large backlog is
worked off over many rounds instead of holding a worker's CPU.

An archive that cannot be used (down, or its schema not this version's) holds back records
and outcomes, which stay in Redis, while histories still go. A worker says so once, loudly,
at start-up, with the command that fixes it (``approvals doctor`` fails on it too), and the
sweep tries the archive again once a minute, quietly.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from approvals import store
from approvals.config import Settings
from approvals.errors import ArchiveError
from approvals.ops import lookup

if TYPE_CHECKING:
    from approvals.ops import archive

log = logging.getLogger(__name__)

#: Seconds between rounds of each worker.
SWEEP_INTERVAL = 1.0
#: Approvals per step: small, so each Lua script is short and Redis keeps answering clicks.
BATCH = 100
#: One round's work at most, in seconds; what is left is due in the next round. A quarter of
#: one worker's time: nothing waits on retention, while clicks and resumes share the machine
#: with it, so a backlog is worked off over minutes rather than competing with them.
ROUND_SECONDS = 0.25
#: What happens just after a finish (the card's redraw and its retries, ``on_finish``) reads
#: the record: nothing is removed sooner than this, whatever the settings say.
SETTLE_SECONDS = 600.0
#: How long a sweeping worker holds the lock; one that dies frees it after this.
LOCK_SECONDS = 60
#: Seconds between attempts to open an archive that could not be used: nothing is lost
#: meanwhile (what it would receive stays in Redis), and each attempt is a connection.
ARCHIVE_RETRY_SECONDS = 60


@dataclass
class Swept:
    """What one round removed from Redis (and, with an archive, copied there)."""

    histories: int = 0
    approvals: int = 0
    runs: int = 0

    def add(self, other: Swept) -> None:
        self.histories += other.histories
        self.approvals += other.approvals
        self.runs += other.runs

    @property
    def nothing(self) -> bool:
        return not (self.histories or self.approvals or self.runs)


def sweep(conn: redis.Redis, settings: Settings, now: float | None = None) -> Swept:
    """One round: remove what is due, batch after batch, for at most ``ROUND_SECONDS``.

    Does nothing while another worker holds the retention lock. Raises what Redis, or an
    archive failing in the middle of a write, raise (the background loop tries again next
    round); what a failed step had not written to the archive is still in Redis.
    """
    token = secrets.token_hex(8)
    if not store.retention.take_retention_lock(conn, token, LOCK_SECONDS):
        return Swept()
    try:
        return _round(conn, settings, time.time() if now is None else now)
    finally:
        store.retention.release_retention_lock(conn, token)


def _round(conn: redis.Redis, settings: Settings, now: float) -> Swept:
    target = usable_archive(settings)
    # An archive that cannot be used keeps records and outcomes in Redis: nothing is lost.
    waiting = settings.archive_url is not None and target is None
    stop = time.monotonic() + ROUND_SECONDS
    total = Swept()
    while True:
        step = Swept(histories=forget_histories(conn, settings, now))
        if not waiting:
            step.approvals = forget_approvals(conn, settings, now, target)
            step.runs = archive_runs(conn, target)
        total.add(step)
        if step.nothing or time.monotonic() > stop:
            return total


def history_cutoff(settings: Settings, now: float) -> float:
    """Approvals that finished before this have kept their history long enough."""
    return now - max(settings.history_retention, SETTLE_SECONDS)


def approval_cutoff(settings: Settings, now: float) -> float:
    """Approvals that finished before this have kept their record long enough."""
    return now - max(settings.retention, SETTLE_SECONDS)


def forget_histories(conn: redis.Redis, settings: Settings, now: float) -> int:
    """Delete one batch of histories that are due; returns how many."""
    due = store.retention.finished_until(
        conn, store.keys.FINISHED_HISTORY_KEY, history_cutoff(settings, now), BATCH
    )
    return store.retention.forget_histories(conn, [approval_id for approval_id, _ in due])


def forget_approvals(
    conn: redis.Redis, settings: Settings, now: float, target: archive.Archive | None
) -> int:
    """Archive (when there is an archive) and then delete one batch of approvals that are
    due; returns how many were deleted."""
    due = dict(
        store.retention.finished_until(
            conn, store.keys.FINISHED_KEY, approval_cutoff(settings, now), BATCH
        )
    )
    if not due:
        return 0
    counts: dict[str, int | None] = dict.fromkeys(due)
    if target is not None:
        finished = store.retention.load_finished(conn, list(due))
        target.save_approvals(finished, due)
        counts.update({f.approval.id: len(f.audit) for f in finished})
    return len(store.retention.forget_approvals(conn, counts))


def archive_runs(conn: redis.Redis, target: archive.Archive | None) -> int:
    """Copy one batch of ended runs' outcomes to the archive; returns how many."""
    ended = store.retention.ended_runs(conn, BATCH)
    if target is not None:
        kept = [(r, o, at) for r, o, at in ended if isinstance(o, dict)]
        target.save_runs(kept)
    store.retention.forget_ended(conn, [run_id for run_id, _, _ in ended])
    return len(ended) if target is not None else 0


def backfill(conn: redis.Redis) -> int:
    """Note the finished approvals that a version without retention left in Redis, so the
    sweep removes them when due (by when they finished, as their records tell); returns how
    many. Safe to run again, and beside running workers."""
    noted = 0
    batch: list[str] = []
    for approval_id in store.retention.approval_ids(conn):
        batch.append(approval_id)
        if len(batch) == BATCH:
            noted += store.retention.note_finished(conn, batch)
            batch = []
    return noted + store.retention.note_finished(conn, batch)


@dataclass
class _ArchiveWatch:
    """Why this process last found an archive unusable, and when to try it again."""

    problem: str | None = None
    retry_at: float = 0.0


#: By archive URL.
_watches: dict[str, _ArchiveWatch] = {}


def usable_archive(settings: Settings) -> archive.Archive | None:
    """The archive, when it is set and usable; None otherwise.

    An archive that cannot be used (down, or never migrated) is said once, loudly, with
    what to run, and tried again only every ``ARCHIVE_RETRY_SECONDS``, quietly; that it is
    usable again is said once too.
    """
    if not settings.archive_url:
        return None
    watch = _watches.setdefault(settings.archive_url, _ArchiveWatch())
    if watch.problem is not None and time.monotonic() < watch.retry_at:
        return None
    try:
        found = lookup.archive_of(settings)
    except ArchiveError as exc:
        _unusable(watch, str(exc))
        return None
    if watch.problem is not None:
        log.warning("the archive can be used again: finished approvals move there again")
        watch.problem = None
    return found


def check_archive(settings: Settings) -> None:
    """At a worker's start: say now, once and loudly, that the archive cannot be used, so
    that the sweeps do not (with a connection of its own: a pool's workers fork after this,
    and must not share one)."""
    if settings.archive_url:
        from approvals.ops import archive

        problem = archive.schema_problem(settings.archive_url)
        if problem is not None:
            _unusable(_watches.setdefault(settings.archive_url, _ArchiveWatch()), problem)


def _unusable(watch: _ArchiveWatch, problem: str) -> None:
    if watch.problem is None:
        log.error(
            "the archive cannot be used, so finished approvals stay in Redis, which keeps "
            "growing: %s (retention tries it again every %d s)",
            problem,
            ARCHIVE_RETRY_SECONDS,
        )
    watch.problem = problem
    watch.retry_at = time.monotonic() + ARCHIVE_RETRY_SECONDS
