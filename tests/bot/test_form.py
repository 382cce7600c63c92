"""``bot.form.parse`` reads every body exactly as Bolt's own parser does (and raises where
Bolt raises), whether it takes its fast path or hands the body to Bolt."""

from __future__ import annotations

import contextlib
import json
import re
import string
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slack_bolt.request.internals import parse_body

from bot import form

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
CONTENT_TYPES = [None, FORM, JSON, "text/plain", "application/json; charset=utf-8"]
PROPERTY = settings(max_examples=400, deadline=None, database=None)

# --- strategies -----------------------------------------------------------------------------

#: Any code point, lone surrogates included (a JSON escape can carry them), and more often
#: than ``characters()`` alone draws them.
CHARACTERS = st.characters(exclude_categories=[]) | st.sampled_from(
    ["\ud800", "\udfff", "\udbff", "\x00", "\u202e", "\U0001f600", "%", "+", "&", "=", " ", "\n"]
)
TEXT = st.text(CHARACTERS, max_size=20)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=15,
)
OBJECTS = st.dictionaries(TEXT, VALUES, max_size=6)
#: ``quote``'s characters left as they are: none, its default, or a few printable ones that
#: make the value leave the fast path (raw ``=``, ``&``, space, ``%``, ``+``).
SAFE = st.sampled_from(["", "/", ':,{}[]"']) | st.text(
    st.sampled_from(string.printable[:-5]), max_size=4
)
_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _json_text(draw: st.DrawFn, value: Any) -> str:
    return json.dumps(
        value,
        ensure_ascii=draw(st.booleans(), label="ensure_ascii"),
        separators=draw(st.sampled_from([None, (",", ":")]), label="separators"),
    )


def _lowercase_escapes(body: str) -> str:
    return _ESCAPE.sub(lambda m: m.group(0).lower(), body)


@st.composite
def _plain_bodies(draw: st.DrawFn, values: st.SearchStrategy[Any] = OBJECTS) -> str:
    """``payload=<json>`` as Slack sends it: ``urlencode`` (``quote_plus``), or ``quote``,
    with upper- or lower-case hex escapes; lone surrogates as the bytes UTF-8 would use."""
    text = _json_text(draw, draw(values))
    how = draw(st.sampled_from(["urlencode", "quote", "quote /"]))
    if how == "urlencode":
        body = urlencode({"payload": text}, errors="surrogatepass")
    else:
        body = "payload=" + quote(
            text, safe="/" if how == "quote /" else "", errors="surrogatepass"
        )
    return _lowercase_escapes(body) if draw(st.booleans(), label="lowercase") else body


@st.composite
def _any_bodies(draw: st.DrawFn) -> str:
    """Also ``quote`` with odd safe characters, and other fields before or after."""
    text = _json_text(draw, draw(VALUES | OBJECTS))
    body = "payload=" + quote(text, safe=draw(SAFE), errors="surrogatepass")
    if draw(st.booleans(), label="lowercase"):
        body = _lowercase_escapes(body)
    field = st.sampled_from(["", "x=1", "payload=%7B%7D", "a", "payload", "=", "%zz"])
    before, after = draw(field, label="before"), draw(field, label="after")
    return "&".join(part for part in (before, body, after) if part)


#: Raw pieces a form value may hold that an encoder would never write there.
_RAW = ["%", "%4", "%zz", "%G1", "=", "=4a", "==", "=3D", " ", "+", "&", "&x=1", "\t", "\u00e9"]


@st.composite
def _mangled_bodies(draw: st.DrawFn) -> str:
    """A plain body with raw pieces inserted anywhere: broken escapes, ``=`` before hex
    digits, spaces, other fields..."""
    body = draw(_plain_bodies())
    for piece in draw(st.lists(st.sampled_from(_RAW), min_size=1, max_size=3), label="pieces"):
        at = draw(st.integers(len("payload="), len(body)), label="at")
        body = body[:at] + piece + body[at:]
    return body


# --- helpers ----------------------------------------------------------------------------------


def _outcome(parse: Any, body: str, content_type: str | None) -> tuple[str, Any]:
    try:
        return "parsed", parse(body, content_type)
    except Exception as exc:
        return "raised", type(exc)


def _assert_parsed_as_bolt_does(body: str, content_type: str | None = FORM) -> Any:
    """``form.parse``'s result is Bolt's (same values, same types: compared by ``repr``);
    where Bolt raises, the same exception type; where Bolt returns something other than a
    dict, ValueError. Returns what ``form.parse`` returned."""
    bolt = _outcome(parse_body, body, content_type)
    ours = _outcome(form.parse, body, content_type)
    if bolt[0] == "parsed" and not isinstance(bolt[1], dict):
        assert ours == ("raised", ValueError), (body, bolt)
    elif bolt[0] == "raised":
        assert ours == bolt, body
    else:
        assert ours[0] == "parsed", (body, ours)
        assert ours[1] == bolt[1], body
        assert repr(ours[1]) == repr(bolt[1]), body
    return ours[1]


@contextlib.contextmanager
def _bolt_parser_calls() -> Iterator[list[str]]:
    """The bodies ``form.parse`` handed to Bolt's parser (its fallback) while in the block."""
    calls: list[str] = []

    def spy(body: str, content_type: str | None) -> dict[str, Any]:
        calls.append(body)
        return parse_body(body, content_type)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(form, "parse_body", spy)
        yield calls


# --- property tests --------------------------------------------------------------------------


@PROPERTY
@given(_plain_bodies(), st.sampled_from([None, FORM]))
def test_a_plain_payload_form_is_parsed_on_the_fast_path_as_bolt_parses_it(body, content_type):
    """Any JSON object, urlencoded or quoted (upper- or lower-case escapes), non-ASCII and
    lone surrogates included: Bolt's result, and without calling Bolt's parser."""
    with _bolt_parser_calls() as calls:
        parsed = _assert_parsed_as_bolt_does(body, content_type)
    assert isinstance(parsed, dict)
    assert calls == [], "the plain shape left the fast path"


@PROPERTY
@given(_plain_bodies(VALUES.filter(lambda v: not isinstance(v, dict))))
def test_a_payload_that_is_not_a_json_object_raises_value_error(body):
    with pytest.raises(ValueError):
        form.parse(body, FORM)
    _assert_parsed_as_bolt_does(body)


@PROPERTY
@given(_plain_bodies() | _any_bodies() | _mangled_bodies(), st.sampled_from(CONTENT_TYPES))
def test_any_body_is_parsed_as_bolt_parses_it(body, content_type):
    """Odd safe characters (raw ``=``, ``&``, ``%``, ``+``, spaces), other fields, any
    content type: the fast path or the fallback, the result is Bolt's."""
    _assert_parsed_as_bolt_does(body, content_type)


@PROPERTY
@given(st.text(CHARACTERS, max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_text_after_payload_is_parsed_as_bolt_parses_it(raw):
    """Not even JSON: broken escapes, bytes that are not UTF-8, anything."""
    _assert_parsed_as_bolt_does("payload=" + raw.decode("utf-8", "replace"))
    _assert_parsed_as_bolt_does("payload=" + quote(raw, safe=string.printable))


# --- hand-written cases ----------------------------------------------------------------------

CLICK = {
    "type": "block_actions",
    "user": {"id": "UALICE", "name": "alice"},
    "actions": [{"action_id": "approval_approve", "value": "0123abcd"}],
    "response_url": "https://hooks.slack.test/response/1",
    "text": "a + b = c & d % 100",
}
ENCODED = urlencode({"payload": json.dumps(CLICK)})
QUOTED = "payload=" + quote(json.dumps(CLICK), safe="")


def test_the_urlencoded_click_is_read_on_the_fast_path():
    for body in (ENCODED, QUOTED, _lowercase_escapes(QUOTED), _lowercase_escapes(ENCODED)):
        with _bolt_parser_calls() as calls:
            assert _assert_parsed_as_bolt_does(body) == CLICK
        assert calls == []


#: (body, content type): every one must go to Bolt's parser.
FALLBACKS = {
    "another field after": (ENCODED + "&x=1", FORM),
    "another field before": ("x=1&" + ENCODED, FORM),
    "the payload twice": (ENCODED + "&payload=%7B%7D", FORM),
    "broken escape %zz": ("payload=%7B%22a%22%3A%22%zz%22%7D", FORM),
    "broken escape %4": ("payload=%7B%22a%22%3A%22%4%22%7D", FORM),
    "broken escape %4 at the end": ("payload=%7B%22a%22%3A1%7D%4", FORM),
    "trailing %": ("payload=%7B%22a%22%3A1%7D%", FORM),
    "trailing % inside a string": ('payload={"a":"%"}', FORM),
    "raw = in the value": ("payload=%7B%22a%22%3A%22b=c%22%7D", FORM),
    "raw == in the value": ("payload=%7B%22a%22%3A%22b==c%22%7D", FORM),
    "raw = before hex digits": ("payload=%7B%22a%22%3A%22b=4a%22%7D", FORM),
    "raw space in the value": ("payload=%7B%22a%22%3A%22b c%22%7D", FORM),
    "raw tab in the value": ('payload={"a":\t1}', FORM),
    "raw newline in the value": ('payload={"a":\n1}', FORM),
    "raw non-ASCII": ('payload={"a":"\u00e9\U0001f600"}', FORM),
    "non-ASCII between escapes": ("payload=%7B%22a%22%3A%22\u00e9%22%7D", FORM),
    "raw lone surrogate": ('payload={"a":"\ud800"}', FORM),
    "JSON body": (json.dumps({"type": "event_callback", "event": {"type": "x"}}), JSON),
    "JSON body, no content type": (json.dumps({"type": "event_callback"}), None),
    "JSON list body": ("[1, 2]", JSON),
    "payload form sent as JSON": (ENCODED, JSON),
    "slash command": ("command=/agent-pending&text=mine", FORM),
    "slash command mentioning payload": ("command=/agent-pending&text=payload", FORM),
    "empty body": ("", FORM),
    "empty body, no content type": ("", None),
    "Payload, capitalised": ("Payload=%7B%7D", FORM),
}


@pytest.mark.parametrize("body, content_type", FALLBACKS.values(), ids=FALLBACKS.keys())
def test_other_shapes_take_bolt_s_parser_and_read_as_bolt_reads_them(body, content_type):
    with _bolt_parser_calls() as calls:
        _assert_parsed_as_bolt_does(body, content_type)
    assert calls == [body], "this body must go to Bolt's parser"


def test_the_fallback_cases_read_what_they_say():
    """A few of them spelt out, so that "same as Bolt" is also "what the body means"."""
    assert form.parse("payload=%7B%22a%22%3A%22%zz%22%7D", FORM) == {"a": "%zz"}
    assert form.parse("payload=%7B%22a%22%3A%22b=c%22%7D", FORM) == {"a": "b=c"}
    assert form.parse("payload=%7B%22a%22%3A%22b=4a%22%7D", FORM) == {"a": "b=4a"}
    assert form.parse("payload=%7B%22a%22%3A%22b c%22%7D", FORM) == {"a": "b c"}
    assert form.parse("payload=%7B%22a%22%3A%22\u00e9%22%7D", FORM) == {"a": "\u00e9"}
    assert form.parse(ENCODED + "&x=1", FORM) == CLICK
    assert form.parse("command=/agent-pending&text=mine", FORM) == {
        "command": "/agent-pending",
        "text": "mine",
    }
    assert form.parse("", FORM) == {}
    assert form.parse('{"type": "event_callback"}', JSON) == {"type": "event_callback"}


#: Bodies Bolt cannot read: (body, content type, the exception type both raise).
RAISING = {
    "empty payload": ("payload=", FORM, json.JSONDecodeError),
    "not JSON": ("payload=%7Bnope", FORM, json.JSONDecodeError),
    "trailing %": ("payload=%7B%22a%22%3A1%7D%", FORM, json.JSONDecodeError),
    "invalid UTF-8": ("payload=%ff%fe", FORM, json.JSONDecodeError),
    "payload form sent as JSON": (ENCODED, JSON, json.JSONDecodeError),
    "broken JSON body": ("{" * 5, JSON, json.JSONDecodeError),
    "deep JSON": ("payload=" + "%5B" * 100_000 + "%5D" * 100_000, FORM, RecursionError),
}


@pytest.mark.parametrize("body, content_type, error", RAISING.values(), ids=RAISING.keys())
def test_what_bolt_cannot_read_raises_what_bolt_raises(body, content_type, error):
    with pytest.raises(error):
        parse_body(body, content_type)
    with pytest.raises(error):
        form.parse(body, content_type)
    _assert_parsed_as_bolt_does(body, content_type)


@pytest.mark.parametrize(
    "body, content_type",
    [
        ("payload=%5B1%5D", FORM),  # the fast path reads a list
        ("payload=%22x%22", FORM),
        ("payload=null", FORM),
        ("payload=%5B1%5D&x=1", FORM),  # the fallback reads a list
        ("[1]", JSON),
        ("123", JSON),
    ],
)
def test_json_that_is_not_an_object_raises_value_error(body, content_type):
    assert not isinstance(parse_body(body, content_type), dict)
    with pytest.raises(ValueError, match="not a JSON object"):
        form.parse(body, content_type)
