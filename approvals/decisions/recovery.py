"""Finding resumes whose worker died, and decisions whose resume was never queued, and
settling them without running anything twice.

RQ runs jobs at least once, and notices a dead worker only after minutes. A resume holds a
short lease in Redis while it runs; when the lease lapses, ``recover_dead_runs`` settles the
approval atomically: if the gated tool had not started, the approval simply goes back to its
decision and is resumed again; if it had, the approval becomes ``interrupted`` and a person
decides whether running it again is safe (``retry``).

A decision is recorded in one atomic step, which also records that what follows it is owed
(``store.transitions.OWED``); its decider then signs the receipt and carries the rest out in a
second step: the audit entry and its webhook, the metrics, the external caller woken or the resume
queued. A decider that dies, loses Redis or fails in between leaves the debt: after
``STRANDED_AFTER`` seconds, ``complete_decisions`` carries it out (``review.complete``),
exactly once, however many workers look. The card is redrawn the same way:
``show_decisions`` queues ``announce_decision`` for a decision its card does not show.
``requeue_stranded`` queues a resume still missing after that (a turn's, whose last decider
died before settling it); the resume's own move to ``running`` keeps a second job from
running anything twice.
"""

from __future__ import annotations

import logging
import time

import redis

from approvals import store
from approvals.config import Settings
from approvals.decisions import review
from approvals.errors import CorruptRecord, UnknownApproval
from approvals.models import DECIDED, OnReject, Status
from approvals.store import queue

log = logging.getLogger(__name__)

#: A live decider queues the resume right after the decision; one this late never will.
STRANDED_AFTER = 30
#: How far back decisions are looked at (a stranded one is found within a maintenance round).
STRANDED_WINDOW = 3600
#: The flag that lets one worker queue a stranded decision's resume, once.
REQUEUED = "stranded_requeued"
#: After queuing a decision's redraw, how long before looking at its card again: longer than
#: the job's own retries take.
SHOW_AGAIN_AFTER = 300
#: How long after a decision its card is still redrawn: past this, the card is gone (deleted,
#: or never posted) or Slack refuses it for good, and the thread has said what happened since.
SHOW_FOR = 24 * 3600


def recover_dead_runs(conn: redis.Redis, settings: Settings) -> dict[str, str]:
    """Settle every running approval whose worker is gone; returns what happened to each."""
    outcomes: dict[str, str] = {}
    for approval_id in store.leases.running_ids(conn):
        outcome = store.leases.recover(conn, approval_id)
        outcomes[approval_id] = outcome
        if outcome == "interrupted":
            log.warning("approval %s: worker died after the tool started", approval_id)
            store.audit.append(conn, approval_id, "interrupted", "system", reason="worker died")
            queue.enqueue_interrupted(conn, settings, approval_id)
        elif outcome == "requeue":
            log.warning(
                "approval %s: worker died before the tool started; resuming again", approval_id
            )
            store.audit.append(conn, approval_id, "requeued", "system", reason="worker died")
            queue.enqueue_resume(conn, settings, approval_id, again=True)
    return outcomes


def finish_decisions(conn: redis.Redis, settings: Settings) -> None:
    """One maintenance round for decisions: what follows them, left undone by their decider,
    then the cards that do not show them (a decision carried out here is noted unshown in
    the same step, and shown ``review.SHOW_AFTER`` seconds after it was made)."""
    complete_decisions(conn, settings)
    show_decisions(conn, settings)


def complete_decisions(conn: redis.Redis, settings: Settings) -> list[str]:
    """Carry out what follows every decision (or Retry) that still owes it ``STRANDED_AFTER``
    seconds on: its decider died, lost Redis or failed. Returns the ids this worker did."""
    done = []
    for approval_id in store.owed.owed_until(conn, time.time() - STRANDED_AFTER):
        try:
            if not review.complete(conn, settings, approval_id):
                continue
        except UnknownApproval:  # removed meanwhile: nothing is left to carry out
            store.owed.forget_owed(conn, approval_id)
            continue
        except CorruptRecord:
            log.exception("approval %s: its record cannot be read; left as it is", approval_id)
            store.owed.forget_owed(conn, approval_id)
            continue
        log.warning(
            "approval %s: decided, but its decider did not finish what follows; done now",
            approval_id,
        )
        done.append(approval_id)
    return done


def show_decisions(conn: redis.Redis, settings: Settings) -> list[str]:
    """Queue ``announce_decision`` for every decision its card does not show yet (the decider
    could not redraw it: Slack was down, or the decider stopped). Returns the ids queued."""
    now = time.time()
    queued = []
    for approval_id, due in store.owed.unshown_until(conn, now):
        try:
            approval = store.records.load(conn, approval_id)
        except (UnknownApproval, CorruptRecord):
            store.owed.forget_unshown(conn, approval_id)
            continue
        decision = approval.decision
        if decision is None or store.owed.decision_shown(conn, approval):
            store.owed.forget_unshown(conn, approval_id)
            continue
        if decision.at < now - SHOW_FOR:
            log.warning("approval %s: its card never showed the decision; giving up", approval_id)
            store.owed.forget_unshown(conn, approval_id)
            continue
        if approval.card_ts is None:  # the card job shows the decision when it posts
            continue
        if not store.owed.postpone_unshown(conn, approval_id, due, now + SHOW_AGAIN_AFTER):
            continue  # another worker took this look
        log.warning("approval %s: its card does not show the decision; redrawing it", approval_id)
        queue.enqueue_announce(conn, settings, approval_id)
        queued.append(approval_id)
    return queued


def store_missing_outcomes(conn: redis.Redis, settings: Settings) -> list[str]:
    """Store the outcome of every run whose end was recorded but whose outcome never was:
    the process that recorded the end (a worker after the run's last turn, a decider after
    an ``on_reject="stop"`` rejection) died before the next step. Storing it queues the
    run's ``on_finish`` as usual. Each finished approval is looked at once, ``STRANDED_AFTER``
    seconds after it finished. Returns the run ids."""
    now = time.time()
    # Not past the outcome's TTL: an outcome that expired is not one never stored.
    oldest = now - min(STRANDED_WINDOW, settings.result_ttl)
    since = max(store.runs.ends_checked(conn) or 0.0, oldest)
    until = now - STRANDED_AFTER
    if until <= since:
        return []
    finished = store.runs.finished_between(conn, since, until)
    # One round trip for every run of the window, however many approvals finished in it.
    missing = store.runs.runs_without_outcome(
        conn, {a.run_id for a in finished if a.run_id is not None}
    )
    stored = []
    for approval in finished:
        if approval.run_id not in missing or approval.run_id in stored:
            continue
        # Not every finished approval ends its run (a resume that paused again, a decision
        # of a rule): finish_run stores nothing for a run its records do not show ended.
        if store.runs.finish_run(conn, settings, approval) is not None:
            log.warning("run %s: ended, but its outcome was never stored", approval.run_id)
            stored.append(approval.run_id)
    store.runs.note_ends_checked(conn, until)
    return stored


def requeue_unfinished(conn: redis.Redis, settings: Settings) -> list[str]:
    """Queue the ``on_finish`` of every run that ended with no job for it: the worker that
    stored the outcome died before queuing it, or before storing it (``store_missing_outcomes``
    runs first). Returns the run ids."""
    store_missing_outcomes(conn, settings)
    now = time.time()
    store.runs.forget_finishing(conn, now - settings.result_ttl)
    requeued = []
    for run_id in store.runs.finishing_between(
        conn, now - settings.result_ttl, now - STRANDED_AFTER
    ):
        if queue.finish_queued(conn, run_id):
            continue
        log.warning("run %s: ended, but its on_finish was never queued", run_id)
        # Two workers may both queue it: the second call finds the first noted, or at worst
        # passes the same idempotency key.
        queue.enqueue_finish(conn, settings, run_id)
        requeued.append(run_id)
    return requeued


def requeue_stranded(conn: redis.Redis, settings: Settings) -> list[str]:
    """Queue the resume of every recent decision that has none; returns their ids."""
    now = time.time()
    requeued = []
    for approval in store.pending.decided_between(
        conn, now - STRANDED_WINDOW, now - STRANDED_AFTER
    ):
        stopped = approval.status in (Status.REJECTED, Status.EXPIRED) and (
            approval.policy.on_reject is OnReject.STOP
        )
        if approval.external:  # its caller acts on the decision: nothing to resume
            continue
        # An automatic decision (rule, grant) was carried out in the agent's process.
        automatic = approval.decision is not None and approval.decision.automatic
        if approval.status not in DECIDED or stopped or automatic:
            continue
        # A turn resumes once, through its lead, when its last call is decided.
        if approval.in_turn and (
            approval.turn_lead != approval.id
            or store.turns.turn_pending(conn, approval.turn)
            or any(a.stops_run for a in approval.turn_calls)
        ):
            continue
        if queue.resume_queued(conn, approval.id):
            continue
        # What follows a decision still owed: complete_decisions queues its resume.
        if store.owed.owing(conn, approval.turn or [approval.id]):
            continue
        if not store.records.claim(conn, approval.id, REQUEUED):
            continue
        log.warning(
            "approval %s: decided, but its resume was never queued; queuing it", approval.id
        )
        try:
            queue.enqueue_resume(conn, settings, approval.id, again=True)
        except Exception:
            store.records.release(conn, approval.id, REQUEUED)  # the next round tries again
            raise
        store.audit.append(conn, approval.id, "requeued", "system", reason="resume never queued")
        requeued.append(approval.id)
    return requeued
