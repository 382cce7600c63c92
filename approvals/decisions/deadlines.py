"""Deadlines: what is due when for a waiting approval, and the sweep that acts on it.

Four kinds (``Kind``): the expiry, the warning before it, a reminder to the approvers, and the
escalation to more people. Their times are planned when the call is asked for (``plan``: what
the gate or the API request says, else the settings), written with the pause in its own
transaction (``schedule``), and kept in one Redis sorted set (``store.deadlines``), not in a
process, so they fire on time across restarts of every bot and worker. A decision removes
them in the same atomic step as the decision.

Every worker sweeps the set a few times a second (``sweep``): a due entry is taken atomically
(one worker gets it), becomes its kind's job, and is dropped. A worker that dies between taking
and dropping leaves the entry held for ``HOLD_SECONDS``, after which it is due again: a deadline
may become two jobs, never none, and every job is idempotent (a decided approval does not
expire, a warning and each reminder round are posted once). The expiry and the warning are
carried out here (``expire``, ``warn``); reminders and escalation in ``reminders``.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

import redis
from slack_sdk import WebClient

from approvals import store
from approvals.config import Settings
from approvals.decisions import review
from approvals.models import UNSET, Approval, GateOptions, Status
from approvals.slack import web as slack
from approvals.store import queue

#: How often each worker looks for due deadlines: an expiry fires at most this late.
SWEEP_INTERVAL = 0.5
#: How long a taken deadline is held back from other workers before it counts as lost.
HOLD_SECONDS = 30.0
#: A deadline this far overdue means no worker is sweeping (``approvals doctor`` says so).
OVERDUE_SECONDS = 60.0


class Kind(StrEnum):
    """What comes due, as the set names it (``<kind>:<approval id>``)."""

    EXPIRE = "expire"
    WARN = "warn"
    REMIND = "remind"
    ESCALATE = "escalate"

    @property
    def job(self) -> str:
        """The worker's job that carries it out."""
        return {
            Kind.EXPIRE: queue.EXPIRE,
            Kind.WARN: queue.WARN,
            Kind.REMIND: queue.REMIND,
            Kind.ESCALATE: queue.ESCALATE,
        }[self]

    def job_id(self, approval_id: str) -> str:
        # Reminders repeat: each round is a job of its own.
        suffix = f"-{time.time_ns()}" if self is Kind.REMIND else ""
        return f"{self.value}-{approval_id}{suffix}"


def plan(
    approval: Approval,
    settings: Settings,
    options: GateOptions,
    card: GateOptions | None = None,
) -> float | None:
    """Set the approval's deadlines from the options it was asked with, else the settings':
    when it expires (``expires_at`` 0: it waits for people however long), when its approvers
    are reminded, and when it is escalated (never without somewhere to escalate to).
    ``card``: the options of the call whose card it shares (a turn's lead), whose reminders
    and escalation it keeps. Returns how long it waits (None: however long)."""
    waits = settings.expires_in if options.expires_in is UNSET else options.expires_in
    approval.expires_at = 0.0 if waits is None else approval.created_at + waits
    card = options if card is None else card
    remind, escalate, targets = card.remind_after, card.escalate_after, card.escalate_to
    approval.remind_after = settings.remind_after if remind is None else remind
    approval.escalate_to = settings.escalate_to if targets is None else targets
    escalate = settings.escalate_after if escalate is None else escalate
    approval.escalate_after = escalate if approval.escalate_to else 0.0
    return waits


def schedule(target: Any, settings: Settings, approval: Approval) -> None:
    """Write every deadline of a new pending approval (``target``: a client, or the pause's
    pipeline): its expiry (none when it waits for people however long: ``expires_at`` 0) and
    the warning before it, its first reminder and its escalation (each none at 0)."""
    created, expires = approval.created_at, approval.expires_at
    if expires > 0:
        add(target, Kind.EXPIRE, approval.id, expires)
        warn_at = expires - settings.warn_before * (expires - created)
        if settings.warn_before > 0 and warn_at > created:
            add(target, Kind.WARN, approval.id, warn_at)
    if approval.remind_after > 0:
        add(target, Kind.REMIND, approval.id, created + approval.remind_after)
    if approval.escalate_after > 0:
        add(target, Kind.ESCALATE, approval.id, created + approval.escalate_after)


def add(target: Any, kind: Kind, approval_id: str, due: float) -> None:
    """Make ``kind`` due for the approval at ``due`` (a later round, a retry)."""
    store.deadlines.add_deadline(target, kind.value, approval_id, due)


def sweep(conn: redis.Redis, settings: Settings, now: float | None = None) -> int:
    """Queue the job of every deadline due by ``now``; returns how many."""
    taken = store.deadlines.take_due_deadlines(
        conn, time.time() if now is None else now, HOLD_SECONDS
    )
    for name, approval_id in taken:
        if name in Kind.__members__.values():  # Redis is a trust boundary: others are dropped
            kind = Kind(name)
            queue.enqueue_deadline(conn, settings, kind.job, kind.job_id(approval_id), approval_id)
        store.deadlines.drop_deadline(conn, name, approval_id)
    return len(taken)


def expire(conn: redis.Redis, settings: Settings, client: WebClient, approval_id: str) -> str:
    """The expiry came due: expire the approval unless someone decided first, and show it."""
    expired = review.expire(conn, settings, approval_id)
    if expired is None:
        return "decided in time"
    slack.announce_decision(client, conn, expired)
    return "expired"


def warn(conn: redis.Redis, client: WebClient, approval_id: str) -> None:
    """The warning came due: tell the thread the approval expires soon, if it still waits."""
    approval = store.records.load(conn, approval_id)
    if approval.status is Status.PENDING and store.records.claim(conn, approval_id, "warned"):
        slack.warn_expiry(client, approval)
        store.audit.append(conn, approval_id, "expiry_warned", "system")
