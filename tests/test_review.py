"""Reviewing a decision: edited arguments checked against the tool's schema, and who may decide."""

from __future__ import annotations

import pytest

from approvals.config import Settings
from approvals.errors import InvalidArguments
from approvals.models import Policy
from approvals.review import refusal, validate_arguments
from approvals.tools import describe_tool
from tests.agents.tools import delete_path, send_email
from tests.factories import make_approval

DELETE = describe_tool(delete_path).input_schema
EMAIL = describe_tool(send_email).input_schema


def _errors(schema, arguments):
    with pytest.raises(InvalidArguments) as info:
        validate_arguments(schema, arguments)
    return info.value.errors


@pytest.mark.parametrize(
    "arguments",
    [{"path": "build/app.o"}, {"path": "build", "recursive": True}, {"path": ""}],
)
def test_valid_arguments_pass(arguments):
    """Arguments that match the tool's schema are accepted."""
    assert validate_arguments(DELETE, arguments) is None


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        ({"path": 3}, "path"),
        ({"path": None}, "path"),
        ({"path": "build", "recursive": "yes"}, "recursive"),
        ({"path": "build", "recursive": 1}, "recursive"),
    ],
)
def test_a_wrong_type_is_reported_under_the_argument(arguments, name):
    """A value of the wrong type is reported under that argument's name, and only there."""
    assert set(_errors(DELETE, arguments)) == {name}


@pytest.mark.parametrize("arguments", [{}, {"recursive": True}])
def test_a_missing_required_argument_is_reported_under_its_name(arguments):
    """A required argument left out is reported under its own name."""
    errors = _errors(DELETE, arguments)
    assert set(errors) == {"path"}
    assert "'path' is a required property" in errors["path"]


def test_each_missing_required_argument_is_reported_under_its_own_name():
    """Each missing required argument gets its own entry, with its own message."""
    assert _errors(EMAIL, {"body": "hi"}) == {
        "to": "'to' is a required property",
        "subject": "'subject' is a required property",
    }


def test_several_bad_arguments_are_each_reported():
    """Two wrong arguments give two entries, so each input can show its own error."""
    assert set(_errors(EMAIL, {"to": 1, "subject": ["x"]})) == {"to", "subject"}


def test_the_error_message_is_readable():
    """InvalidArguments says which argument is wrong and why."""
    with pytest.raises(InvalidArguments, match="recursive: 'yes' is not of type 'boolean'"):
        validate_arguments(DELETE, {"path": "x", "recursive": "yes"})


def test_pydantic_schemas_allow_extra_properties():
    """llm's schemas (from pydantic) do not forbid extra properties, so extras are not refused."""
    assert "additionalProperties" not in DELETE
    assert validate_arguments(DELETE, {"path": "build", "force": True}) is None


def test_extra_properties_are_refused_when_the_schema_forbids_them():
    """A schema with additionalProperties false refuses an extra argument and names it."""
    strict = {**DELETE, "additionalProperties": False}
    with pytest.raises(InvalidArguments, match="force"):
        validate_arguments(strict, {"path": "build", "force": True})


@pytest.mark.parametrize("arguments", [["build"], "build", None])
def test_arguments_that_are_not_an_object_are_refused(arguments):
    """Edited arguments must be a JSON object."""
    assert _errors(DELETE, arguments)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"path": {"type": "no-such-type"}}},
        {"type": "object", "properties": {"path": {"$ref": "#/$defs/Missing"}}},
    ],
)
def test_a_broken_schema_is_reported_as_invalid_arguments(schema):
    """A tool whose own schema is invalid cannot be edited; InvalidArguments says why."""
    errors = _errors(schema, {"path": "x"})
    assert "schema is invalid" in errors["_"]


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
