"""The Edit, Reject and Respond modals: built as plain dicts, and their submissions read back."""

from __future__ import annotations

import json

import pytest

from approvals.bot.modals import (
    EDIT_VIEW,
    REASON_BLOCK,
    REJECT_VIEW,
    RESPOND_VIEW,
    RESPONSE_BLOCK,
    VALUE_ACTION,
    block_for,
    build_edit_modal,
    build_notice_modal,
    build_reject_modal,
    build_respond_modal,
    read_edit_submission,
    read_text,
)
from approvals.calls.tools import tool_refs
from approvals.models import OnReject, Policy, ToolRef
from approvals.slack.limits import BLOCK_ID, MODAL_BLOCKS, MODAL_TITLE, PLAIN_TEXT_INPUT
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


def _element(view, name):
    return _inputs(view)[block_for(name)]["element"]


def _initial(view, name):
    """What an input shows before anyone types: its text, or its selected option's value."""
    element = _element(view, name)
    if element["type"] == "static_select":
        option = element.get("initial_option")
        return None if option is None else option["value"]
    return element.get("initial_value")


def _field(element_type, raw):
    """One input's entry in Slack's view.state.values, as Slack sends it for that element."""
    if element_type == "static_select":
        selected = (
            None if raw is None else {"text": {"type": "plain_text", "text": raw}, "value": raw}
        )
        return {"type": element_type, "selected_option": selected}
    return {"type": element_type, "value": raw}


def _state_for(approval, **raw):
    """Slack's view.state.values for the approval's modal (None for an input left empty)."""
    types = {bid: b["element"]["type"] for bid, b in _inputs(build_edit_modal(approval)).items()}
    return {
        block_for(name): {
            VALUE_ACTION: _field(types.get(block_for(name), "plain_text_input"), value)
        }
        for name, value in raw.items()
    }


def _state(**raw):
    """Slack's view.state.values for the ``configure`` modal."""
    return _state_for(_approval(FULL), **raw)


def _untouched(view):
    """What Slack sends when the modal is submitted exactly as it was opened."""
    return {
        block_id: {
            VALUE_ACTION: (
                {"type": "static_select", "selected_option": block["element"].get("initial_option")}
                if block["element"]["type"] == "static_select"
                else {
                    "type": block["element"]["type"],
                    "value": block["element"].get("initial_value"),
                }
            )
        }
        for block_id, block in _inputs(view).items()
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
    """Strings and numbers as is, bools as the selected option, objects and lists as JSON."""
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
    """Required arguments are not optional; object and list arguments say they take JSON."""
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
        "count",
        "recursive",
        "options (JSON)",
        "note",
        "tags (JSON)",
    ]


def test_edit_modal_inputs_accept_up_to_slacks_limit():
    """Every text input allows the longest value Slack accepts."""
    inputs = _inputs(build_edit_modal(_approval(FULL))).values()
    texts = [b for b in inputs if b["element"]["type"] == "plain_text_input"]
    assert len(texts) == 4
    assert {b["element"]["max_length"] for b in texts} == {PLAIN_TEXT_INPUT}


def test_edit_modal_shows_arguments_the_schema_does_not_list():
    """An argument the model proposed outside the schema still gets a (JSON) input."""
    view = build_edit_modal(_approval({**FULL, "extra": [1]}))
    block = _inputs(view)[block_for("extra")]
    assert block["label"]["text"] == "extra (JSON)"
    assert json.loads(block["element"]["initial_value"]) == [1]


def test_an_argument_too_long_to_edit_is_shown_read_only():
    """A value longer than Slack's input limit is not offered for editing, only shown."""
    view = build_edit_modal(_approval({**FULL, "path": "p" * (PLAIN_TEXT_INPUT + 1)}))
    assert block_for("path") not in _inputs(view)
    (section,) = [b for b in view["blocks"] if "Not editable" in b.get("text", {}).get("text", "")]
    assert section["type"] == "section"
    text = section["text"]["text"]
    assert text.startswith("*Not editable, runs as proposed:*")
    assert '"path": "ppp' in text
    assert len(text) <= 3000


def _schema_tool(properties, required=()):
    """An approval of a tool described only by its JSON schema."""
    schema = {"type": "object", "properties": properties, "required": list(required)}
    ref = ToolRef("configure", "tests.bot.test_modals:configure", schema)
    return lambda arguments, **kw: make_approval(
        tool_name="configure", tools=[ref], arguments=arguments, **kw
    )


def test_edit_modal_stays_within_the_block_limit():
    """A tool with hundreds of arguments still gives a modal Slack accepts."""
    make = _schema_tool({f"arg{i}": {"type": "integer"} for i in range(300)})
    view = build_edit_modal(make({f"arg{i}": i for i in range(300)}))
    assert len(view["blocks"]) <= MODAL_BLOCKS
    assert _inputs(view)


def test_block_ids_of_long_argument_names_fit():
    """Block ids stay within Slack's limit, whatever the argument's name."""
    make = _schema_tool({"n" * 400: {"type": "integer"}, "path": {"type": "string"}})
    view = build_edit_modal(make({"n" * 400: 1, "path": "x"}))
    assert block_for("n" * 400) in _inputs(view)
    assert all(len(b["block_id"]) <= BLOCK_ID for b in view["blocks"] if "block_id" in b)


# --- reading the edit submission --------------------------------------------------------------


def test_submission_is_parsed_by_kind():
    """Text as typed, numbers as numbers, selects and JSON as JSON; emptied optional text: null."""
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
        _approval(FULL), _state(path="src", options="{depth: 2", tags='["z"]')
    )
    assert list(errors) == [block_for("options")]
    assert errors[block_for("options")].startswith("Not valid JSON")
    assert "options" not in arguments
    assert arguments["tags"] == ["z"]


def test_an_invalid_number_is_reported_under_its_block():
    """An unreadable number is reported on its own input, and not passed on."""
    arguments, errors = read_edit_submission(
        _approval(FULL), _state(path="src", count="five", tags='["z"]')
    )
    assert list(errors) == [block_for("count")]
    assert errors[block_for("count")].startswith("Not a valid integer")
    assert "count" not in arguments
    assert arguments["tags"] == ["z"]


@pytest.mark.parametrize("name", ["count", "tags"])
@pytest.mark.parametrize("raw", ["", "   ", None])
def test_an_empty_json_input_leaves_the_argument_out(raw, name):
    """An empty number or JSON input is not an argument (a required one then fails validation)."""
    arguments, errors = read_edit_submission(_approval(FULL), _state(**{name: raw}))
    assert name not in arguments
    assert errors == {}


def test_a_select_left_empty_leaves_the_argument_out():
    """A select with nothing chosen is not an argument."""
    arguments, errors = read_edit_submission(_approval(FULL), _state(recursive=None))
    assert "recursive" not in arguments
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
    assert read_edit_submission(approval, _untouched(view)) == (proposed, {})


# --- the reject modal ---------------------------------------------------------------------------


def test_reject_modal_requires_a_reason_when_the_gate_says_so():
    """With reason_required the reason input is not optional."""
    view = build_reject_modal(make_approval(policy=Policy(reason_required=True)))
    (reason,) = [b for b in view["blocks"] if b["type"] == "input"]
    assert reason["block_id"] == REASON_BLOCK
    assert reason["optional"] is False


@pytest.mark.parametrize(
    ("on_reject", "says"),
    [(OnReject.RESUME, "can try something else"), (OnReject.STOP, "The run stops here.")],
)
def test_reject_modal_says_what_happens_next(on_reject, says):
    """The reject modal tells the reviewer whether the agent re-plans or the run ends."""
    view = build_reject_modal(make_approval(policy=Policy(on_reject=on_reject)))
    assert says in view["blocks"][0]["text"]["text"]


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


# --- the respond modal ------------------------------------------------------------------------


def test_respond_modal_asks_for_the_result_the_agent_receives():
    """The respond modal identifies the approval and has one required, multiline text input."""
    approval = make_approval()
    view = build_respond_modal(approval)
    assert view["type"] == "modal"
    assert view["callback_id"] == RESPOND_VIEW
    assert view["private_metadata"] == approval.id
    assert len(view["title"]["text"]) <= MODAL_TITLE
    (response,) = [b for b in view["blocks"] if b["type"] == "input"]
    assert response["block_id"] == RESPONSE_BLOCK
    assert response["optional"] is False
    assert response["element"]["action_id"] == VALUE_ACTION
    assert response["element"]["type"] == "plain_text_input"
    assert response["element"]["multiline"] is True
    assert response["element"]["max_length"] == PLAIN_TEXT_INPUT


def test_respond_modal_says_the_tool_will_not_run_and_shows_the_call():
    """The intro says the tool does not run and shows the proposed arguments."""
    intro = build_respond_modal(make_approval())["blocks"][0]["text"]["text"]
    assert intro.startswith("`delete_path` will not run.")
    assert '"path": "build/app.o"' in intro


def test_respond_modal_with_huge_arguments_fits():
    """The arguments shown in the respond modal are cut to fit a section."""
    view = build_respond_modal(make_approval(arguments={"content": "x" * 100_000}))
    assert len(view["blocks"][0]["text"]["text"]) <= 3000


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("  The file was already deleted.\n", "The file was already deleted."),
        ("line one\nline two", "line one\nline two"),
        ("", None),
        ("  \n ", None),
        (None, None),
    ],
)
def test_the_response_is_read_trimmed(raw, text):
    """read_text gives the response trimmed, keeping inner lines; blank is None."""
    state = {RESPONSE_BLOCK: {VALUE_ACTION: {"type": "plain_text_input", "value": raw}}}
    assert read_text(state, RESPONSE_BLOCK) == text


def test_read_text_reads_only_its_own_block():
    """A reason typed in another block is not the response."""
    state = {REASON_BLOCK: {VALUE_ACTION: {"type": "plain_text_input", "value": "why"}}}
    assert read_text(state, RESPONSE_BLOCK) is None
    assert read_text(state, REASON_BLOCK) == "why"


def test_notice_modal_only_says_something():
    """A notice replaces a form that can no longer be submitted: no submit button."""
    view = build_notice_modal("Already approved by <@UBOB>")
    assert view["type"] == "modal"
    assert "submit" not in view
    assert view["blocks"] == [
        {"type": "section", "text": {"type": "mrkdwn", "text": "Already approved by <@UBOB>"}}
    ]
