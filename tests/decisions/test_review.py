"""Reviewing a decision: who may decide, and the one atomic step that records it."""

from __future__ import annotations

import json

import pytest

from approvals import store
from approvals.config import Settings
from approvals.decisions.review import SYSTEM_ACTOR, decide, expire, precheck, refusal
from approvals.errors import (
    AlreadyDecided,
    AlreadyVoted,
    InvalidArguments,
    NotAllowed,
    UnknownApproval,
)
from approvals.models import DecisionKind, OnReject, Policy, Status, ToolRef
from approvals.store import queue
from tests.factories import make_approval


def _may(settings, actor, members=None, **policy):
    approval = make_approval(policy=Policy(**policy), requested_by="UREQ")
    groups = members or {}
    return refusal(settings, approval, actor, lambda g: groups.get(g, ())) is None


def test_anyone_may_decide_when_approvers_is_empty():
    """Without APPROVERS, every Slack user may decide."""
    settings = Settings.from_env({})
    assert _may(settings, "UALICE")
    assert _may(settings, "UANYONE")


def test_only_listed_approvers_may_decide():
    """With APPROVERS set, only those user ids may decide."""
    settings = Settings.from_env({"APPROVERS": "UALICE, UBOB"})
    assert _may(settings, "UALICE")
    assert _may(settings, "UBOB")
    assert not _may(settings, "UMALLORY")
    assert not _may(settings, "ualice")
    assert not _may(settings, "")


@pytest.mark.parametrize("approvers", ["", "UALICE"])
def test_cli_actors_may_always_decide(approvers):
    """CLI users (who hold Redis access anyway) may decide whatever APPROVERS says."""
    assert _may(Settings.from_env({"APPROVERS": approvers}), "cli:alice")


def test_members_of_approver_groups_may_decide():
    """APPROVER_GROUPS lets in the members of those Slack user groups, and nobody else."""
    settings = Settings.from_env({"APPROVER_GROUPS": "S1"})
    assert _may(settings, "UOPS", members={"S1": ["UOPS"]})
    assert not _may(settings, "UDEV", members={"S1": ["UOPS"], "S2": ["UDEV"]})


def test_a_gate_overrides_the_deployment_approvers():
    """approvers=/approver_groups= on the gate replace APPROVERS/APPROVER_GROUPS."""
    settings = Settings.from_env({"APPROVERS": "UALICE"})
    assert not _may(settings, "UALICE", approvers=("UBOB",))
    assert _may(settings, "UBOB", approvers=("UBOB",))
    assert _may(settings, "UOPS", members={"S9": ["UOPS"]}, approvers=(), approver_groups=("S9",))


def test_the_requester_may_not_approve_their_own_request_unless_allowed():
    """Self-approval is refused unless the gate allows it."""
    settings = Settings.from_env({})
    assert not _may(settings, "UREQ")
    assert _may(settings, "UREQ", allow_self_approval=True)
    reason = refusal(settings, make_approval(requested_by="UREQ"), "UREQ")
    assert reason is not None and "someone else" in reason


# --- deciding, against a private real redis-server ----------------------------------------------


@pytest.fixture
def settings(env):
    return Settings.from_env()


def _save(conn, **overrides):
    """A pending delete_path approval saved in Redis (ids differ per policy, so tests can mix)."""
    approval = make_approval(**overrides)
    store.records.create(conn, approval, history=[]).execute()
    return approval


def _events(conn, approval_id):
    return [(e["event"], e["actor"]) for e in store.audit.audit_trail(conn, approval_id)]


def _resume_queued(conn, settings, approval_id):
    return f"resume-{approval_id}" in queue.get_queue(conn, settings).job_ids


def test_a_single_approval_decides_and_queues_the_resume(conn, settings):
    """Without a quorum one approval decides, records the voter and queues the resume."""
    approval = _save(conn)
    decided = decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
    assert decided.status is Status.APPROVED
    assert decided.votes == ("UALICE",)
    assert decided.decision is not None and decided.decision.arguments == approval.arguments
    assert _resume_queued(conn, settings, approval.id)


def test_a_quorum_of_two_needs_two_different_people(conn, settings):
    """The first approval is counted, the same person again is refused, a second person decides."""
    approval = _save(conn, policy=Policy(approvals_required=2))

    first = decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
    assert first.status is Status.PENDING
    assert first.votes == ("UALICE",)
    assert not _resume_queued(conn, settings, approval.id)

    with pytest.raises(AlreadyVoted) as info:
        decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
    assert (info.value.count, info.value.required) == (1, 2)
    assert store.records.load(conn, approval.id).status is Status.PENDING

    second = decide(conn, settings, approval.id, DecisionKind.APPROVE, "UBOB", actor_name="Bob")
    assert second.status is Status.APPROVED
    assert second.votes == ("UALICE", "UBOB")
    assert second.decision is not None
    assert (second.decision.actor, second.decision.actor_name) == ("UBOB", "Bob")
    assert _resume_queued(conn, settings, approval.id)
    assert ("approval_counted", "UALICE") in _events(conn, approval.id)
    assert ("approved", "UBOB") in _events(conn, approval.id)


def test_one_rejection_ends_a_quorum(conn, settings):
    """A single rejection decides, even after approvals; later approvals are refused."""
    approval = _save(conn, policy=Policy(approvals_required=3))
    decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
    rejected = decide(conn, settings, approval.id, DecisionKind.REJECT, "UBOB", reason="no")
    assert rejected.status is Status.REJECTED
    assert rejected.decision is not None and rejected.decision.actor == "UBOB"
    with pytest.raises(AlreadyDecided) as info:
        decide(conn, settings, approval.id, DecisionKind.APPROVE, "UCAROL")
    assert (info.value.status, info.value.decided_by) == ("rejected", "UBOB")


def test_a_rejection_without_a_reason_is_refused_when_one_is_required(conn, settings):
    """reason_required: no reason, no rejection (and nothing changes); with one it is recorded."""
    approval = _save(conn, policy=Policy(reason_required=True))
    for reason in (None, ""):
        with pytest.raises(InvalidArguments) as info:
            decide(conn, settings, approval.id, DecisionKind.REJECT, "UALICE", reason=reason)
        assert set(info.value.errors) == {"reason"}
    assert store.records.load(conn, approval.id).status is Status.PENDING
    rejected = decide(
        conn, settings, approval.id, DecisionKind.REJECT, "UALICE", reason="wrong folder"
    )
    assert rejected.status is Status.REJECTED
    assert rejected.decision is not None and rejected.decision.reason == "wrong folder"


@pytest.mark.parametrize("reason", ["", "   ", "\t\n", "\u00a0"])
def test_a_blank_reason_does_not_satisfy_reason_required(conn, settings, reason):
    """Whitespace is no reason, and the refused rejection leaves the approval pending."""
    approval = _save(conn, policy=Policy(reason_required=True))
    with pytest.raises(InvalidArguments):
        decide(conn, settings, approval.id, DecisionKind.REJECT, "UALICE", reason=reason)
    assert store.records.load(conn, approval.id).status is Status.PENDING


def test_a_reason_is_optional_by_default(conn, settings):
    """Without reason_required a rejection needs no reason."""
    approval = _save(conn)
    rejected = decide(conn, settings, approval.id, DecisionKind.REJECT, "UALICE")
    assert rejected.status is Status.REJECTED
    assert rejected.decision is not None and rejected.decision.reason is None


def test_editing_a_locked_argument_is_refused_under_its_name(conn, settings):
    """With editable=(recursive,), changing path is InvalidArguments keyed by "path"."""
    approval = _save(conn, policy=Policy(editable=("recursive",)))
    with pytest.raises(InvalidArguments) as info:
        decide(
            conn,
            settings,
            approval.id,
            DecisionKind.EDIT,
            "UALICE",
            arguments={"path": "/", "recursive": True},
        )
    assert set(info.value.errors) == {"path"}
    assert store.records.load(conn, approval.id).status is Status.PENDING


def test_dropping_a_locked_argument_is_refused_too(conn, settings):
    """Leaving out a locked argument is a change to it."""
    approval = _save(conn, policy=Policy(editable=("recursive",)))
    with pytest.raises(InvalidArguments) as info:
        decide(
            conn, settings, approval.id, DecisionKind.EDIT, "UALICE", arguments={"recursive": True}
        )
    assert "path" in info.value.errors


def test_editing_only_editable_arguments_is_accepted(conn, settings):
    """Changing an editable argument while keeping the locked ones decides the edit."""
    approval = _save(conn, policy=Policy(editable=("recursive",)))
    edited = {"path": "build/app.o", "recursive": True}
    decided = decide(conn, settings, approval.id, DecisionKind.EDIT, "UALICE", arguments=edited)
    assert decided.status is Status.EDITED
    assert decided.decision is not None and decided.decision.arguments == edited
    assert decided.arguments == approval.arguments


def test_an_edit_keeps_empty_lists_and_objects(conn, settings):
    """Edited arguments holding [] and {} are stored and loaded back exactly."""
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "options": {"type": "object"},
        },
        "required": ["path"],
    }
    tool = ToolRef("delete_path", "tests.agents.tools:delete_path", schema)
    approval = _save(
        conn, tools=[tool], arguments={"path": "x", "tags": ["a"], "options": {"k": 1}}
    )
    edited = {"path": "x", "tags": [], "options": {}}
    decided = decide(conn, settings, approval.id, DecisionKind.EDIT, "UALICE", arguments=edited)
    assert decided.decision is not None
    assert json.dumps(decided.decision.arguments) == json.dumps(edited)
    raw = json.loads(conn.hget(store.keys.approval_key(approval.id), "decision"))
    assert raw["arguments"] == {"path": "x", "tags": [], "options": {}}


@pytest.mark.parametrize("kind", [DecisionKind.EDIT, DecisionKind.RESPOND])
def test_precheck_refuses_edit_and_respond_under_a_quorum(conn, settings, kind):
    """When several approvals are needed, nobody may edit or answer alone."""
    approval = _save(conn, policy=Policy(approvals_required=2))
    with pytest.raises(NotAllowed, match="needs 2 approvals"):
        precheck(conn, settings, approval.id, kind, "UALICE")


@pytest.mark.parametrize("kind", [DecisionKind.APPROVE, DecisionKind.REJECT])
def test_precheck_allows_approve_and_reject_under_a_quorum(conn, settings, kind):
    """Approve and Reject stay possible with a quorum."""
    approval = _save(conn, policy=Policy(approvals_required=2))
    assert precheck(conn, settings, approval.id, kind, "UALICE") == approval


def test_decide_refuses_an_edit_under_a_quorum(conn, settings):
    """An edit sent straight to decide() is refused the same way, and nothing changes."""
    approval = _save(conn, policy=Policy(approvals_required=2))
    with pytest.raises(NotAllowed):
        decide(conn, settings, approval.id, DecisionKind.EDIT, "UALICE", arguments={"path": "y"})
    assert store.records.load(conn, approval.id).votes == ()


def test_precheck_refuses_an_edit_when_nothing_is_editable(conn, settings):
    """editable=() leaves nothing to edit."""
    approval = _save(conn, policy=Policy(editable=()))
    with pytest.raises(NotAllowed, match="edited"):
        precheck(conn, settings, approval.id, DecisionKind.EDIT, "UALICE")


def test_precheck_refuses_who_may_not_decide_and_records_it(conn, settings):
    """Someone not among the gate's approvers is refused, and the refusal is audited."""
    approval = _save(conn, policy=Policy(approvers=("UBOB",)))
    with pytest.raises(NotAllowed):
        precheck(conn, settings, approval.id, DecisionKind.APPROVE, "UMALLORY")
    assert ("refused", "UMALLORY") in _events(conn, approval.id)


def test_precheck_of_a_decided_or_unknown_approval(conn, settings):
    """A decided approval is AlreadyDecided; an unknown id is UnknownApproval."""
    approval = _save(conn)
    decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
    with pytest.raises(AlreadyDecided):
        precheck(conn, settings, approval.id, DecisionKind.REJECT, "UBOB")
    with pytest.raises(UnknownApproval):
        precheck(conn, settings, "nope", DecisionKind.APPROVE, "UBOB")


def test_a_response_is_recorded_and_resumes(conn, settings):
    """Respond stores the reviewer's text as the decision and queues the resume."""
    approval = _save(conn)
    decided = decide(
        conn, settings, approval.id, DecisionKind.RESPOND, "UALICE", response="It is gone."
    )
    assert decided.status is Status.RESPONDED
    assert decided.decision is not None and decided.decision.response == "It is gone."
    assert _resume_queued(conn, settings, approval.id)


@pytest.mark.parametrize("response", [None, "", "   \n"])
def test_an_empty_response_is_refused(conn, settings, response):
    """A response must say something."""
    approval = _save(conn)
    with pytest.raises(InvalidArguments) as info:
        decide(conn, settings, approval.id, DecisionKind.RESPOND, "UALICE", response=response)
    assert set(info.value.errors) == {"response"}
    assert store.records.load(conn, approval.id).status is Status.PENDING


def test_people_cannot_expire_an_approval(conn, settings):
    """EXPIRE is the timer's decision, not a person's."""
    approval = _save(conn)
    with pytest.raises(NotAllowed):
        decide(conn, settings, approval.id, DecisionKind.EXPIRE, "UALICE")
    assert store.records.load(conn, approval.id).status is Status.PENDING


# --- expiry ------------------------------------------------------------------------------------


def test_expire_moves_a_pending_approval_to_expired(conn, settings):
    """An undecided approval expires, decided by the system, and the agent is resumed."""
    approval = _save(conn)
    expired = expire(conn, settings, approval.id)
    assert expired is not None
    assert expired.status is Status.EXPIRED
    assert expired.decision is not None
    assert (expired.decision.kind, expired.decision.actor) == (DecisionKind.EXPIRE, SYSTEM_ACTOR)
    assert conn.hget(store.keys.approval_key(approval.id), "decided_by") == b"system"
    assert store.pending.pending_count(conn) == 0
    assert _resume_queued(conn, settings, approval.id)


def test_expire_with_on_reject_stop_does_not_resume(conn, settings):
    """Under on_reject=stop an expired run ends: no resume job, and the stop is audited."""
    approval = _save(conn, policy=Policy(on_reject=OnReject.STOP))
    assert expire(conn, settings, approval.id) is not None
    assert not _resume_queued(conn, settings, approval.id)
    assert ("run_stopped", SYSTEM_ACTOR) in _events(conn, approval.id)


def test_a_rejection_with_on_reject_stop_does_not_resume(conn, settings):
    """Under on_reject=stop a rejected run ends there too."""
    approval = _save(conn, policy=Policy(on_reject=OnReject.STOP))
    decide(conn, settings, approval.id, DecisionKind.REJECT, "UALICE")
    assert not _resume_queued(conn, settings, approval.id)


@pytest.mark.parametrize(
    ("kind", "details"),
    [
        (DecisionKind.APPROVE, {}),
        (DecisionKind.REJECT, {}),
        (DecisionKind.RESPOND, {"response": "done"}),
        (DecisionKind.EDIT, {"arguments": {"path": "x"}}),
    ],
)
def test_expire_loses_to_an_earlier_decision(conn, settings, kind, details):
    """A decision made before the timer fired wins: expire() changes nothing and says None."""
    approval = _save(conn)
    decided = decide(conn, settings, approval.id, kind, "UALICE", **details)
    assert expire(conn, settings, approval.id) is None
    after = store.records.load(conn, approval.id)
    assert after.status is decided.status
    assert after.decision == decided.decision


def test_expire_only_once(conn, settings):
    """A second expiry of the same approval does nothing."""
    approval = _save(conn)
    assert expire(conn, settings, approval.id) is not None
    assert expire(conn, settings, approval.id) is None


def test_expire_of_an_unknown_approval_is_none(conn, settings):
    """Expiring an id that does not exist (deleted meanwhile) is a no-op."""
    assert expire(conn, settings, "nope") is None


def test_expire_with_votes_still_counting_ends_the_quorum(conn, settings):
    """An approval short of its quorum expires; the late approver is told it expired."""
    approval = _save(conn, policy=Policy(approvals_required=2))
    decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
    assert expire(conn, settings, approval.id) is not None
    with pytest.raises(AlreadyDecided) as info:
        decide(conn, settings, approval.id, DecisionKind.APPROVE, "UBOB")
    assert info.value.status == "expired"


@pytest.mark.parametrize("reached", [[Status.RUNNING], [Status.RUNNING, Status.INTERRUPTED]])
def test_expire_never_takes_an_approval_that_already_runs(conn, settings, reached):
    """The timer firing after the decision, while the run is under way, changes nothing."""
    approval = _save(conn)
    decided = decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
    for status in reached:
        assert store.transitions.transition(conn, approval.id, status).ok
    assert expire(conn, settings, approval.id) is None
    after = store.records.load(conn, approval.id)
    assert after.status is reached[-1]
    assert after.decision == decided.decision


def test_a_rejection_racing_a_started_run_loses(conn, settings, monkeypatch):
    """A reject whose precheck saw pending, but whose approval started running since, loses."""
    approval = _save(conn)
    seen_pending = store.records.load(conn, approval.id)
    decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
    assert store.transitions.transition(conn, approval.id, Status.RUNNING).ok
    real_load = store.records.load
    calls = []

    def stale_first_load(c, approval_id):
        calls.append(approval_id)
        return seen_pending if len(calls) == 1 else real_load(c, approval_id)

    monkeypatch.setattr(store.records, "load", stale_first_load)
    with pytest.raises(AlreadyDecided):
        decide(conn, settings, approval.id, DecisionKind.REJECT, "UBOB")
    assert real_load(conn, approval.id).status is Status.RUNNING
