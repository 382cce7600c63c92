"""The approval record: its state machine and loading it back from untrusted JSON."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.errors import CorruptRecord
from approvals.models import (
    DECIDED,
    FINISHED,
    TRANSITIONS,
    UNSET,
    Approval,
    DecisionKind,
    GateOptions,
    OnReject,
    Policy,
    RunResult,
    SiblingResult,
    Status,
    ToolRef,
    approval_from_parts,
    decision_to_dict,
    options_from_dict,
    options_to_dict,
    result_to_dict,
    sources_of,
)
from approvals.models.options import CARRIED, OPTIONS
from tests.factories import CREATED_AT, DELETE_REF, LIST_REF, make_approval, make_decision

# --- the state machine ---------------------------------------------------------------------


def test_every_status_has_a_row_in_the_table():
    """TRANSITIONS states the moves of every status, none forgotten."""
    assert set(TRANSITIONS) == set(Status)


def test_pending_may_only_be_decided():
    """A pending approval can only become approved, edited, rejected, responded or expired."""
    assert TRANSITIONS[Status.PENDING] == {
        Status.APPROVED,
        Status.EDITED,
        Status.REJECTED,
        Status.RESPONDED,
        Status.EXPIRED,
    }


@pytest.mark.parametrize("target", [Status.RUNNING, Status.COMPLETED, Status.FAILED, Status.PAUSED])
def test_pending_cannot_skip_the_decision(target):
    """Nothing runs or finishes without someone deciding first."""
    assert target not in TRANSITIONS[Status.PENDING]


@pytest.mark.parametrize("decided", sorted(DECIDED))
def test_a_decision_only_leads_to_running(decided):
    """After a decision the only move is the worker starting the resume."""
    assert TRANSITIONS[decided] == {Status.RUNNING}


@pytest.mark.parametrize("finished", sorted(FINISHED))
def test_finished_statuses_are_terminal(finished):
    """Completed, paused and failed approvals never change again."""
    assert TRANSITIONS[finished] == frozenset()


def test_sources_of_a_decision_are_pending_and_worker_recovery():
    """People decide pending approvals; only recovery returns running or interrupted ones."""
    for decided in DECIDED:
        assert sources_of(decided) == [Status.PENDING, Status.RUNNING, Status.INTERRUPTED]
        assert not set(sources_of(decided)) & (DECIDED | FINISHED)


def test_sources_of_running_are_the_decided_statuses():
    """The worker may start any decided approval, and nothing else."""
    assert set(sources_of(Status.RUNNING)) == DECIDED


def test_only_a_run_whose_state_changed_goes_back_to_pending():
    """Nothing goes back to pending but a running approval whose state changed after its
    decision, before its tool started (the gate's ``fingerprint``): people decide again."""
    assert sources_of(Status.PENDING) == [Status.RUNNING]


def test_decision_kinds_map_to_their_statuses():
    """Each kind of decision moves the approval to its own status."""
    assert {kind: kind.status for kind in DecisionKind} == {
        DecisionKind.APPROVE: Status.APPROVED,
        DecisionKind.EDIT: Status.EDITED,
        DecisionKind.REJECT: Status.REJECTED,
        DecisionKind.RESPOND: Status.RESPONDED,
        DecisionKind.EXPIRE: Status.EXPIRED,
    }


def test_only_approve_and_edit_run_the_tool():
    """Approving (as proposed or edited) runs the tool; reject, respond and expire do not."""
    assert {kind for kind in DecisionKind if kind.runs_tool} == {
        DecisionKind.APPROVE,
        DecisionKind.EDIT,
    }


# --- loading ---------------------------------------------------------------------------------


def _parts(approval: Approval) -> dict[str, Any]:
    """The stored parts of an approval, through JSON as Redis would hold them."""
    return {
        "record": json.loads(json.dumps(approval.record())),
        "status": approval.status.value,
        "card_ts": approval.card_ts,
        "decision": (
            None
            if approval.decision is None
            else json.loads(json.dumps(decision_to_dict(approval.decision)))
        ),
        "result": (
            None
            if approval.result is None
            else json.loads(json.dumps(result_to_dict(approval.result)))
        ),
        "votes": json.loads(json.dumps(list(approval.votes))),
    }


def _load(record: Any, **parts: Any) -> Approval:
    values = {
        "status": "pending",
        "card_ts": None,
        "decision": None,
        "result": None,
        "votes": None,
        **parts,
    }
    return approval_from_parts(record, **values)


def _valid_record() -> dict[str, Any]:
    return json.loads(json.dumps(make_approval().record()))


def test_record_leaves_out_the_mutable_parts():
    """The immutable record holds no status, card, decision, result or votes (they live apart)."""
    record = make_approval().record()
    assert not {"status", "card_ts", "decision", "result", "votes"} & set(record)


def test_a_pending_approval_round_trips():
    """A fresh approval loads back equal to itself."""
    approval = make_approval()
    assert approval_from_parts(**_parts(approval)) == approval


def test_a_finished_approval_round_trips_with_every_field():
    """Every field, including decision, result, siblings and optional ones, survives JSON."""
    approval = make_approval(
        system="You tidy build folders.",
        summary="Delete build/app.o",
        siblings=[SiblingResult("list_files", '["build/app.o"]')],
        requested_by="UREQ",
        chain_limit=7,
        parent_id="0011223344556677",
        thread_ts="1700000000.000100",
        status=Status.COMPLETED,
        card_ts="1700000001.000200",
        decision=make_decision(
            DecisionKind.EDIT,
            "UALICE",
            reason="only the object file",
            actor_name="Alice",
            arguments={"path": "build/app.o", "recursive": False},
        ),
        result=RunResult(
            Status.COMPLETED,
            text="Deleted.",
            executed_arguments={"path": "build/app.o", "recursive": False},
            tool_output="deleted build/app.o",
        ),
        expires_at=CREATED_AT + 3600,
        policy=Policy(
            approvers=("UALICE",),
            approver_groups=("S0OPS",),
            allow_self_approval=True,
            approvals_required=1,
            editable=("path",),
            reason_required=True,
            on_reject=OnReject.STOP,
        ),
        votes=("UALICE",),
    )
    assert approval_from_parts(**_parts(approval)) == approval


@pytest.mark.parametrize(
    "policy",
    [
        Policy(),
        Policy(approvers=(), approver_groups=(), editable=()),
        Policy(approvers=("UALICE", "UBOB"), approvals_required=3, on_reject=OnReject.STOP),
        Policy(editable=("path", "recursive"), reason_required=True, allow_self_approval=True),
    ],
)
def test_a_policy_round_trips(policy):
    """Every policy survives JSON, with None kept apart from an empty tuple."""
    approval = make_approval(policy=policy)
    loaded = approval_from_parts(**_parts(approval))
    assert loaded.policy == policy
    assert loaded.policy.on_reject is policy.on_reject


def test_the_policy_is_stored_as_plain_json():
    """on_reject is written as its text value, lists as JSON arrays."""
    record = make_approval(policy=Policy(on_reject=OnReject.STOP, editable=("path",))).record()
    assert json.loads(json.dumps(record))["policy"] == {
        "approvers": None,
        "approver_groups": None,
        "allow_self_approval": False,
        "approvals_required": 1,
        "editable": ["path"],
        "reason_required": False,
        "on_reject": "stop",
        "grantable": True,
    }


@pytest.mark.parametrize("votes", [(), ("UALICE",), ("UALICE", "UBOB", "cli:carol")])
def test_votes_round_trip_in_order(votes):
    """The approvals counted so far load back as the same tuple, in the order given."""
    approval = make_approval(policy=Policy(approvals_required=3), votes=votes)
    assert approval_from_parts(**_parts(approval)).votes == votes


def test_missing_votes_load_as_no_votes():
    """An approval nobody voted on has no votes field in Redis: it loads with no votes."""
    assert _load(_valid_record()).votes == ()


@pytest.mark.parametrize("votes", ["UALICE", [1], ["UALICE", None], {"UALICE": 1}, 3])
def test_malformed_votes_are_corrupt(votes):
    """Votes that are not a list of user ids are refused."""
    with pytest.raises(CorruptRecord):
        _load(_valid_record(), votes=votes)


def test_integer_timestamps_load_as_floats():
    """A created_at written as a JSON integer is accepted and read as a float."""
    record = {**_valid_record(), "created_at": 1_700_000_000}
    loaded = _load(record)
    assert loaded.created_at == 1_700_000_000.0
    assert isinstance(loaded.created_at, float)


@pytest.mark.parametrize("name", ["system", "summary", "requested_by", "parent_id", "thread_ts"])
def test_missing_optional_fields_load_as_none(name):
    """Optional fields may be absent; they load as None."""
    record = _valid_record()
    del record[name]
    assert getattr(_load(record), name) is None


REQUIRED = [
    "expires_at",
    "policy",
    "id",
    "agent",
    "model_id",
    "tool_name",
    "tool_call_id",
    "arguments",
    "tools",
    "channel",
    "siblings",
    "chain_limit",
    "created_at",
]


@pytest.mark.parametrize("name", REQUIRED)
def test_a_missing_required_field_is_corrupt(name):
    """A record without one of its required fields is refused."""
    record = _valid_record()
    del record[name]
    with pytest.raises(CorruptRecord):
        _load(record)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("chain_limit", "3"),
        ("chain_limit", True),
        ("chain_limit", 2.5),
        ("created_at", "1700000000"),
        ("created_at", False),
        ("arguments", ["build/app.o"]),
        ("arguments", "build/app.o"),
        ("tools", {"delete_path": {}}),
        ("tools", [["delete_path"]]),
        ("tools", [{"name": "delete_path", "path": "m:f", "schema": "{}"}]),
        ("siblings", [{"name": "list_files"}]),
        ("id", 17),
        ("agent", None),
        ("channel", ["C0CARDS"]),
        ("system", 5),
        ("thread_ts", 1700000000.0001),
    ],
)
def test_a_field_of_the_wrong_type_is_corrupt(name, value):
    """Wrong types are refused, including a bool where a number is expected."""
    record = {**_valid_record(), name: value}
    with pytest.raises(CorruptRecord):
        _load(record)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("approvals_required", 0),
        ("approvals_required", -2),
        ("approvals_required", "2"),
        ("approvals_required", True),
        ("approvals_required", 1.5),
        ("on_reject", "ignore"),
        ("on_reject", "STOP"),
        ("on_reject", 1),
        ("approvers", "UALICE"),
        ("approvers", [1]),
        ("approver_groups", {"S1": True}),
        ("editable", "path"),
        ("editable", ["path", None]),
        ("allow_self_approval", "yes"),
        ("reason_required", 1),
    ],
)
def test_a_bad_policy_is_corrupt(name, value):
    """A policy with an impossible quorum, unknown on_reject or wrong types is refused (a
    field left out, or null, is its default: stored records leave defaults out)."""
    record = _valid_record()
    record["policy"] = {**record["policy"], name: value}
    with pytest.raises(CorruptRecord):
        _load(record)


@pytest.mark.parametrize("policy", [None, [], "default", 1])
def test_a_policy_that_is_not_a_policy_object_is_corrupt(policy):
    """The policy must be an object with its fields; anything else is refused."""
    with pytest.raises(CorruptRecord):
        _load({**_valid_record(), "policy": policy})


@pytest.mark.parametrize("status", ["done", "PENDING", "", None, 1, ["pending"]])
def test_an_unknown_status_is_corrupt(status):
    """A status this version never writes is refused."""
    with pytest.raises(CorruptRecord):
        _load(_valid_record(), status=status)


@pytest.mark.parametrize("kind", ["maybe", "APPROVE", 1, None])
def test_an_unknown_decision_kind_is_corrupt(kind):
    """A decision of an unknown kind is refused."""
    decision = {"kind": kind, "actor": "UALICE", "at": CREATED_AT}
    with pytest.raises(CorruptRecord):
        _load(_valid_record(), status="approved", decision=decision)


@pytest.mark.parametrize(
    "decision",
    [
        "approve",
        ["approve", "UALICE"],
        {"kind": "approve", "at": 1.0},
        {"kind": "approve", "actor": "UALICE", "at": "yesterday"},
        {"kind": "approve", "actor": "UALICE", "at": 1.0, "arguments": ["x"]},
    ],
)
def test_a_malformed_decision_is_corrupt(decision):
    """A decision that is not an object with actor, kind and time is refused."""
    with pytest.raises(CorruptRecord):
        _load(_valid_record(), status="approved", decision=decision)


@pytest.mark.parametrize(
    "result",
    ["completed", {"text": "Done."}, {"status": "finished"}, {"status": "failed", "error": 3}],
)
def test_a_malformed_result_is_corrupt(result):
    """A result without a known status, or with wrong types, is refused."""
    with pytest.raises(CorruptRecord):
        _load(_valid_record(), status="completed", result=result)


@pytest.mark.parametrize("record", [None, [], "record", 42, 1.5, True])
def test_a_record_that_is_not_an_object_is_corrupt(record):
    """A record that is not a JSON object is refused."""
    with pytest.raises(CorruptRecord):
        _load(record)


def test_a_timestamp_too_large_for_a_float_is_corrupt():
    """A JSON integer beyond float range in created_at is refused as CorruptRecord."""
    record = {**_valid_record(), "created_at": 10**400}
    with pytest.raises(CorruptRecord):
        _load(record)


@pytest.mark.parametrize(
    ("editable", "names"),
    [
        (None, ["path", "recursive"]),
        (("recursive",), ["recursive"]),
        (("recursive", "path"), ["path", "recursive"]),
        (("nonexistent",), []),
        ((), []),
    ],
)
def test_editable_names_follow_the_policy_in_schema_order(editable, names):
    """None allows every argument; a tuple allows only the named ones, in the tool's order."""
    approval = make_approval(policy=Policy(editable=editable))
    assert approval.editable == names


def test_editable_of_a_tool_without_properties_are_the_proposed_arguments():
    """A schema that lists no properties leaves the proposed arguments editable."""
    bare = ToolRef("delete_path", DELETE_REF.path, {"type": "object"})
    approval = make_approval(tools=[LIST_REF, bare], arguments={"path": "x", "force": True})
    assert approval.editable == ["path", "force"]


def test_editable_none_includes_arguments_outside_the_schema():
    """With no editable list, an argument proposed outside the schema is editable too."""
    approval = make_approval(arguments={"path": "build", "extra": [1]})
    assert "extra" in approval.editable


def test_an_approval_without_its_own_tool_is_corrupt():
    """An approval whose tool list lacks its own tool cannot name the tool it gates."""
    approval = make_approval(tools=[])
    with pytest.raises(CorruptRecord):
        _ = approval.tool


# --- loading arbitrary JSON --------------------------------------------------------------------

# Integers stay within float range here: overflowing times have their own test above.
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=10,
)
RECORD_FIELDS = [*REQUIRED, "system", "summary", "requested_by", "parent_id", "thread_ts"]


def _assert_loads_or_is_corrupt(record: Any, **parts: Any) -> None:
    """Loading raises only CorruptRecord; whatever does load saves and loads back the same."""
    try:
        approval = _load(record, **parts)
    except CorruptRecord:
        return
    assert approval_from_parts(**_parts(approval)) == approval


@settings(max_examples=100, deadline=None, database=None)
@given(json_values)
def test_any_json_as_the_record_loads_or_is_corrupt(record):
    """Whatever JSON sits in place of the record, loading raises nothing but CorruptRecord."""
    _assert_loads_or_is_corrupt(record)


@settings(max_examples=50, deadline=None, database=None)
@given(
    st.dictionaries(st.sampled_from(RECORD_FIELDS), json_values),
    json_values | st.dictionaries(st.sampled_from(["kind", "actor", "at", "reason"]), json_values),
    json_values | st.dictionaries(st.sampled_from(["status", "text", "error"]), json_values),
    json_values,
)
def test_a_record_with_parts_replaced_by_any_json_loads_or_is_corrupt(
    replaced, decision, result, votes
):
    """A record with fields, decision, result or votes swapped for any JSON: loads or is corrupt."""
    record = {**_valid_record(), **replaced}
    _assert_loads_or_is_corrupt(
        record, status="approved", decision=decision, result=result, votes=votes
    )


@settings(max_examples=50, deadline=None, database=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "approvers",
                "approver_groups",
                "allow_self_approval",
                "approvals_required",
                "editable",
                "reason_required",
                "on_reject",
            ]
        ),
        json_values,
    )
)
def test_a_policy_with_fields_replaced_by_any_json_loads_or_is_corrupt(replaced):
    """Whatever JSON sits in the policy's fields, loading raises nothing but CorruptRecord."""
    record = _valid_record()
    record["policy"] = {**record["policy"], **replaced}
    _assert_loads_or_is_corrupt(record)


def test_the_stored_record_leaves_out_what_holds_nothing_and_reads_back_the_same():
    """Redis keeps a record per waiting approval: its nulls, empty lists and false flags are
    not stored, and the approval read back from it is the one that was stored."""
    for approval in (make_approval(), make_approval(summary="s", requested_by="U1")):
        stored = json.loads(approval.stored_record())
        assert None not in stored.values() and None not in stored["policy"].values()
        assert not {"asynchronous", "external", "secret_arguments", "run_id"} & set(stored)
        assert len(approval.stored_record()) < len(json.dumps(approval.record()))
        assert _load(stored) == approval
        assert _load(json.loads(json.dumps(approval.record()))) == approval  # older records


# --- a gate's options ----------------------------------------------------------------------

#: A record as the previous version stored it in Redis (``stored_record``): the policy nested
#: without its defaults, the reminder and escalation times beside it, and the gate of a tool
#: gated from outside its code in that version's form (options read at a decision nested in
#: ``policy``, ``waits_forever`` beside ``expires_in``).
PREVIOUS_RECORD = (
    '{"id":"a1b2c3d4e5f60718","agent":"cleanup-bot","model_id":"scripted","tool_name":'
    '"delete_path","tool_call_id":"tc_1","arguments":{"path":"build/app.o"},"tools":[{"name":'
    '"delete_path","path":"vendor:delete_path","schema":{"type":"object"},"gate":{"channel":'
    'null,"summary":"Delete {path}","expires_in":null,"policy":{"approvers":["UALICE"],'
    '"approver_groups":null,"allow_self_approval":false,"approvals_required":1,"editable":'
    'null,"reason_required":false,"on_reject":"stop","webhook":null,"grantable":true},'
    '"waits_forever":true,"remind_after":60,"escalate_after":null,"escalate_to":["S0SRE"]}}],'
    '"channel":"C0CARDS","summary":"Delete build/app.o","siblings":[],"chain_limit":25,'
    '"created_at":1700000000.0,"expires_at":0.0,"policy":{"approvers":["UALICE"],'
    '"approvals_required":2,"editable":[],"reason_required":true,"on_reject":"stop","webhook":'
    '"https://hooks.example/a","grantable":false},"remind_after":60.0,"escalate_after":300.0,'
    '"escalate_to":["S0SRE"]}'
)


def test_a_record_stored_by_the_previous_version_loads_with_its_options():
    """An approval waiting in Redis across the upgrade keeps who may decide and how, its
    reminder and escalation times, and the gate its tool is put back with."""
    from approvals.calls.gate import gate_from_dict

    approval = _load(json.loads(PREVIOUS_RECORD))
    assert approval.policy == GateOptions(
        approvers=["UALICE"],
        approvals_required=2,
        editable=[],
        reason_required=True,
        on_reject="stop",
        webhook="https://hooks.example/a",
        grantable=False,
    )
    assert (approval.remind_after, approval.escalate_after) == (60.0, 300.0)
    assert approval.escalate_to == ("S0SRE",)
    gate = approval.tool.gate
    assert gate is not None
    assert gate_from_dict(gate).options == GateOptions(
        summary="Delete {path}",
        expires_in=None,
        approvers=["UALICE"],
        on_reject="stop",
        remind_after=60,
        escalate_to=["S0SRE"],
    )
    assert _load(json.loads(approval.stored_record())) == approval


def _every_option_set() -> GateOptions:
    """Options none of which holds its default."""
    return GateOptions(
        channel="C0OPS",
        summary="Delete {path}",
        editable=["path"],
        reason_required=True,
        on_reject="stop",
        expires_in=600,
        approvers=["UALICE"],
        approver_groups=[],
        allow_self_approval=True,
        approvals_required=2,
        webhook="https://hooks.example/a",
        grantable=False,
        remind_after=0,
        escalate_after=1.5,
        escalate_to=["C0ESC", "S0SRE"],
        fingerprint="tests.agents.tools:schema_head",
    )


def test_every_option_survives_its_json_form_and_defaults_are_left_out_only_when_asked():
    """options_to_dict writes every option (None kept apart from an empty list), JSON keeps
    it, and options_from_dict reads back the same options; sparse leaves the defaults out."""
    options = _every_option_set()
    assert set(OPTIONS) == {f.name for f in attrs.fields(GateOptions)}
    data = json.loads(json.dumps(options_to_dict(options)))
    assert set(data) == set(OPTIONS) - {"preview"} and data["approver_groups"] == []
    assert options_from_dict(data) == options
    assert options_to_dict(GateOptions(), sparse=True) == {}
    assert options_from_dict({}) == GateOptions()


def test_a_preview_function_is_code_not_data():
    """``preview=`` takes a function (anything else is a TypeError) and its JSON form leaves
    it out: the tool's own module gives it to the worker again."""
    options = GateOptions(preview=lambda path: path)
    assert "preview" not in options_to_dict(options)
    assert options.policy.preview is None
    with pytest.raises(TypeError, match="preview must be a function or None"):
        GateOptions(preview="not code")  # type: ignore[arg-type]


def test_expires_in_tells_the_setting_from_never():
    """Left out, the setting applies; None (JSON null) waits indefinitely; both survive."""
    assert "expires_in" not in options_to_dict(GateOptions())
    assert options_from_dict({}).expires_in is UNSET
    forever = options_to_dict(GateOptions(expires_in=None))
    assert forever["expires_in"] is None
    assert options_from_dict(json.loads(json.dumps(forever))).expires_in is None


def test_an_approval_carries_only_the_options_read_when_someone_decides():
    """Options spent at the pause (channel, summary, expiry, reminders, escalation) are the
    approval's own fields: its policy holds the others, and its record stores those."""
    carried = _every_option_set().policy
    spent = {"channel", "summary", "expires_in", "remind_after", "escalate_after", "escalate_to",
             "preview"}  # fmt: skip
    kept = {name for name in OPTIONS if getattr(carried, name) != getattr(GateOptions(), name)}
    assert kept == set(OPTIONS) - spent == set(CARRIED)
    record = make_approval(policy=carried).record()
    assert set(record["policy"]) == set(CARRIED)
    assert _load(json.loads(json.dumps(record))).policy == carried


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"approvals_required": 0}, ValueError, "approvals_required"),
        ({"approvals_required": True}, TypeError, "approvals_required"),
        ({"approvals_required": 1.5}, TypeError, "approvals_required"),
        ({"expires_in": 0}, ValueError, "expires_in"),
        ({"expires_in": "60"}, TypeError, "expires_in"),
        ({"expires_in": float("inf")}, TypeError, "expires_in"),
        ({"remind_after": -1}, ValueError, "remind_after"),
        ({"escalate_after": float("nan")}, TypeError, "escalate_after"),
        ({"channel": ""}, ValueError, "channel"),
        ({"channel": 7}, TypeError, "channel"),
        ({"escalate_to": "S0SRE"}, TypeError, "escalate_to"),
        ({"approvers": [1]}, TypeError, "approvers"),
        ({"on_reject": "later"}, ValueError, "later"),
        ({"grantable": "yes"}, TypeError, "grantable"),
        ({"webhook": b"https://x"}, TypeError, "webhook"),
        ({"reviewers": ["U1"]}, TypeError, "reviewers"),
    ],
)
def test_gate_options_refuse_what_no_option_takes(options, error, message):
    """A wrong type is a TypeError, a value out of bounds a ValueError, each naming the option."""
    with pytest.raises(error, match=message):
        GateOptions(**options)


@pytest.mark.parametrize(
    "data",
    [
        {"approvals_required": "2"},
        {"approvals_required": 0},
        {"approvers": {"UALICE": True}},
        {"approvers": "UALICE"},
        {"escalate_to": [None]},
        {"expires_in": 1e999},
        {"expires_in": 10**400},
        {"remind_after": -5},
        {"on_reject": 1},
        {"grantable": 0},
        ["channel"],
        "options",
    ],
)
def test_recorded_options_that_are_no_options_are_corrupt(data):
    """Redis is a trust boundary: anything but options of the right types is CorruptRecord."""
    with pytest.raises(CorruptRecord):
        options_from_dict(data)
