"""Running a decided approval to its end: claim it, run the tool and the model, record how
the run ended, and show it on the card.

``resume`` is the whole of it; the worker's ``resume_approval`` job hands it its connections,
and RQ's retries are its only caller. RQ runs a job at least once, so each step is safe to run
again: only the attempt that moves the approval to ``running`` (with a lease, which recovery
reads to tell a live run from a dead one) runs anything; the end is recorded with the right to
publish it in one step; a result recorded but never shown is shown by the next attempt. The
chain itself is rebuilt and driven by ``agent.resume``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from slack_sdk import WebClient

from approvals import store
from approvals.calls import agent, fingerprints
from approvals.config import Settings
from approvals.decisions import deadlines
from approvals.errors import (
    GateError,
    InvalidReceipt,
    ResumeError,
    ToolAlreadyStarted,
    UnknownApproval,
)
from approvals.models import DECIDED, Approval, RunResult, Status, result_to_dict
from approvals.proof import receipts
from approvals.slack import web as slack
from approvals.store import queue

log = logging.getLogger(__name__)

#: A run shorter than this goes straight to its result, without a "running" redraw between.
RUNNING_AFTER = 1.0

#: How long the end of a run waits for a "running" redraw already under way (a Slack call
#: sleeping out a rate limit), so that the result is what the card shows last.
NOTICE_WAIT = 15.0

#: How long a run's result waits for the reply recording its decision, posted by the decider
#: (a slow Slack call); past it, the result is shown anyway, rather than never.
DECISION_REPLY_WAIT = 10.0

#: The flag (``store.records.claim``) that lets one attempt publish a run's result.
PUBLISHED = "result_published"
#: The flag set once the result is on the card and in its thread.
SHOWN = "result_shown"


def resume(conn: redis.Redis, settings: Settings, client: WebClient, approval_id: str) -> str:
    """Resume a decided approval, at most once, and record how the run ended.

    Each approval has a job of its own. RQ may run that job twice; only the attempt that
    moves the approval to ``running`` runs it, and the lease that comes with the move lets
    recovery (``approvals.decisions.recovery``) tell a live run from one whose worker died.
    """
    turn = store.turns.turn_of(conn, approval_id)
    if turn and turn[0] != approval_id:
        log.warning("approval %s resumes with its turn's lead %s", approval_id, turn[0])
        return "skipped"
    if turn and store.turns.turn_pending(conn, turn):
        log.warning("approval %s: its turn still waits for decisions", approval_id)
        return "skipped"
    # The lease comes with the move: a running approval without one is taken for dead.
    taken = store.transitions.transition(
        conn,
        approval_id,
        Status.RUNNING,
        sources=DECIDED,
        event=store.audit.audit_entry("resume_started", "worker"),
        lease=settings.lease,
    ).ok
    if not taken:
        unshown = _left_unshown(conn, approval_id)
        if unshown is not None:
            log.warning("approval %s: its run ended unshown; showing the result", approval_id)
            _publish_now(conn, settings, client, unshown, claimed=True)
            return "shown"
        log.warning("approval %s is not waiting to resume; not running it again", approval_id)
        return "skipped"
    with _lease_kept(conn, approval_id, settings.lease):
        return _resume(conn, settings, client, approval_id)


def _resume(conn: redis.Redis, settings: Settings, client: WebClient, approval_id: str) -> str:
    approval, history = store.records.load_with_history(conn, approval_id)
    changed = _changed(settings, approval)
    if changed and not approval.in_turn and approval.stale < settings.stale_retries:
        return _ask_again(conn, settings, client, approval, changed[0])
    for call, found, why in changed:  # asked often enough: the model is told, and re-plans
        store.audit.append(conn, call.id, "stale_cancelled", "worker",
                           approved=call.fingerprint or "", found=found or "",
                           reason=why)  # fmt: skip
    # The card says "running" when the run takes a while; the update must not delay the
    # tool, so its clock starts once the tool has (or now, when the tool is not to run).
    shown: list[threading.Timer] = []

    def show_soon() -> None:
        # Run in a copy of this context, so its log lines name the approval as this job's do.
        show = functools.partial(contextvars.copy_context().run, _show_running, client, approval)
        notice = threading.Timer(RUNNING_AFTER, show)
        notice.daemon = True
        notice.start()
        shown.append(notice)

    decision = approval.decision
    if decision is None or not decision.kind.runs_tool:
        show_soon()
    _note_expired_receipt(conn, approval)
    stale = {call.id for call, _, _ in changed}
    result, calls = _run(conn, settings, approval, show_soon, history, stale)
    if result.status is Status.INTERRUPTED:
        _record_end(conn, approval_id, Status.INTERRUPTED, "interrupted", reason=result.error or "")
        _call_off(shown)
        queue.enqueue_interrupted(conn, settings, approval_id)
        return result.status.value
    finished = _record_end(
        conn,
        approval_id,
        result.status,
        "resume_finished",
        # The result and the right to publish it, in one step: nothing else publishes it.
        {"result": json.dumps(result_to_dict(result)), PUBLISHED: repr(time.time())},
        status=result.status.value,
        error=result.error or "",
        next_approval_id=result.next_approval_id or "",
        executed_arguments=result.executed_arguments,
        tool_output=result.tool_output or "",
    )
    if approval.in_turn:
        _record_turn_end(conn, settings, approval, result, calls)
    _call_off(shown)
    if finished and result.status in (Status.COMPLETED, Status.FAILED):
        _finish_run(conn, settings, approval_id)
    elif finished and result.status is Status.PAUSED and approval.run_id is not None:
        _wake(conn, approval.run_id, settings.result_ttl)
    if finished and not approval.in_turn:  # what was just stored, without reading it back
        approval.status, approval.result = result.status, result
    else:  # moved on meanwhile (recovery took it for dead): show what the record says
        approval = store.records.load(conn, approval_id)
    _publish_now(conn, settings, client, approval, finished)
    return result.status.value


#: (the call, the fingerprint found: None when it could not be computed, why it differs).
_Change = tuple[Approval, str | None, str]


def _changed(settings: Settings, approval: Approval) -> list[_Change]:
    """The calls of this resume whose state changed since they were decided: their gate has a
    ``fingerprint`` that now names another state than at the pause (or cannot be computed:
    fail closed). Computed from the arguments the model proposed, which named the state the
    people deciding looked at. Calls that do not run their tool need no check."""
    changed: list[_Change] = []
    others = [call for call in approval.turn_calls if call.id != approval.id]
    for call in [approval, *others]:
        path = call.policy.fingerprint
        if path is None or call.decision is None or not call.decision.kind.runs_tool:
            continue
        try:
            found = fingerprints.compute(path, call.arguments, settings.tool_modules)
        except GateError as exc:
            changed.append((call, None, str(exc)))
            continue
        if found != call.fingerprint:
            changed.append((call, found, "the state changed since the approval"))
    return changed


def _ask_again(
    conn: redis.Redis, settings: Settings, client: WebClient, approval: Approval, change: _Change
) -> str:
    """The state changed before the tool ran: the approval waits again, its decision undone
    in the same step (so the next click is a new decision, with a new receipt), the new state
    its fingerprint; the card asks again, saying why, with the gate's preview computed again
    on the new state (the thread shows it too). It keeps its expiry."""
    _, found, why = change
    preview = agent.preview_now(settings, approval)
    undone = ("decision", "decided_by", "decided_status", "votes", "receipt", "receipt_error")
    fields = {name: "" for name in undone}
    fields |= {"stale": str(approval.stale + 1), "fingerprint": found or ""}
    fields |= store.records.preview_fields(preview)
    event = store.audit.audit_entry("stale", "worker", approved=approval.fingerprint or "",
                                    found=found or "", reason=why)  # fmt: skip
    moved = store.transitions.transition(
        conn, approval.id, Status.PENDING, fields, sources=[Status.RUNNING], event=event
    ).ok
    if not moved:
        return "skipped"
    if approval.expires_at > 0:
        deadlines.add(conn, deadlines.Kind.EXPIRE, approval.id, approval.expires_at)
    try:
        store.records.keep_whole_preview(conn, approval.id, preview)
        again = store.records.load(conn, approval.id)
        slack.announce_stale(client, again, approval.fingerprint, found, preview)
    except Exception:  # the record waits again; the card catches up on the next redraw
        log.warning("could not redraw the card of stale approval %s", approval.id, exc_info=True)
    return "stale"


def _note_expired_receipt(conn: redis.Redis, approval: Approval) -> None:
    """Say in the audit trail when the run starts after its receipt expired (the workers were
    busy or down longer than ``APPROVALS_RECEIPT_TTL``): the service will refuse the call,
    and a Retry signs a fresh receipt. The worker cannot sign one itself, and runs the call
    all the same: whether to accept it is the service's to decide."""
    if approval.receipt is None:
        return
    try:
        expires = float(receipts.unverified_claims(approval.receipt)["exp"])
    except (InvalidReceipt, KeyError, TypeError, ValueError):
        return  # not for the worker to judge: the service verifies it
    late = time.time() - expires
    if late > 0:
        log.warning("approval %s: its receipt expired %.0f s before the run", approval.id, late)
        store.audit.append(
            conn, approval.id, "receipt_expired", "worker", seconds_late=f"{late:.0f}"
        )


def _left_unshown(conn: redis.Redis, approval_id: str) -> Approval | None:
    """The approval, if an earlier attempt of this job recorded how the run ended, which gave
    it the right to publish the result, then died or raised before the result was shown.

    RQ runs a job again only once the attempt before it is over (it raised, or its worker or
    work-horse died), so nothing else is showing this result now.
    """
    published, shown = store.records.flags(conn, approval_id, PUBLISHED, SHOWN)
    if not published or shown:
        return None
    approval = store.records.load(conn, approval_id)
    ended = approval.status in (Status.COMPLETED, Status.FAILED, Status.PAUSED)
    return approval if ended else None


def _record_turn_end(
    conn: redis.Redis,
    settings: Settings,
    lead: Approval,
    result: RunResult,
    calls: dict[str, tuple[dict[str, Any] | None, str | None]],
) -> None:
    """The other calls of the lead's turn ran (or were refused) in the lead's resume: each
    ends as the run did, with what its own tool ran with and returned. Their results are
    shown on the turn's one card, with the lead's, so none is published on its own."""
    for call_id in lead.turn[1:]:
        ran_with, output = calls.get(call_id, (None, None))
        own = dataclasses.replace(result, executed_arguments=ran_with, tool_output=output)
        moved = store.transitions.transition(
            conn, call_id, Status.RUNNING, sources=DECIDED, lease=settings.lease,
            event=store.audit.audit_entry("resume_started", "worker", turn=lead.id),
        ).ok  # fmt: skip
        if moved:
            _record_end(
                conn, call_id, result.status, "resume_finished",
                {"result": json.dumps(result_to_dict(own)), PUBLISHED: repr(time.time())},
                status=result.status.value, turn=lead.id, tool_output=output or "",
            )  # fmt: skip


def _finish_run(conn: redis.Redis, settings: Settings, approval_id: str) -> None:
    """Store the run's outcome and queue its ``on_finish``; a failure here is logged, never
    keeps the card from showing the result (``wait`` still reads the end from the records)."""
    try:
        store.runs.finish_run(conn, settings, store.records.load(conn, approval_id))
    except Exception:
        log.exception("could not record the outcome of the run of approval %s", approval_id)


def _wake(conn: redis.Redis, run_id: str, ttl: int) -> None:
    """Tell the run's waiters it paused again (``wait(follow=False)`` returns at that)."""
    try:
        store.runs.wake_run(conn, run_id, "paused", ttl)
    except redis.RedisError:  # waiters look again on their own within seconds
        log.warning("could not wake the waiters of run %s", run_id, exc_info=True)


def _record_end(
    conn: redis.Redis,
    approval_id: str,
    end: Status,
    event: str,
    fields: dict[str, str] | None = None,
    **details: Any,
) -> bool:
    """Move a run to how it ended, with its audit event, in one step; False if it had been
    moved on meanwhile (the event is recorded all the same: the run did happen)."""
    entry = store.audit.audit_entry(event, "worker", **details)
    moved = store.transitions.transition(
        conn, approval_id, end, fields, sources=[Status.RUNNING], event=entry
    ).ok
    if not moved:
        store.audit.append(conn, approval_id, event, "worker", **details)
    return moved


def _run(
    conn: redis.Redis,
    settings: Settings,
    approval: Approval,
    on_tool_start: Callable[[], None],
    history: bytes | None,
    stale: Collection[str] = (),
) -> tuple[RunResult, dict[str, tuple[dict[str, Any] | None, str | None]]]:
    try:
        saved = store.records.parse_history(approval.id, history)  # a broken one fails the run
        # Each released call is handed its own receipt as it starts (agent's before_call);
        # whatever else the resume runs, before or after, gets none.
        with receipts.holding(None):
            resumed = agent.resume(conn, settings, approval, on_tool_start, saved, stale)
    except ToolAlreadyStarted as exc:  # another attempt started the tool: never twice
        return RunResult(Status.INTERRUPTED, error=str(exc)), {}
    except ResumeError as exc:
        return RunResult(Status.FAILED, error=str(exc)), {}
    except Exception as exc:  # the agent's own failure is reported, not retried blindly
        log.exception("resume of approval %s failed", approval.id)
        return RunResult(Status.FAILED, error=f"{type(exc).__name__}: {exc}"), {}
    outcome = resumed.outcome
    paused = outcome.status == "paused"
    return RunResult(
        Status.PAUSED if paused else Status.COMPLETED,
        text=None if paused else outcome.text,
        next_approval_id=outcome.pause_id if paused else None,
        executed_arguments=resumed.executed_arguments,
        tool_output=resumed.tool_output,
        preview=None if resumed.preview is None else resumed.preview.shortened,
    ), resumed.calls


def _call_off(notices: list[threading.Timer]) -> None:
    """Call off the "running" update, or wait for it if it began: the result comes last."""
    for notice in notices:
        notice.cancel()
        notice.join(NOTICE_WAIT)


def _publish_now(
    conn: redis.Redis, settings: Settings, client: WebClient, approval: Approval, claimed: bool
) -> None:
    """Publish the result from this job; on failure, as its own job that RQ retries.

    The result is stored before this runs, so a Slack outage never loses it: the publish job
    (the outbox) shows it once Slack answers, and the "result_published" flag makes sure it is
    shown once. Publishing here first spares every run that second job.
    """
    try:
        publish(conn, client, approval, claimed)
    except Exception:
        log.warning("publishing approval %s failed; retrying as a job", approval.id, exc_info=True)
        queue.enqueue_publish(conn, settings, approval.id)


def _turn_calls(conn: redis.Redis, approval: Approval) -> list[Approval]:
    """The approval, and the other calls of its turn (they share its card and thread)."""
    others = [store.records.load(conn, call_id) for call_id in approval.turn[1:]]
    return [approval, *others]


def parent_replied_first(conn: redis.Redis, client: WebClient, approval_id: str) -> None:
    """The card of a run that paused again goes into its parent's thread: after the reply
    that says who decided the parent (``decision_replied_first``). A parent no longer kept
    holds nothing back."""
    parent_id = store.records.load(conn, approval_id).parent_id
    try:
        parent = None if parent_id is None else store.records.load(conn, parent_id)
    except UnknownApproval:
        return
    if parent is not None:
        decision_replied_first(conn, client, parent)


def decision_replied_first(conn: redis.Redis, client: WebClient, approval: Approval) -> None:
    """Make the thread say who decided before it says what the run did.

    The decider posts that reply (``slack.announce_decision``) while a worker may already be
    running the tool, and nothing orders two posts at Slack but their arrival. So the result
    waits until the reply is posted; if nobody has begun to post it yet, this posts it (the
    decider then finds it claimed, and only redraws the card). A claim whose reply does not
    come within ``DECISION_REPLY_WAIT`` (its decider died) no longer holds the result back.
    """
    if approval.decision is None or approval.card_ts is None:
        return
    deadline = time.monotonic() + DECISION_REPLY_WAIT
    while True:
        owed, claimed, replied = store.owed.reply_state(conn, approval)
        if replied or not (owed or claimed):
            return  # posted, or no reply to wait for (nobody shows this decision)
        if not claimed:
            slack.announce_decision(client, conn, approval)
            continue
        if time.monotonic() >= deadline:
            log.warning(
                "approval %s: its decision's reply did not come; showing the result", approval.id
            )
            return
        time.sleep(0.05)


def _show_running(client: WebClient, approval: Approval) -> None:
    approval.status = Status.RUNNING
    try:
        slack.update_card(client, approval)
    except Exception:  # cosmetic: the final state is published by its own retried job
        log.warning("could not show approval %s as running", approval.id, exc_info=True)


@contextmanager
def _lease_kept(conn: redis.Redis, approval_id: str, lease: int) -> Iterator[None]:
    """Renew the lease while the resume runs; it lapses on its own if this process dies.

    The lease is ours rather than RQ's job heartbeat: ``SimpleWorker`` sends no heartbeat while
    a job runs, and recovery reads the lease and the approval's state in one atomic step.
    A run that ends normally has moved out of ``running``, which ended the lease; one that
    raised drops it here.
    """
    renewal = _Renewal(lease / 3, store.leases.hold_lease, args=(conn, approval_id, lease))
    renewal.daemon = True
    renewal.start()
    ended = False
    try:
        yield
        ended = True
    finally:
        renewal.cancel()
        renewal.join()  # a renewal under way lands before the lease is dropped
        if not ended:
            store.leases.drop_lease(conn, approval_id)


class _Renewal(threading.Timer):
    """A ``threading.Timer`` that calls again every ``interval`` until cancelled.

    A failed call (Redis restarting, say) is logged and tried again next time: the lease
    holds for three intervals, so one missed renewal does not let it lapse.
    """

    def run(self) -> None:
        while not self.finished.wait(self.interval):
            try:
                self.function(*self.args, **self.kwargs)
            except Exception:
                log.warning("could not renew a lease; trying again", exc_info=True)


def publish(
    conn: redis.Redis, client: WebClient, approval: Approval, claimed: bool = False
) -> None:
    """Show the run's end on the card and in its thread, once: the attempt that claims
    ``PUBLISHED`` shows it (``claimed``: the caller holds that claim already)."""
    if not claimed and not store.records.claim(conn, approval.id, PUBLISHED):
        return
    try:
        for call in _turn_calls(conn, approval):
            decision_replied_first(conn, client, call)
        slack.announce_result(client, approval)
    except Exception:
        store.records.release(conn, approval.id, PUBLISHED)  # let RQ's retry try again
        raise
    store.records.claim(conn, approval.id, SHOWN)
