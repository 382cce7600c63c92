"""Deciding an approval: who may, what is valid, and the one atomic step that records it.

The bot's buttons and modals, the CLI's ``approve``/``reject`` and the expiry job all come
through here, so a decision has the same rules and the same effects wherever it comes from.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from approvals import store
from approvals.config import Settings
from approvals.decisions import ijson
from approvals.decisions.schemas import validate_arguments
from approvals.errors import (
    AlreadyDecided,
    AlreadyVoted,
    ApprovalsError,
    CorruptRecord,
    InvalidArguments,
    NotAllowed,
    NotReplicated,
    UnknownApproval,
)
from approvals.models import (
    DECIDED,
    Approval,
    Decision,
    DecisionKind,
    OnReject,
    Status,
    decision_to_dict,
)
from approvals.proof import receipts
from approvals.store import queue

log = logging.getLogger(__name__)

CLI_ACTOR_PREFIX = "cli:"
SYSTEM_ACTOR = "system"

#: Resolves a Slack user group id (``S...``) or channel id to its members (the bot passes a
#: cached Slack lookup; one that fails answers nobody, so the check fails closed).
GroupMembers = Callable[[str], Collection[str]]


def _no_groups(group_id: str) -> Collection[str]:
    return ()


def refusal(
    settings: Settings, approval: Approval, actor: str, members_of: GroupMembers = _no_groups
) -> str | None:
    """Why ``actor`` may not decide ``approval``, or None when they may.

    CLI users are operators (they hold Redis access) and may always decide.
    """
    if actor.startswith(CLI_ACTOR_PREFIX):
        return None
    policy = approval.policy
    if actor == approval.requested_by and not policy.allow_self_approval:
        return "the agent acts for you, so someone else has to decide"
    approvers = settings.approvers if policy.approvers is None else policy.approvers
    groups = settings.approver_groups if policy.approver_groups is None else policy.approver_groups
    if not approvers and not groups:
        return None
    # Once escalated, the members of the groups and channels it went to may decide too.
    groups = (*groups, *approval.escalated_groups, *approval.escalated_channels)
    if actor in approvers or any(actor in members_of(group) for group in groups):
        return None
    return "you are not one of the approvers for this request"


def check_may_decide(
    conn: redis.Redis,
    settings: Settings,
    approval: Approval,
    actor: str,
    members_of: GroupMembers = _no_groups,
) -> None:
    """Raise ``NotAllowed`` (and record the refusal) when ``actor`` may not decide."""
    reason = refusal(settings, approval, actor, members_of)
    if reason is not None:
        store.audit.append(conn, approval.id, "refused", actor, reason=reason)
        raise NotAllowed(reason)


def check_edit(approval: Approval, arguments: dict[str, Any]) -> None:
    """Only editable arguments may change, and the result must fit the tool's schema."""
    editable = set(approval.editable)
    locked = {
        name: "this argument cannot be edited"
        for name in set(arguments) | set(approval.arguments)
        if name not in editable and arguments.get(name) != approval.arguments.get(name)
    }
    if locked:
        raise InvalidArguments(locked)
    validate_arguments(approval.tool.schema, arguments)


def precheck(
    conn: redis.Redis,
    settings: Settings,
    approval_id: str,
    kind: DecisionKind,
    actor: str,
    members_of: GroupMembers = _no_groups,
) -> Approval:
    """Everything that can refuse ``kind`` before its details are known (e.g. before a modal).

    Raises:
        UnknownApproval, AlreadyDecided, NotAllowed: nothing was changed.
    """
    approval = store.records.load(conn, approval_id)
    if approval.status is not Status.PENDING:
        _refuse_decided(conn, approval, actor)
    check_may_decide(conn, settings, approval, actor, members_of)
    if approval.policy.approvals_required > 1 and kind in (DecisionKind.EDIT, DecisionKind.RESPOND):
        raise NotAllowed(
            f"this request needs {approval.policy.approvals_required} approvals: "
            "it can only be approved or rejected"
        )
    if kind is DecisionKind.EDIT and not approval.editable:
        raise NotAllowed("none of this tool's arguments may be edited")
    return approval


def decide(
    conn: redis.Redis,
    settings: Settings,
    approval_id: str,
    kind: DecisionKind,
    actor: str,
    *,
    actor_name: str | None = None,
    reason: str | None = None,
    arguments: dict[str, Any] | None = None,
    response: str | None = None,
    members_of: GroupMembers = _no_groups,
) -> Approval:
    """Record a person's decision and start what follows: exactly once, whoever races.

    An approval that needs a quorum stays ``pending`` until enough distinct people approved;
    the returned approval's ``votes`` tells how many did.

    Raises:
        UnknownApproval, AlreadyDecided, AlreadyVoted, NotAllowed, InvalidArguments:
        nothing was changed.
    """
    approval = precheck(conn, settings, approval_id, kind, actor, members_of)
    _check_details(approval, kind, reason, arguments, response)
    decision = Decision(
        kind=kind,
        actor=actor,
        actor_name=actor_name,
        at=time.time(),
        reason=reason or None,
        arguments=arguments if kind is DecisionKind.EDIT else approval.arguments,
        response=response if kind is DecisionKind.RESPOND else None,
    )
    encoded = json.dumps(decision_to_dict(decision))
    # What the decision leaves owed says whether this decider signs a receipt for it, so
    # that a worker finishing it instead says that none was signed.
    owed = (
        store.transitions.OWED_RECEIPT
        if _signs(settings, decision)
        else store.transitions.OWED_DECISION
    )
    # Read before the decision removes them: undoing it (replicas did not confirm) puts
    # them back.
    due = store.transitions.deadlines_of(conn, approval_id) if settings.min_replicas else []
    if kind is DecisionKind.REJECT:
        won = store.transitions.transition(
            conn,
            approval_id,
            Status.REJECTED,
            {"decision": encoded, "decided_by": actor},
            sources=[Status.PENDING],
        )
        if not won.ok:
            _lost(conn, approval_id, actor, won.previous, won.decided_by)
        _confirm(conn, settings, approval, actor, Status.REJECTED, due)
    approvers: tuple[str, ...] = (actor,)
    if kind is not DecisionKind.REJECT:
        required = approval.policy.approvals_required if kind is DecisionKind.APPROVE else 1
        vote = store.transitions.vote(
            conn, approval_id, kind.status, actor, required, encoded, owed
        )
        if vote.outcome == "lost":
            _lost(conn, approval_id, actor, vote.previous, vote.decided_by)
        if vote.outcome == "duplicate":
            raise AlreadyVoted(approval_id, vote.count, required)
        _confirm(conn, settings, approval, actor, kind.status, due)
        if vote.outcome == "counted":
            store.audit.append(conn, approval_id, "approval_counted", actor, count=vote.count)
            return store.records.load(conn, approval_id)
        approvers = vote.voters or approvers
    _after_decision(conn, settings, approval, decision, approvers)
    return store.records.load(conn, approval_id)


def _confirm(
    conn: redis.Redis,
    settings: Settings,
    approval: Approval,
    actor: str,
    target: Status,
    due: Sequence[tuple[str, float]],
) -> None:
    """With ``APPROVALS_MIN_REPLICAS``, a vote or decision counts only once that many
    replicas hold it; otherwise it is taken back (nothing followed it yet) and refused.

    Raises:
        NotReplicated: the click did not count; trying again is safe.
    """
    if store.replication.replicated(conn, settings):
        return
    store.transitions.undo_decision(conn, approval, actor, target, due)
    log.warning("approval %s: %s's click undone: replicas did not confirm it", approval.id, actor)
    raise NotReplicated(
        f"not recorded: fewer than {settings.min_replicas} Redis replica(s) confirmed it "
        "in time; try again"
    )


@dataclass(frozen=True)
class BulkOutcome:
    """What happened to one approval of a decision in bulk."""

    approval_id: str
    #: The approval after the attempt (None when it was refused).
    approval: Approval | None = None
    #: Why it was refused, in words (None when it was decided or counted).
    refused: str | None = None


def decide_many(
    conn: redis.Redis,
    settings: Settings,
    approval_ids: Sequence[str],
    kind: DecisionKind,
    actor: str,
    *,
    actor_name: str | None = None,
    members_of: GroupMembers = _no_groups,
) -> list[BulkOutcome]:
    """Approve or reject several approvals: each checked and decided atomically on its own
    (``decide``), so one refusal never blocks or undoes the others."""
    if kind not in (DecisionKind.APPROVE, DecisionKind.REJECT):
        raise NotAllowed("only approve and reject can be decided in bulk")
    outcomes_: list[BulkOutcome] = []
    for approval_id in dict.fromkeys(approval_ids):
        try:
            decided = decide(
                conn, settings, approval_id, kind, actor,
                actor_name=actor_name, members_of=members_of,
            )  # fmt: skip
        except ApprovalsError as exc:
            outcomes_.append(BulkOutcome(approval_id, refused=str(exc) or type(exc).__name__))
            continue
        outcomes_.append(BulkOutcome(approval_id, decided))
    return outcomes_


def expire(conn: redis.Redis, settings: Settings, approval_id: str) -> Approval | None:
    """Expire an approval nobody decided in time; None when a decision came first."""
    try:
        approval = store.records.load(conn, approval_id)
    except UnknownApproval:
        return None
    early = approval.expires_at - time.time()
    if early > 2:
        return None  # not due (a stale or misplaced job): never expire early
    if early > 0:
        time.sleep(early)  # the sweeping worker's clock runs a little ahead of this one's
    decision = Decision(kind=DecisionKind.EXPIRE, actor=SYSTEM_ACTOR, at=time.time())
    fields = {"decision": json.dumps(decision_to_dict(decision)), "decided_by": SYSTEM_ACTOR}
    if not store.transitions.transition(
        conn, approval_id, Status.EXPIRED, fields, sources=[Status.PENDING]
    ).ok:
        return None
    _after_decision(conn, settings, approval, decision)
    return store.records.load(conn, approval_id)


def retry(
    conn: redis.Redis,
    settings: Settings,
    approval_id: str,
    actor: str,
    members_of: GroupMembers = _no_groups,
) -> Approval:
    """Run an interrupted approval again, as decided: a person judged that rerunning is safe.

    Raises:
        UnknownApproval, NotAllowed: nothing was changed.
    """
    approval = store.records.load(conn, approval_id)
    if approval.status is not Status.INTERRUPTED or approval.decision is None:
        raise NotAllowed(f"there is nothing to retry: this request is {approval.status.value}")
    check_may_decide(conn, settings, approval, actor, members_of)
    # Clearing the marks in the same step lets the new attempt start the tool once more.
    fields = {"tool_started": "", "tool_finished": "", "retried_by": actor}
    # A fresh receipt: the first one may have expired while the run was interrupted (and one
    # that cannot be signed leaves none: never the old one).
    signed = _signature(settings, approval, approval.decision, approval.votes or None)
    fields |= {name: signed.get(name, "") for name in ("receipt", "receipt_error")}
    target = approval.decision.kind.status
    moved = store.transitions.transition(
        conn,
        approval_id,
        target,
        fields,
        sources=[Status.INTERRUPTED],
        owed=store.transitions.OWED_RETRY,
    )
    if not moved.ok:
        raise NotAllowed("someone else retried it first")
    _follow(conn, approval_id, settings)
    return store.records.load(conn, approval_id)


def _check_details(
    approval: Approval,
    kind: DecisionKind,
    reason: str | None,
    arguments: dict[str, Any] | None,
    response: str | None,
) -> None:
    if kind is DecisionKind.EXPIRE:
        raise NotAllowed("only the expiry job expires approvals")
    if (
        kind is DecisionKind.REJECT
        and approval.policy.reason_required
        and not (reason or "").strip()
    ):
        raise InvalidArguments({"reason": "a reason is required to reject this request"})
    if kind is DecisionKind.EDIT:
        if arguments is None:
            raise InvalidArguments({"_": "an edit needs the edited arguments"})
        check_edit(approval, arguments)
    if kind is DecisionKind.RESPOND and not (response or "").strip():
        raise InvalidArguments({"response": "write the result the agent should receive"})
    ijson.check_text("reason", reason)
    ijson.check_text("response", response)


def _refuse_decided(conn: redis.Redis, approval: Approval, actor: str) -> None:
    decided_by = approval.decision.actor if approval.decision else None
    _lost(conn, approval.id, actor, approval.status.value, decided_by)


def _lost(
    conn: redis.Redis, approval_id: str, actor: str, previous: str, decided_by: str | None
) -> None:
    if not previous:
        raise UnknownApproval(approval_id)
    if previous not in {s.value for s in DECIDED}:
        # Already running or finished: people want to hear the decision, not the run's state.
        decision = store.records.load(conn, approval_id).decision
        if decision is not None:
            previous, decided_by = decision.kind.status.value, decision.actor
    store.audit.append(conn, approval_id, "refused", actor, reason=f"already {previous}")
    raise AlreadyDecided(approval_id, previous, decided_by)


def _signs(settings: Settings, decision: Decision) -> bool:
    """Whether this process signs a receipt for ``decision``: with a key, when it releases."""
    return settings.signing_key is not None and decision.kind.runs_tool


def _signature(
    settings: Settings,
    approval: Approval,
    decision: Decision,
    approvers: tuple[str, ...] | None = None,
) -> dict[str, str]:
    """``{"receipt": token}`` for a decision that releases the call, signed with
    ``APPROVALS_SIGNING_KEY``; empty without a key (the gated tool then gets no receipt,
    and a service that requires one refuses the call: it fails closed).

    Signing happens after the decision is recorded, so it must not undo it: whatever goes
    wrong (the key file gone, arguments an older version let in), the answer is
    ``{"receipt_error": why}``, which the decision's audit entry carries and
    ``approvals show --verify`` reports. The call then has no receipt.
    """
    if not _signs(settings, decision):
        return {}
    assert settings.signing_key is not None
    try:
        token = _sign(settings.signing_key, settings, approval, decision, approvers)
    except Exception as exc:  # a decision is recorded already: never strand it
        log.exception("could not sign the receipt of approval %s", approval.id)
        return {"receipt_error": f"receipt could not be signed: {exc}"}
    return {"receipt": token}


def _sign(
    key: str,
    settings: Settings,
    approval: Approval,
    decision: Decision,
    approvers: tuple[str, ...] | None,
) -> str:
    return receipts.sign_receipt(
        key,
        approval_id=approval.id,
        tool=approval.tool_name,
        arguments=decision.arguments if decision.arguments is not None else approval.arguments,
        tool_call_id=approval.tool_call_id,
        decision=decision.kind.value,
        approvers=approvers or (decision.actor,),
        requested_by=approval.requested_by,
        agent=approval.agent,
        ttl=settings.receipt_ttl,
        preview_sha256=approval.preview_sha256,
        fingerprint=approval.fingerprint,
    )


#: How long after a decision a worker looks at whether its card shows it (the decider
#: redraws it at once; this is for a decider that could not).
SHOW_AFTER = 30

#: ``finished_by`` on a decision's audit entry that recovery wrote, not its decider.
LATE = "recovery"

#: What the audit says of a receipt the decider owed and a worker could not sign.
UNSIGNED = (
    "receipt could not be signed: the process that decided stopped before it signed one, "
    "and the worker that finished the decision holds no signing key"
)


def _after_decision(
    conn: redis.Redis,
    settings: Settings,
    approval: Approval,
    decision: Decision,
    approvers: tuple[str, ...] = (),
) -> None:
    """What follows a decision, by its decider: sign its receipt (the decider witnessed the
    decision: only it holds the key), then carry out what the decision left owed."""
    sign = functools.partial(_signature, settings, approval, decision, approvers)
    _follow(conn, approval.id, settings, sign)


def _follow(
    conn: redis.Redis,
    approval_id: str,
    settings: Settings,
    sign: Callable[[], dict[str, str]] = dict,
) -> None:
    """Carry out what a decision (or a Retry) left owed, keeping the receipt ``sign`` makes.

    Whatever fails here leaves the decision recorded, and what follows it owed: a worker's
    recovery carries it out later (``complete``), so it is logged and not raised.
    """
    try:
        signature = sign()
        if signature:
            store.owed.keep_signature(conn, approval_id, signature)
        _carry_out_now(conn, settings, approval_id)
    except Exception:  # the decision stands; recovery finishes what follows it
        log.exception(
            "approval %s: decided, but what follows the decision failed; a worker finishes it",
            approval_id,
        )


def complete(conn: redis.Redis, settings: Settings, approval_id: str) -> bool:
    """Carry out what follows a decision (or a Retry) whose decider stopped after recording
    it (it died, lost Redis, or failed): the audit entry, with the receipt the decider kept or
    why there is none, the webhook, the metrics, the caller woken or the resume queued, the
    card to redraw. Recovery calls it; it holds no key, so it signs nothing. Exactly once,
    however many workers and late deciders try (``store.owed.carry_out``); True for the one that
    did it. The audit entry it writes says so (``finished_by``)."""
    return _carry_out_now(conn, settings, approval_id, late=True)


def _carry_out_now(
    conn: redis.Redis, settings: Settings, approval_id: str, late: bool = False
) -> bool:
    owed = store.owed.carry_out(conn, approval_id, lambda owed: _plan(conn, settings, owed, late))
    if owed is None:
        return False
    approval = owed.approval
    if owed.what == store.transitions.OWED_RETRY or approval.external:
        return True
    assert approval.decision is not None  # _plan refused the step otherwise
    if approval.in_turn:
        _settle_turn(conn, settings, approval)
    elif _stops(approval, approval.decision):
        store.runs.finish_run(conn, settings, store.records.load(conn, approval.id))
    return True


def _stops(approval: Approval, decision: Decision) -> bool:
    refused = decision.kind in (DecisionKind.REJECT, DecisionKind.EXPIRE)
    return refused and approval.policy.on_reject is OnReject.STOP


def _plan(
    conn: redis.Redis, settings: Settings, owed: store.owed.Owed, late: bool
) -> store.owed.Plan:
    """The audit lines, and the writes beside them, of what a decision (or a Retry) owes.

    A decision: its audit entry, with the receipt or why there is none (a webhook goes with
    it), its metrics, the card to show it on; then, for an external approval, its caller
    woken; for an llm call alone in its turn that goes ahead, its resume queued; for a gate
    that stops the run, the stop. A turn's calls resume together, once the turn is settled
    (``_settle_turn``, after this step). A Retry: its audit entry and its resume.
    """
    approval = owed.approval
    late_note = {"finished_by": LATE} if late else {}
    if owed.what == store.transitions.OWED_RETRY:
        return _retry_plan(conn, settings, owed, late_note)
    decision = approval.decision
    if decision is None:
        raise CorruptRecord(f"approval {approval.id} owes what follows a decision it lacks")
    details: dict[str, Any] = {"reason": decision.reason or "", **late_note}
    if decision.kind is DecisionKind.EDIT:
        details.update(proposed=approval.arguments, approved=decision.arguments)
    if decision.kind is DecisionKind.RESPOND:
        details.update(response=decision.response)
    if approval.receipt is not None:
        details.update(receipt=approval.receipt)
    unsigned = owed.what == store.transitions.OWED_RECEIPT and approval.receipt is None
    if owed.receipt_error or unsigned:
        details.update(receipt_error=owed.receipt_error or UNSIGNED)
    events = [store.audit.audit_entry(decision.kind.status.value, decision.actor, **details)]
    stops = _stops(approval, decision)
    if stops and not approval.in_turn:
        events.append(store.audit.audit_entry("run_stopped", SYSTEM_ACTOR, reason="on_reject=stop"))

    def more(pipe: Any) -> None:
        _count_decision(pipe, approval, decision)
        store.owed.note_unshown(pipe, approval.id, decision.at + SHOW_AFTER)
        if approval.external:
            # No chain to resume: the decision, and its receipt, go to the caller waiting.
            store.callers.wake_caller(pipe, approval.id, settings.result_ttl)
        elif not stops and not approval.in_turn:
            # Asked again after the state changed: its first resume job is kept by RQ still.
            again = approval.stale > 0
            queue.enqueue_resume(conn, settings, approval.id, again=again, pipeline=pipe)

    return events, more


def _retry_plan(
    conn: redis.Redis, settings: Settings, owed: store.owed.Owed, late_note: dict[str, str]
) -> store.owed.Plan:
    """A Retry's audit entry (with its fresh receipt), and its resume: the turn's other
    calls ran in the same resume, so they run again too."""
    approval = owed.approval
    details: dict[str, Any] = {"receipt": approval.receipt or "", **late_note}
    if owed.receipt_error:
        details.update(receipt_error=owed.receipt_error)
    entry = store.audit.audit_entry("retried", owed.retried_by or SYSTEM_ACTOR, **details)

    def more(pipe: Any) -> None:
        store.records.clear_tool_marks(pipe, approval.turn[1:])
        queue.enqueue_resume(conn, settings, approval.id, again=True, pipeline=pipe)

    return [entry], more


def _settle_turn(conn: redis.Redis, settings: Settings, approval: Approval) -> None:
    """One call of a turn is decided: the turn's one resume starts when its last call is.

    ``store.turns.settle_turn`` answers True to exactly one decision, the first to find every
    call decided, so two people deciding the last two calls at once start one resume. A
    call whose gate says ``on_reject="stop"`` and was rejected (or expired) stops the run
    instead, once the turn is settled: nothing of the turn runs.
    """
    if not store.turns.settle_turn(conn, approval.turn):
        return
    lead = store.records.load(conn, approval.turn_lead)
    stopper = next((a for a in lead.turn_calls if a.stops_run), None)
    if stopper is not None:
        store.audit.append(conn, lead.id, "run_stopped", SYSTEM_ACTOR, reason="on_reject=stop",
                    call=stopper.id)  # fmt: skip
        store.runs.finish_run(conn, settings, lead)
        return
    store.audit.append(conn, lead.id, "turn_decided", SYSTEM_ACTOR, calls=list(lead.turn))
    queue.enqueue_resume(conn, settings, lead.id)


def _count_decision(pipe: Any, approval: Approval, decision: Decision) -> None:
    """The decision's metrics (``approvals.ops.metrics``): one more of its kind, and how long
    the approval waited for it (``pipe``: the step that carries the decision out)."""
    store.metrics.count(pipe, f"decisions:{decision.kind.value}")
    store.metrics.observe(pipe, "decision_seconds", max(0.0, decision.at - approval.created_at))
