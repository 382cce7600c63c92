"""Arguments checked against a tool's JSON schema: per-argument messages that never repeat the
value, and patterns that cannot be made to run for long."""

from __future__ import annotations

import time

import pytest

from approvals.calls.tools import describe_tool
from approvals.decisions.schemas import validate_arguments
from approvals.errors import InvalidArguments
from tests.agents.tools import delete_path, send_email

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
    """InvalidArguments says which argument is wrong and why, without repeating the value."""
    with pytest.raises(InvalidArguments, match="recursive: the value is not of type 'boolean'"):
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


def test_a_refusal_never_repeats_the_value():
    """A value that does not fit (a secret, say) is not echoed in the message."""
    schema = {"type": "object", "properties": {"token": {"type": "integer", "maxLength": 3}}}
    errors = _errors(schema, {"token": "xoxb-very-secret-value"})
    assert "xoxb" not in errors["token"]
    assert "not of type 'integer'" in errors["token"]


def test_a_catastrophic_pattern_answers_at_once():
    """A caller's schema cannot hold a thread: ^(a+)+$ against a long non-match is linear."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}}
    started = time.monotonic()
    errors = _errors(schema, {"name": "a" * 5000 + "!"})
    assert time.monotonic() - started < 1.0
    assert errors["name"] == "does not match '^(a+)+$'"
    assert validate_arguments(schema, {"name": "aaaa"}) is None


def test_pattern_properties_run_on_the_same_engine():
    """patternProperties match names in linear time, and check the values they match."""
    schema = {"type": "object", "patternProperties": {"^(x+)+$": {"type": "integer"}}}
    assert validate_arguments(schema, {"xxx": 1, "y" * 3000 + "!": "free"}) is None
    assert set(_errors(schema, {"xx": "not a number"})) == {"xx"}


@pytest.mark.parametrize("pattern", ["(?=a)b", "(a)\\1"])
def test_a_pattern_needing_backtracking_makes_the_schema_invalid(pattern):
    """A lookaround or backreference cannot run in linear time: the schema is refused as such."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "pattern": pattern}}}
    errors = _errors(schema, {"name": "ab"})
    assert "schema is invalid" in errors["_"]
    assert "linear time" in errors["_"]
