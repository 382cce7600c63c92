"""The typed Edit modal: one input per argument, chosen from the tool's JSON schema, read back."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, Literal

import pytest

from approvals.bot.modals import VALUE_ACTION, block_for, build_edit_modal, read_edit_submission
from approvals.calls.tools import tool_refs
from approvals.decisions.review import check_edit
from approvals.models import Policy, ToolRef
from tests.factories import make_approval


class Color(Enum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Level(int, Enum):
    LOW = 1
    HIGH = 2


def paint(
    wall: str,
    color: Color,
    finish: Literal["matte", "gloss"] = "matte",
    coats: int = 2,
    ratio: float = 0.5,
    primer: bool = False,
    note: str | None = None,
    level: Level = Level.LOW,
    areas: list[str] | None = None,
    spec: dict[str, Any] | None = None,
) -> str:
    """Paint a wall (one argument of each kind the typed edit modal offers)."""
    return wall


PAINT = tool_refs([paint])[0]
PROPOSED = {
    "wall": "north",
    "color": "green",
    "finish": "gloss",
    "coats": 3,
    "ratio": 0.25,
    "primer": True,
    "note": "careful",
    "level": 2,
    "areas": ["top", "left"],
    "spec": {"brand": "acme", "litres": 4},
}
MINIMAL = {"wall": "north", "color": "green"}


def _approval(arguments: dict[str, Any], **overrides: Any):
    return make_approval(tool_name="paint", tools=[PAINT], arguments=arguments, **overrides)


def _inputs(view):
    return {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}


def _block(arguments, name, **overrides):
    return _inputs(build_edit_modal(_approval(arguments, **overrides)))[block_for(name)]


def _element(arguments, name, **overrides):
    return _block(arguments, name, **overrides)["element"]


def _options(element):
    return [(o["text"]["text"], o["value"]) for o in element["options"]]


def _read(approval, **raw):
    """Read a submission where each named input holds ``raw`` as Slack sends it."""
    types = {bid: b["element"]["type"] for bid, b in _inputs(build_edit_modal(approval)).items()}
    state = {}
    for name, value in raw.items():
        kind = types[block_for(name)]
        if kind == "static_select":
            label = {"type": "plain_text", "text": value}
            option = None if value is None else {"text": label, "value": value}
            field = {"type": kind, "selected_option": option}
        else:
            field = {"type": kind, "value": value}
        state[block_for(name)] = {VALUE_ACTION: field}
    return read_edit_submission(approval, state)


def _untouched(view):
    """What Slack sends when the modal is submitted exactly as it was opened."""
    state = {}
    for block_id, block in _inputs(view).items():
        element = block["element"]
        if element["type"] == "static_select":
            field = {"type": "static_select", "selected_option": element.get("initial_option")}
        else:
            field = {"type": element["type"], "value": element.get("initial_value")}
        state[block_id] = {VALUE_ACTION: field}
    return state


# --- which input each argument gets -------------------------------------------------------------


def test_the_enum_typed_argument_is_a_ref_in_the_schema():
    """pydantic puts the Enum under $defs and refers to it, as the modal must follow."""
    assert PAINT.schema["properties"]["color"] == {"$ref": "#/$defs/Color"}
    assert PAINT.schema["$defs"]["Color"]["enum"] == ["red", "green", "blue"]


def test_each_argument_gets_the_input_of_its_type():
    """Text for strings, number inputs for numbers, selects for bools and enums, JSON text else."""
    inputs = _inputs(build_edit_modal(_approval(PROPOSED)))
    kinds = {name: inputs[block_for(name)]["element"]["type"] for name in PROPOSED}
    assert kinds == {
        "wall": "plain_text_input",
        "color": "static_select",
        "finish": "static_select",
        "coats": "number_input",
        "ratio": "number_input",
        "primer": "static_select",
        "note": "plain_text_input",
        "level": "static_select",
        "areas": "plain_text_input",
        "spec": "plain_text_input",
    }
    assert all(b["element"]["action_id"] == VALUE_ACTION for b in inputs.values())


def test_only_object_and_list_arguments_are_labelled_json():
    """Labels are the argument names; only JSON inputs say "(JSON)"."""
    inputs = _inputs(build_edit_modal(_approval(PROPOSED)))
    labels = [b["label"]["text"] for b in inputs.values()]
    assert labels == [*list(PROPOSED)[:8], "areas (JSON)", "spec (JSON)"]


def test_only_required_arguments_are_not_optional():
    """The tool's required arguments must be filled in; the others may be left empty."""
    inputs = _inputs(build_edit_modal(_approval(PROPOSED)))
    required = [name for name in PROPOSED if not inputs[block_for(name)]["optional"]]
    assert required == ["wall", "color"]


# --- string and optional string -------------------------------------------------------------------


def test_a_string_is_a_one_line_text_input_prefilled_as_is():
    """A short string is shown as typed, on one line, up to Slack's input limit."""
    element = _element(PROPOSED, "wall")
    assert element["initial_value"] == "north"
    assert element["multiline"] is False
    assert element["max_length"] == 3000


def test_a_long_string_gets_a_multiline_input():
    """A string longer than a line is edited in a multiline box."""
    element = _element({**PROPOSED, "wall": "w" * 200}, "wall")
    assert element["multiline"] is True
    assert element["initial_value"] == "w" * 200


def test_a_string_is_read_back_exactly_as_typed():
    """Typed text is the argument, spaces and JSON look-alikes included."""
    arguments, errors = _read(_approval(PROPOSED), wall=' "south" ')
    assert errors == {}
    assert arguments["wall"] == ' "south" '


def test_an_optional_string_left_out_shows_nothing():
    """An optional string the model did not pass has no initial value and may stay empty."""
    block = _block(MINIMAL, "note")
    assert block["optional"] is True
    assert block["element"]["type"] == "plain_text_input"
    assert "initial_value" not in block["element"]


@pytest.mark.parametrize(("raw", "value"), [("", None), (None, None), ("keep dry", "keep dry")])
def test_an_optional_string_is_read_back_as_text_or_null(raw, value):
    """An emptied optional string is null; anything typed is the text."""
    arguments, errors = _read(_approval(PROPOSED), note=raw)
    assert errors == {}
    assert arguments["note"] == value


# --- numbers ------------------------------------------------------------------------------------


def test_an_integer_is_a_whole_number_input():
    """An int argument gets a number input that refuses decimals, prefilled with its value."""
    element = _element(PROPOSED, "coats")
    assert element["is_decimal_allowed"] is False
    assert element["initial_value"] == "3"


def test_an_integer_left_out_shows_its_default():
    """The tool's default is shown for an integer the model left out."""
    assert _element(MINIMAL, "coats")["initial_value"] == "2"


def test_a_number_is_a_decimal_number_input():
    """A float argument gets a number input that allows decimals."""
    element = _element(PROPOSED, "ratio")
    assert element["is_decimal_allowed"] is True
    assert element["initial_value"] == "0.25"


def test_numbers_are_read_back_as_numbers():
    """The number input's value (a string in Slack's payload) becomes an int or a float."""
    arguments, errors = _read(_approval(PROPOSED), coats="7", ratio="1.5")
    assert errors == {}
    assert arguments["coats"] == 7
    assert type(arguments["coats"]) is int
    assert arguments["ratio"] == 1.5
    assert type(arguments["ratio"]) is float


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("coats", "2.5", "Not a valid integer"),
        ("coats", "many", "Not a valid integer"),
        ("ratio", "half", "Not a valid number"),
    ],
)
def test_an_invalid_number_is_reported_on_its_block(name, raw, message):
    """A number that cannot be read is an error on its own input, and is not passed on."""
    arguments, errors = _read(_approval(PROPOSED), **{name: raw}, wall="south")
    assert list(errors) == [block_for(name)]
    assert errors[block_for(name)].startswith(message)
    assert name not in arguments
    assert arguments["wall"] == "south"


@pytest.mark.parametrize("proposed", ["3", True, [3], {"n": 3}])
def test_a_wrongly_typed_number_never_prefills_a_non_number(proposed):
    """A proposal that is not a number is shown as JSON text, never put in a number input."""
    element = _element({**PROPOSED, "coats": proposed}, "coats")
    assert element["type"] == "plain_text_input"
    assert json.loads(element["initial_value"]) == proposed


@pytest.mark.parametrize(("name", "proposed"), [("coats", 3), ("coats", 0), ("ratio", 0.25)])
def test_a_number_input_prefills_only_numbers(name, proposed):
    """A well-typed number still gets a number input, prefilled with a number Slack can show."""
    element = _element({**PROPOSED, name: proposed}, name)
    assert element["type"] == "number_input"
    assert float(element["initial_value"]) == proposed


@pytest.mark.parametrize("proposed", [1, 0, "true", "yes"])
def test_a_wrongly_typed_boolean_is_shown_as_json_text(proposed):
    """A bool argument proposed as something else is shown as JSON text, not as a select."""
    element = _element({**PROPOSED, "primer": proposed}, "primer")
    assert element["type"] == "plain_text_input"
    assert "options" not in element
    assert json.loads(element["initial_value"]) == proposed
    assert type(json.loads(element["initial_value"])) is type(proposed)


def test_a_wrongly_typed_proposal_shown_as_text_can_be_corrected():
    """The reviewer replaces a wrongly typed proposal with a real number and it reads back."""
    approval = _approval({**PROPOSED, "coats": "3"})
    arguments, errors = _read(approval, coats="4")
    assert errors == {}
    assert arguments["coats"] == 4


# --- selects: booleans and enums ----------------------------------------------------------------


def test_a_boolean_is_a_true_false_select():
    """A bool argument is chosen from true and false; the proposed one is selected."""
    element = _element(PROPOSED, "primer")
    assert _options(element) == [("true", "true"), ("false", "false")]
    assert element["initial_option"]["value"] == "true"


def test_a_boolean_left_out_selects_its_default():
    """A bool the model left out has the tool's default selected."""
    assert _element(MINIMAL, "primer")["initial_option"]["value"] == "false"


def test_a_literal_is_a_select_of_its_values():
    """A Literal argument is chosen from its values; labels are plain, values JSON-encoded."""
    element = _element(PROPOSED, "finish")
    assert _options(element) == [("matte", '"matte"'), ("gloss", '"gloss"')]
    assert element["initial_option"] == {
        "text": {"type": "plain_text", "text": "gloss"},
        "value": '"gloss"',
    }


def test_an_enum_behind_a_ref_is_a_select_of_its_values():
    """An Enum argument (a $ref into $defs) is chosen from the enum's values."""
    element = _element(PROPOSED, "color")
    assert _options(element) == [("red", '"red"'), ("green", '"green"'), ("blue", '"blue"')]
    assert element["initial_option"]["value"] == '"green"'


def test_an_integer_enum_behind_a_ref_keeps_its_default():
    """An int Enum with a default: options are its numbers, the default is selected."""
    element = _element(MINIMAL, "level")
    assert _options(element) == [("1", "1"), ("2", "2")]
    assert element["initial_option"]["value"] == "1"


def test_a_required_enum_nobody_proposed_selects_nothing():
    """A select with no proposed value and no default has no initial option."""
    element = _element({"wall": "north"}, "color")
    assert "initial_option" not in element


def test_a_value_outside_the_enum_selects_nothing():
    """A proposed value the enum does not list is not preselected (Slack would refuse it)."""
    assert "initial_option" not in _element({**PROPOSED, "color": "purple"}, "color")


def test_selected_options_are_read_back_as_their_json_values():
    """Each select's selected_option value is decoded: bools, strings and numbers."""
    arguments, errors = _read(
        _approval(PROPOSED), primer="false", finish='"matte"', color='"blue"', level="1"
    )
    assert errors == {}
    assert (arguments["primer"], arguments["finish"], arguments["color"], arguments["level"]) == (
        False,
        "matte",
        "blue",
        1,
    )


def test_a_tampered_select_value_is_reported_on_its_block():
    """A selected value that is not JSON is an error on that input."""
    arguments, errors = _read(_approval(PROPOSED), color="blue")
    assert list(errors) == [block_for("color")]
    assert errors[block_for("color")].startswith("Not valid JSON")
    assert "color" not in arguments


@pytest.mark.parametrize(("name", "proposed"), [("primer", 1), ("primer", 0), ("level", True)])
def test_an_initial_option_is_always_one_of_the_options(name, proposed):
    """Whatever the model proposed, a preselected option is one the select offers."""
    element = _element({**PROPOSED, name: proposed}, name)
    if "initial_option" in element:
        assert element["initial_option"] in element["options"]


def test_a_long_enum_value_round_trips():
    """An enum value longer than Slack's option value limit still reads back as itself."""
    long = "x" * 200
    schema = {"type": "object", "properties": {"mode": {"enum": [long, "short"]}}}
    approval = make_approval(
        tool_name="pick",
        tools=[ToolRef("pick", "tests.bot.test_typed_edit_modal:paint", schema)],
        arguments={"mode": long},
    )
    assert read_edit_submission(approval, _untouched(build_edit_modal(approval))) == (
        {"mode": long},
        {},
    )


# --- objects and lists as JSON -------------------------------------------------------------------


def test_lists_and_objects_are_multiline_json():
    """A list or object argument is prefilled as indented JSON in a multiline input."""
    for name in ("areas", "spec"):
        element = _element(PROPOSED, name)
        assert element["type"] == "plain_text_input"
        assert element["multiline"] is True
        assert json.loads(element["initial_value"]) == PROPOSED[name]
        assert "\n" in element["initial_value"]


def test_json_inputs_are_read_back_as_json():
    """Typed JSON becomes the list or object it spells."""
    arguments, errors = _read(_approval(PROPOSED), areas='["bottom"]', spec='{"litres": 2}')
    assert errors == {}
    assert arguments["areas"] == ["bottom"]
    assert arguments["spec"] == {"litres": 2}


def test_invalid_json_is_reported_on_its_block():
    """JSON that does not parse is an error on its own input, and is not passed on."""
    arguments, errors = _read(_approval(PROPOSED), spec="{litres: 2}")
    assert list(errors) == [block_for("spec")]
    assert errors[block_for("spec")].startswith("Not valid JSON")
    assert "spec" not in arguments


def test_a_schema_description_becomes_the_hint():
    """An argument's description is shown under its input."""
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "Where to paint"}},
    }
    approval = make_approval(
        tool_name="p", tools=[ToolRef("p", "m:p", schema)], arguments={"path": "x"}
    )
    block = _inputs(build_edit_modal(approval))[block_for("path")]
    assert block["hint"] == {"type": "plain_text", "text": "Where to paint"}


# --- arguments that may not be edited -----------------------------------------------------------


def _locked_text(view):
    sections = [
        b["text"]["text"]
        for b in view["blocks"]
        if b["type"] == "section" and "Not editable" in b["text"]["text"]
    ]
    return sections[0] if sections else None


def test_only_editable_arguments_get_inputs():
    """With editable=(color, coats) only those two can be changed."""
    view = build_edit_modal(_approval(PROPOSED, policy=Policy(editable=("color", "coats"))))
    assert list(_inputs(view)) == [block_for("color"), block_for("coats")]


def test_non_editable_arguments_are_shown_read_only():
    """Arguments that may not change are listed, with their proposed values, as read-only."""
    approval = _approval(
        {"wall": "north", "color": "green", "note": "careful"},
        policy=Policy(editable=("color",)),
    )
    text = _locked_text(build_edit_modal(approval))
    assert text is not None
    assert text.startswith("*Not editable, runs as proposed:*")
    body = text.split("```")[1]
    assert json.loads(body) == {"wall": "north", "note": "careful"}


def test_a_locked_argument_the_model_left_out_is_not_listed():
    """Defaults the model relied on are not shown as locked values."""
    approval = _approval(MINIMAL, policy=Policy(editable=("color",)))
    body = _locked_text(build_edit_modal(approval)).split("```")[1]
    assert json.loads(body) == {"wall": "north"}


def test_nothing_editable_means_no_inputs_and_everything_read_only():
    """editable=() leaves the modal with no inputs; all proposed arguments are shown."""
    view = build_edit_modal(_approval(PROPOSED, policy=Policy(editable=())))
    assert _inputs(view) == {}
    assert json.loads(_locked_text(view).split("```")[1]) == PROPOSED


def test_when_everything_is_editable_nothing_is_shown_read_only():
    """With the default policy there is no read-only section."""
    assert _locked_text(build_edit_modal(_approval(PROPOSED))) is None


def test_non_editable_arguments_are_kept_when_reading():
    """Locked arguments come back exactly as proposed; only the editable ones change."""
    approval = _approval(PROPOSED, policy=Policy(editable=("color", "coats")))
    arguments, errors = _read(approval, color='"red"', coats="5")
    assert errors == {}
    assert arguments == {**PROPOSED, "color": "red", "coats": 5}
    check_edit(approval, arguments)


# --- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("proposed", [PROPOSED, MINIMAL, {**MINIMAL, "note": None}])
def test_an_untouched_modal_gives_back_the_proposed_arguments(proposed):
    """Submitting the modal as opened approves exactly what the model proposed."""
    approval = _approval(proposed)
    arguments, errors = read_edit_submission(approval, _untouched(build_edit_modal(approval)))
    assert errors == {}
    assert arguments == proposed
    assert json.dumps(arguments, sort_keys=True) == json.dumps(proposed, sort_keys=True)


def test_an_edited_modal_gives_arguments_that_fit_the_schema():
    """Values read from every kind of input pass the tool's own schema check."""
    approval = _approval(PROPOSED)
    arguments, errors = _read(
        approval,
        wall="south",
        color='"red"',
        finish='"matte"',
        coats="4",
        ratio="0.75",
        primer="false",
        note="",
        level="1",
        areas="[]",
        spec="{}",
    )
    assert errors == {}
    assert arguments == {
        "wall": "south",
        "color": "red",
        "finish": "matte",
        "coats": 4,
        "ratio": 0.75,
        "primer": False,
        "note": None,
        "level": 1,
        "areas": [],
        "spec": {},
    }
    check_edit(approval, arguments)
