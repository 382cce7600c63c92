"""The Edit and Reject modals: built as plain dicts, and their submissions read back."""

from __future__ import annotations

import json

import pytest

from approvals.limits import BLOCK_ID, MODAL_BLOCKS, MODAL_TITLE, PLAIN_TEXT_INPUT
from approvals.tools import tool_refs
from bot.modals import (
    EDIT_VIEW,
    REASON_BLOCK,
    REJECT_VIEW,
    VALUE_ACTION,
    block_for,
    build_edit_modal,
    build_notice_modal,
    build_reject_modal,
    read_edit_submission,
    read_text,
)
from tests.factories import make_approval


def configure(
    path: str,
    count: int,
    recursive: bool = False,
    options: dict | None = None,
    note: str | None = None,
    tags: list[str] = ["a"],  # noqa: B006 - only its schema is used
) -> str:
    """Configure something (one argument of each kind the modal handles)."""
    return path


CONFIGURE = tool_refs([configure])[0]
NAMES = ["path", "count", "recursive", "options", "note", "tags"]
FULL = {
    "path": "build",
    "count": 3,
    "recursive": True,
    "options": {"depth": 2},
    "note": "hi",
    "tags": ["x", "y"],
}


def _approval(arguments):
    return make_approval(tool_name="configure", tools=[CONFIGURE], arguments=arguments)


def _inputs(view):
    return {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}


def _initial(view, name):
    return _inputs(view)[block_for(name)]["element"].get("initial_value")


def _state(**raw):
    """Slack's view.state.values for text inputs (None for an input left empty)."""
    return {
        block_for(name): {VALUE_ACTION: {"type": "plain_text_input", "value": value}}
        for name, value in raw.items()
    }


# --- the edit modal -------------------------------------------------------------------------------


def test_edit_modal_identifies_the_approval():
    """The modal carries the approval id and its callback, with a title Slack accepts."""
    view = build_edit_modal(_approval(FULL))
    assert view["type"] == "modal"
    assert view["callback_id"] == EDIT_VIEW
    assert view["private_metadata"] == "a1b2c3d4e5f60718"
    assert len(view["title"]["text"]) <= MODAL_TITLE
    assert view["submit"]["text"] == "Approve"
    assert "`configure`" in view["blocks"][0]["text"]["text"]


def test_edit_modal_has_one_input_per_argument_in_schema_order():
    """Each schema property gets exactly one input, in the tool's order."""
    view = build_edit_modal(_approval(FULL))
    assert list(_inputs(view)) == [block_for(name) for name in NAMES]
    assert all(b["element"]["action_id"] == VALUE_ACTION for b in _inputs(view).values())


def test_edit_modal_prefills_what_the_model_proposed():
    """Strings are shown as is; numbers, bools, objects and lists as JSON."""
    view = build_edit_modal(_approval(FULL))
    assert _initial(view, "path") == "build"
    assert _initial(view, "note") == "hi"
    assert _initial(view, "count") == "3"
    assert _initial(view, "recursive") == "true"
    assert json.loads(_initial(view, "options")) == {"depth": 2}
    assert json.loads(_initial(view, "tags")) == ["x", "y"]


def test_edit_modal_prefills_defaults_of_arguments_left_out():
    """An argument the model did not pass shows the tool's default; a None default shows nothing."""
    view = build_edit_modal(_approval({"path": "build", "count": 3}))
    assert _initial(view, "recursive") == "false"
    assert json.loads(_initial(view, "tags")) == ["a"]
    assert _initial(view, "options") is None
    assert _initial(view, "note") is None


def test_edit_modal_marks_required_and_json_inputs():
    """Required arguments are not optional; non-text arguments say they take JSON."""
    inputs = _inputs(build_edit_modal(_approval(FULL)))
    optional = {name: inputs[block_for(name)]["optional"] for name in NAMES}
    assert optional == {
        "path": False,
        "count": False,
        "recursive": True,
        "options": True,
        "note": True,
        "tags": True,
    }
    labels = [inputs[block_for(name)]["label"]["text"] for name in NAMES]
    assert labels == [
        "path",
        "count (JSON)",
        "recursive (JSON)",
        "options (JSON)",
        "note",
        "tags (JSON)",
    ]


def test_edit_modal_inputs_accept_up_to_slacks_limit():
    """Every input allows the longest value Slack accepts."""
    inputs = _inputs(build_edit_modal(_approval(FULL))).values()
    assert {b["element"]["max_length"] for b in inputs} == {PLAIN_TEXT_INPUT}


def test_edit_modal_shows_arguments_the_schema_does_not_list():
    """An argument the model proposed outside the schema still gets a (JSON) input."""
    view = build_edit_modal(_approval({**FULL, "extra": [1]}))
    block = _inputs(view)[block_for("extra")]
    assert block["label"]["text"] == "extra (JSON)"
    assert json.loads(block["element"]["initial_value"]) == [1]


def test_an_argument_too_long_to_edit_is_shown_read_only():
    """A value longer than Slack's input limit is not offered for editing."""
    view = build_edit_modal(_approval({**FULL, "path": "p" * (PLAIN_TEXT_INPUT + 1)}))
    assert block_for("path") not in _inputs(view)
    (section,) = [b for b in view["blocks"] if b.get("block_id") == block_for("path")]
    assert section["type"] == "section"
    assert "too long to edit" in section["text"]["text"]


def test_edit_modal_stays_within_the_block_limit():
    """A tool with hundreds of arguments still gives a modal Slack accepts."""
    arguments = {f"arg{i}": i for i in range(300)}
    view = build_edit_modal(_approval(arguments))
    assert len(view["blocks"]) <= MODAL_BLOCKS


def test_block_ids_of_long_argument_names_fit():
    """Block ids stay within Slack's limit, whatever the argument's name."""
    view = build_edit_modal(_approval({**FULL, "n" * 400: 1}))
    assert all(len(b["block_id"]) <= BLOCK_ID for b in view["blocks"] if "block_id" in b)


# --- reading the edit submission --------------------------------------------------------------


def test_submission_is_parsed_by_kind():
    """Text inputs are read as typed, others as JSON, and an emptied optional text is null."""
    state = _state(
        path="src",
        count="5",
        recursive="false",
        options='{"a": 1}',
        note="",
        tags='["z"]',
    )
    arguments, errors = read_edit_submission(_approval(FULL), state)
    assert errors == {}
    assert arguments == {
        "path": "src",
        "count": 5,
        "recursive": False,
        "options": {"a": 1},
        "note": None,
        "tags": ["z"],
    }


@pytest.mark.parametrize("typed", ['"quoted"', "123", "true", "  spaced  "])
def test_text_arguments_are_taken_as_typed(typed):
    """A text argument that looks like JSON is still the exact text typed."""
    arguments, _ = read_edit_submission(_approval(FULL), _state(path=typed))
    assert arguments["path"] == typed


def test_an_emptied_text_input_is_the_empty_string():
    """Clearing a required text input gives "" (Slack sends null for an empty input)."""
    arguments, _ = read_edit_submission(_approval(FULL), _state(path=None))
    assert arguments["path"] == ""


def test_invalid_json_is_reported_under_its_block():
    """Unparseable JSON is reported on the input it came from, and not passed on."""
    arguments, errors = read_edit_submission(
        _approval(FULL), _state(path="src", count="five", tags='["z"]')
    )
    assert list(errors) == [block_for("count")]
    assert errors[block_for("count")].startswith("Not valid JSON")
    assert "count" not in arguments
    assert arguments["tags"] == ["z"]


@pytest.mark.parametrize("raw", ["", "   ", None])
def test_an_empty_json_input_leaves_the_argument_out(raw):
    """An empty JSON input is not an argument (a required one then fails validation)."""
    arguments, errors = read_edit_submission(_approval(FULL), _state(count=raw))
    assert "count" not in arguments
    assert errors == {}


def test_an_argument_too_long_to_edit_is_kept_as_proposed():
    """The read-only argument comes back exactly as the model proposed it."""
    long_path = "p" * (PLAIN_TEXT_INPUT + 1)
    approval = _approval({**FULL, "path": long_path})
    state = _state(count="4")  # Slack sends no state for the read-only section
    arguments, errors = read_edit_submission(approval, state)
    assert errors == {}
    assert arguments["path"] == long_path
    assert arguments["count"] == 4


def test_a_default_left_untouched_is_not_an_edit():
    """A prefilled default the model relied on is not sent as an edited argument."""
    approval = _approval({"path": "build", "count": 3})
    arguments, _ = read_edit_submission(
        approval, _state(path="build", count="3", recursive="false", tags='[\n "a"\n]')
    )
    assert arguments == {"path": "build", "count": 3}


def test_a_changed_default_is_an_edit():
    """Changing a prefilled default sends the new value."""
    approval = _approval({"path": "build", "count": 3})
    arguments, _ = read_edit_submission(approval, _state(path="build", count="3", recursive="true"))
    assert arguments == {"path": "build", "count": 3, "recursive": True}


@pytest.mark.parametrize("proposed", [FULL, {"path": "build", "count": 3}])
def test_the_round_trip_of_an_untouched_modal_gives_the_proposed_arguments(proposed):
    """Submitting the modal as prefilled approves exactly what the model proposed."""
    approval = _approval(proposed)
    view = build_edit_modal(approval)
    state = {
        block_id: {VALUE_ACTION: {"value": block["element"].get("initial_value")}}
        for block_id, block in _inputs(view).items()
    }
    assert read_edit_submission(approval, state) == (proposed, {})


# --- the reject modal ---------------------------------------------------------------------------


def test_reject_modal_asks_for_an_optional_reason():
    """The reject modal identifies the approval and has one optional, multiline reason input."""
    view = build_reject_modal(make_approval())
    assert view["callback_id"] == REJECT_VIEW
    assert view["private_metadata"] == "a1b2c3d4e5f60718"
    assert len(view["title"]["text"]) <= MODAL_TITLE
    (reason,) = [b for b in view["blocks"] if b["type"] == "input"]
    assert reason["block_id"] == REASON_BLOCK
    assert reason["optional"] is True
    assert reason["element"]["action_id"] == VALUE_ACTION
    assert reason["element"]["multiline"] is True
    assert "`delete_path` from cleanup-bot" in view["blocks"][0]["text"]["text"]


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ({REASON_BLOCK: {VALUE_ACTION: {"value": "  wrong folder \n"}}}, "wrong folder"),
        ({REASON_BLOCK: {VALUE_ACTION: {"value": ""}}}, None),
        ({REASON_BLOCK: {VALUE_ACTION: {"value": " \n\t "}}}, None),
        ({REASON_BLOCK: {VALUE_ACTION: {"value": None}}}, None),
        ({}, None),
    ],
)
def test_reject_reason_is_trimmed_and_empty_is_none(state, reason):
    """The reason is trimmed; an empty or blank one is no reason."""
    assert read_text(state, REASON_BLOCK) == reason


def test_notice_modal_only_says_something():
    """A notice replaces a form that can no longer be submitted: no submit button."""
    view = build_notice_modal("Already approved by <@UBOB>")
    assert view["type"] == "modal"
    assert "submit" not in view
    assert view["blocks"] == [
        {"type": "section", "text": {"type": "mrkdwn", "text": "Already approved by <@UBOB>"}}
    ]
