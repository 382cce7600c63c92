"""The approval record: its state machine and loading it back from untrusted JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals.errors import CorruptRecord
from approvals.models import (
    DECIDED,
    FINISHED,
    TRANSITIONS,
    Approval,
    DecisionKind,
    RunResult,
    SiblingResult,
    Status,
    approval_from_parts,
    decision_to_dict,
    result_to_dict,
    sources_of,
)
from tests.factories import CREATED_AT, make_approval, make_decision

# --- the state machine ---------------------------------------------------------------------


def test_every_status_has_a_row_in_the_table():
    """TRANSITIONS states the moves of every status, none forgotten."""
    assert set(TRANSITIONS) == set(Status)


def test_pending_may_only_be_decided():
    """A pending approval can only become approved, edited or rejected."""
    assert TRANSITIONS[Status.PENDING] == {Status.APPROVED, Status.EDITED, Status.REJECTED}


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


def test_sources_of_a_decision_is_pending_only():
    """Only a pending approval can be approved (so two clicks cannot both win)."""
    for decided in DECIDED:
        assert sources_of(decided) == [Status.PENDING]


def test_sources_of_running_are_the_decided_statuses():
    """The worker may start any decided approval, and nothing else."""
    assert set(sources_of(Status.RUNNING)) == DECIDED


def test_sources_of_pending_is_empty():
    """Nothing ever goes back to pending."""
    assert sources_of(Status.PENDING) == []


def test_decision_kinds_map_to_their_statuses():
    """Each kind of decision moves the approval to its own status."""
    assert {kind: kind.status for kind in DecisionKind} == {
        DecisionKind.APPROVE: Status.APPROVED,
        DecisionKind.EDIT: Status.EDITED,
        DecisionKind.REJECT: Status.REJECTED,
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
    }


def _load(record: Any, **parts: Any) -> Approval:
    values = {"status": "pending", "card_ts": None, "decision": None, "result": None, **parts}
    return approval_from_parts(record, **values)


def _valid_record() -> dict[str, Any]:
    return json.loads(json.dumps(make_approval().record()))


def test_record_leaves_out_the_mutable_parts():
    """The immutable record holds no status, card, decision or result (they live apart)."""
    record = make_approval().record()
    assert not {"status", "card_ts", "decision", "result"} & set(record)


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
        result=RunResult(Status.COMPLETED, text="Deleted."),
    )
    assert approval_from_parts(**_parts(approval)) == approval


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
)
def test_a_record_with_parts_replaced_by_any_json_loads_or_is_corrupt(replaced, decision, result):
    """A valid record with fields, decision or result swapped for any JSON: loads or is corrupt."""
    record = {**_valid_record(), **replaced}
    _assert_loads_or_is_corrupt(record, status="approved", decision=decision, result=result)
