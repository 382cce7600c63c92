"""Hostile and broken input is answered, never crashes the bot, and changes nothing.

Signed requests with malformed bodies, mistyped fields, unknown ids, Unicode edge cases and
megabyte edits go to the running bot over HTTP (hypothesis draws them); corrupt records go
into a real Redis hash. Each fuzz runs against one bot, then checks that Redis is unchanged,
that the bot logged no traceback, and that it still decides a normal click.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approvals import store
from approvals.bot.modals import EDIT_VIEW, REASON_BLOCK, REJECT_VIEW, RESPOND_VIEW, RESPONSE_BLOCK
from approvals.bot.modals import VALUE_ACTION as VALUE
from approvals.bot.pending import NEXT_PAGE_ACTION
from approvals.bot.server import MAX_BODY_BYTES
from approvals.errors import CorruptRecord
from approvals.models import DecisionKind, Status, decision_to_dict, result_to_dict
from approvals.slack.cards import (
    APPROVE_ACTION,
    EDIT_ACTION,
    REJECT_ACTION,
    RESPOND_ACTION,
    RETRY_ACTION,
)
from approvals.slack.limits import PLAIN_TEXT_INPUT
from tests.agents.tools import delete_path, move_file
from tests.conftest import SIGNING_SECRET
from tests.e2e import (
    card_of,
    click,
    pause,
    redis_state,
    select,
    settled,
    submit_edit,
    tool_runs,
    wait_status,
)
from tests.factories import make_decided
from tests.slack_requests import (
    FORM,
    JSON,
    block_actions_payload,
    event_callback_payload,
    post_signed,
    slash_command_form,
    view_submission_payload,
)

FUZZ = settings(max_examples=80, deadline=None, database=None)
UNKNOWN_ID = "0000000000000000"
ACTION_IDS = [APPROVE_ACTION, REJECT_ACTION, EDIT_ACTION, RESPOND_ACTION, RETRY_ACTION]
ACTION_IDS.append(NEXT_PAGE_ACTION)
CALLBACK_IDS = [EDIT_VIEW, REJECT_VIEW, RESPOND_VIEW]
#: RQ's keys: a new job would mean that something was decided.
RQ_JOBS = "rq:job:*"

# --- strategies -----------------------------------------------------------------------------

#: Characters that break naive code: NUL, bidi controls, emoji, a combining mark.
EDGES = st.sampled_from(["\x00", "\u202e", "\u200f", "\U0001f600", "\u0301"])
VALID_TEXT = st.text(st.characters(exclude_categories=["Cs"]) | EDGES, max_size=30)
#: Lone surrogates too (a JSON escape can carry them; UTF-8 cannot), in a quarter of the texts.
TEXT = st.builds(
    str.__add__, VALID_TEXT, st.sampled_from(["", "", "", "", "", "", "\ud800", "\udfff"])
)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | VALID_TEXT
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(VALID_TEXT, inner, max_size=3),
    max_leaves=6,
)
NOT_A_DICT = JUNK.filter(lambda value: not isinstance(value, dict))
#: Never a non-blank string, so a reason or a response read from it is always missing.
NO_TEXT = st.none() | st.integers() | st.lists(st.integers(), max_size=2) | st.just("  \n")
ELEMENT = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["plain_text_input", "static_select", "number_input"]) | JUNK,
        "value": NO_TEXT,
        "selected_option": NO_TEXT | st.fixed_dictionaries({"value": NO_TEXT}),
    },
)
BLOCK_IDS = st.sampled_from([REASON_BLOCK, RESPONSE_BLOCK, "arg-path", "arg-recursive", "arg-dest"])
STATE_VALUES = JUNK | st.dictionaries(
    BLOCK_IDS | TEXT,
    JUNK | st.dictionaries(st.just(VALUE) | TEXT, ELEMENT | JUNK, max_size=2),
    max_size=4,
)
USERS = (
    JUNK
    | st.fixed_dictionaries({"id": JUNK})
    | st.fixed_dictionaries({"id": st.just("UFUZZ"), "name": JUNK, "username": JUNK})
)
DROP = object()


def _surrogatepass(text: str) -> bytes:
    """UTF-8, with lone surrogates written as the invalid bytes they would be."""
    return text.encode("utf-8", "surrogatepass")


def _apply(data: st.DataObject, target: dict[str, Any], fields: dict[str, Any]) -> None:
    """Drop up to two of ``target``'s fields or replace them with what ``fields`` draws; the
    others stay as Slack sends them, so that most requests get as far as a listener."""
    for name in data.draw(st.lists(st.sampled_from(sorted(fields)), max_size=2, unique=True)):
        new = data.draw(st.just(DROP) | fields[name], label=name)
        if new is DROP:
            target.pop(name, None)
        else:
            target[name] = new


# --- helpers ----------------------------------------------------------------------------------


def _pause(tool: str, arguments: dict[str, str]) -> str:
    return pause(tool, arguments, tools=[delete_path, move_file])


def _state(conn) -> tuple[dict[bytes, bytes], list[bytes]]:
    """Every approvals key (DUMP) but the replay guard's signatures, and RQ's job keys."""
    return redis_state(conn, seen=False), sorted(conn.keys(RQ_JOBS))


def _post_bytes(url: str, body: bytes, content_type: str = FORM) -> int:
    """POST raw bytes signed as Slack signs them (for bodies that are not UTF-8)."""
    ts = str(int(time.time()))
    digest = hmac.new(SIGNING_SECRET.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256)
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": "v0=" + digest.hexdigest(),
    }
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        with error:
            return error.code


def _post_too_large(url: str, body: str) -> int:
    """POST a signed body that the server refuses on its Content-Length alone.

    The server answers as soon as it has read the headers and then closes the connection, so
    the answer is read before the body is sent (sending it first ends in a broken pipe).
    """
    ts = str(int(time.time()))
    digest = hmac.new(SIGNING_SECRET.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256)
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.netloc, timeout=10)
    try:
        connection.putrequest("POST", parsed.path)
        for name, value in {
            "Content-Type": FORM,
            "Content-Length": str(len(body.encode())),
            "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": "v0=" + digest.hexdigest(),
        }.items():
            connection.putheader(name, value)
        connection.endheaders()
        return connection.getresponse().status
    finally:
        connection.close()


def _post(url: str, payload: Any, kind: str = "interaction") -> int:
    """Sign and send what Slack would: ``payload=<json>`` forms, plain forms, or JSON."""
    if kind == "interaction":
        body = urlencode({"payload": json.dumps(payload)})
    elif kind == "form":
        body = urlencode(payload, errors="surrogatepass")
    else:
        body = json.dumps(payload)
    return _post_bytes(url, body.encode(), JSON if kind == "json" else FORM)


def _crashes(log: str) -> list[str]:
    """Lines of the bot's log that show an exception escaping a listener or the server."""
    return [line for line in log.splitlines() if "Traceback" in line or "Failed to run" in line]


def _assert_unharmed(services, conn, before) -> None:
    assert settled(lambda: _state(conn)) == before
    assert _crashes(services.bot.output()) == []


# --- the HTTP endpoint ------------------------------------------------------------------------

#: Bodies that crashed the bot (HTTP 500 or a traceback after the ack) before they were fixed.
KNOWN_CRASHERS: list[tuple[str, Any]] = [
    ("interaction", [1]),
    ("interaction", "just a string"),
    ("interaction", {"type": "block_actions", "actions": "x", "user": {"id": "U1"}}),
    ("interaction", {"type": "block_actions", "actions": [], "user": {"id": "U1"}}),
    ("interaction", {"type": "block_actions", "actions": {"a": 1}, "user": {"id": "U1"}}),
    ("interaction", {"type": "block_actions", "actions": [1], "user": {"id": "U1"}}),
    ("interaction", {"type": "block_actions", "actions": [{"action_id": 5}]}),
    ("interaction", {"type": "view_submission", "view": "x", "user": {"id": "U1"}}),
    ("interaction", {"type": "view_submission", "view": None}),
    ("interaction", {"type": "block_actions", "user": {"id": "U1"}, "authorizations": [1]}),
    ("interaction", {"type": "block_actions", "user": {"id": "U1"}, "enterprise": 5}),
    ("interaction", {"type": "block_actions", "response_url": 5, "actions": [{"action_id": "x"}]}),
    ("interaction", {"type": "shortcut", "callback_id": "x", "bot_access_token": ["x"]}),
    ("json", {"type": "event_callback", "event": None}),
    ("json", {"type": "event_callback", "event": "app_home_opened"}),
    ("json", {"type": "event_callback", "event": {"type": "app_home_opened"}}),
    ("json", {"command": "/agent-pending", "text": ["all"]}),
    ("json", {"type": "event_callback", "event": {"type": "app_home_opened", "user": ""}}),
    ("interaction", {"type": "block_actions", "v": "\ud800", "actions": [{"action_id": "x"}]}),
    ("interaction", {"type": "block_actions", "actions": [{"action_id": "approval_approve"}]}),
    ("form", {"command": "/agent-pending", "user_id": "U1", "text": "all"}),
    ("interaction", {"type": "block_actions", "actions": [{"action_id": "approval_edit"}]}),
]


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_signed_garbage_is_answered_below_500_and_changes_nothing(services, slack, env, conn):
    """Malformed bodies, non-JSON and non-object payloads, mistyped or missing fields, unknown
    action and callback ids and Unicode edge cases get an answer < 500 and change nothing;
    afterwards the bot still decides a normal click."""
    edit_id = _pause("delete_path", {"path": "build"})
    reject_id = _pause("move_file", {"path": "a", "dest": "b"})  # rejecting needs a reason
    card = card_of(slack, edit_id)
    card_of(slack, reject_id)
    url = services.bot_url
    before = settled(lambda: _state(conn))

    for kind, payload in KNOWN_CRASHERS:
        assert _post(url, payload, kind) < 500, payload
    for raw in [b"payload=" + b"[" * 200_000, b"payload=%ff%fe", b"\xff\xfe\x00", b"{" * 5]:
        assert _post_bytes(url, raw) < 500, raw[:20]
    deep = {"type": "block_actions", "actions": [{"action_id": "x"}], "deep": _deep(900)}
    assert _post(url, deep) < 500

    @FUZZ
    @given(st.data())
    def raw_bodies(data: st.DataObject) -> None:
        body = data.draw(
            st.binary(max_size=200)
            | TEXT.map(_surrogatepass)
            | JUNK.map(lambda v: ("payload=" + json.dumps(v)).encode())
            | NOT_A_DICT.map(lambda v: json.dumps(v).encode())
        )
        content_type = data.draw(st.sampled_from([FORM, JSON, "text/plain"]))
        assert _post_bytes(url, body, content_type) < 500

    @FUZZ
    @given(st.data())
    def button_clicks(data: st.DataObject) -> None:
        action_id = data.draw(st.one_of(*[st.sampled_from(ACTION_IDS)] * 3, TEXT))
        # Opening a modal changes nothing, so those buttons may name real approvals.
        opens = action_id in (REJECT_ACTION, EDIT_ACTION, RESPOND_ACTION)
        value = data.draw(
            st.sampled_from([UNKNOWN_ID, *([edit_id, reject_id] if opens else [])])
            | TEXT
            | st.builds(lambda o, q: json.dumps({"offset": o, "query": q}), JUNK, JUNK)
        )
        payload = block_actions_payload(
            user_id="UFUZZ",
            action_id=action_id,
            value=value,
            message_ts=card.ts,
            response_url=slack.new_response_url(),
            container_type=data.draw(st.sampled_from(["message", "view"])),
        )
        _apply(data, payload["actions"][0], {"value": JUNK})
        _apply(
            data,
            payload,
            {
                "user": USERS,
                "actions": JUNK,
                "trigger_id": JUNK,
                "response_url": NOT_A_DICT.filter(lambda v: not isinstance(v, str))
                | st.just("not a url"),
                "container": JUNK,
                "type": JUNK,
                "team": JUNK,
                "channel": JUNK,
                "view": JUNK,
            },
        )
        assert _post(url, payload) < 500

    @FUZZ
    @given(st.data())
    def modal_submissions(data: st.DataObject) -> None:
        callback_id = data.draw(st.one_of(*[st.sampled_from(CALLBACK_IDS)] * 3, TEXT))
        # Real ids only where the submission cannot decide: a reject of an approval that needs
        # a reason (never given), a response (never given), an edit with an over-long input.
        real = {EDIT_VIEW: [edit_id, reject_id], REJECT_VIEW: [reject_id]}
        metadata = data.draw(
            st.sampled_from([UNKNOWN_ID, *real.get(callback_id, [edit_id, reject_id])]) | JUNK
        )
        values = data.draw(STATE_VALUES)
        if callback_id == EDIT_VIEW and isinstance(values, dict):
            too_long = {VALUE: {"type": "plain_text_input", "value": "x" * (PLAIN_TEXT_INPUT + 1)}}
            values.update({"arg-path": too_long, "arg-dest": too_long})
        payload = view_submission_payload(
            user_id="UFUZZ", callback_id=callback_id, private_metadata="", values=values
        )
        payload["view"]["private_metadata"] = metadata
        payload["trigger_id"] = f"{time.time_ns()}.fuzz"  # as in Slack's, no two bodies alike
        _apply(data, payload["view"], {"state": JUNK, "private_metadata": JUNK, "type": JUNK})
        _apply(data, payload, {"user": USERS, "view": JUNK, "type": JUNK})
        assert _post(url, payload) < 500

    @FUZZ
    @given(st.data())
    def commands_and_events(data: st.DataObject) -> None:
        if data.draw(st.booleans(), label="command"):
            form = slash_command_form(
                user_id="UFUZZ", text=data.draw(TEXT), response_url=slack.new_response_url()
            )
            texts = st.text(max_size=10) | TEXT
            _apply(data, form, {"user_id": texts, "command": texts, "response_url": texts})
            assert _post(url, form, "form") < 500
            return
        event = {"type": "app_home_opened", "user": "UFUZZ", "tab": "home", "channel": "D1"}
        _apply(data, event, {"user": JUNK, "tab": JUNK, "type": JUNK})
        envelope = event_callback_payload(event)
        _apply(data, envelope, {"event": JUNK, "type": JUNK, "authorizations": JUNK})
        assert _post(url, envelope, "json") < 500

    raw_bodies()
    button_clicks()
    modal_submissions()
    commands_and_events()

    _assert_unharmed(services, conn, before)
    assert click(slack, url, "approve", edit_id, card_ts=card.ts)[0] == 200
    wait_status(conn, edit_id, Status.COMPLETED)
    assert len(tool_runs(env, "delete_path")) == 1


def _edit_body(approval_id: str, path: str, recursive: str = "true") -> str:
    """The body of an Edit submission whose ``path`` input holds ``path``."""
    state = {
        "arg-path": {VALUE: {"type": "plain_text_input", "value": path}},
        "arg-recursive": {VALUE: select(recursive)},
    }
    payload = view_submission_payload(
        user_id="UALICE", callback_id=EDIT_VIEW, private_metadata=approval_id, values=state
    )
    payload["trigger_id"] = f"{time.time_ns()}.edit"  # as in Slack's, no two bodies alike
    return urlencode({"payload": json.dumps(payload)})


def test_edited_arguments_with_unicode_edge_cases_or_megabytes_are_answered_inline(
    services, slack, env, conn
):
    """Unicode edge cases in an edited argument come back as inline errors (or a 400 for text
    UTF-8 cannot carry), a 1 MB edit over the body cap gets a 413 and one just under it an
    error on its input; then an edit full of odd but valid characters runs exactly as typed."""
    pause_id = _pause("delete_path", {"path": "build"})
    card_of(slack, pause_id)
    url = services.bot_url
    before = settled(lambda: _state(conn))

    def edit(path: str) -> tuple[int, dict[str, str]]:
        """Submit ``path`` with a ``recursive`` that is never valid: nothing can be decided."""
        body = _edit_body(pause_id, path, recursive='"maybe"')
        status, answer = post_signed(url, SIGNING_SECRET, body, FORM)
        return status, json.loads(answer)["errors"] if status == 200 else {}

    combining = "e" + "\u0301" * 10_000
    status, errors = edit(combining)
    assert status == 200
    assert errors["arg-path"] == f"At most {PLAIN_TEXT_INPUT} characters, not {len(combining)}."
    for lone in ("\ud800", "ok\udfff"):
        assert edit(lone)[0] == 400

    @FUZZ
    @given(TEXT | st.text(EDGES, min_size=2_990, max_size=3_010))
    def unicode_paths(path: str) -> None:
        status, errors = edit(path)
        if any("\ud800" <= c <= "\udfff" for c in path):
            assert status == 400
            return
        assert status == 200
        if len(path) > PLAIN_TEXT_INPUT:  # unreadable input: the schema is not checked
            assert set(errors) == {"arg-path"} and "At most" in errors["arg-path"]
        else:
            assert set(errors) == {"arg-recursive"}  # the select is never valid

    unicode_paths()

    room = MAX_BODY_BYTES - len(_edit_body(pause_id, "")) - 200
    under = _edit_body(pause_id, "x" * room)
    assert MAX_BODY_BYTES - 1_000 < len(under) < MAX_BODY_BYTES
    status, body = post_signed(url, SIGNING_SECRET, under, FORM)
    assert status == 200
    assert json.loads(body)["errors"] == {"arg-path": f"At most 3000 characters, not {room}."}
    over = _edit_body(pause_id, "x" * MAX_BODY_BYTES)
    assert len(over) > MAX_BODY_BYTES
    assert _post_too_large(url, over) == 413
    _assert_unharmed(services, conn, before)

    odd = "build/\u202eelif\u202c \x00 \U0001f600 " + "e\u0301" * 50 + " \u05e9\u05dc\u05d5\u05dd"
    status, body = submit_edit(url, pause_id, {"path": odd, "recursive": select("true")})
    assert (status, body) == (200, "")
    decided = wait_status(conn, pause_id, Status.COMPLETED)
    assert decided.decision.arguments == {"path": odd, "recursive": True}
    assert [r["arguments"] for r in tool_runs(env, "delete_path")] == [
        {"path": odd, "recursive": True}
    ]


# --- stored records -------------------------------------------------------------------------

HISTORY = [{"role": "user", "parts": [{"type": "text", "text": "Tidy the build folder"}]}]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (dict keys and list indexes), the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*prefix, index))
    return found


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """``value`` with what ``path`` points at replaced by ``new`` (removed when DROP)."""
    if not path:
        return new
    copied = copy.deepcopy(value)
    parent = copied
    for step in path[:-1]:
        parent = parent[step]
    if new is DROP:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return copied


@st.composite
def _corrupted(draw: st.DrawFn, valid: str) -> bytes:
    """``valid`` JSON truncated, retyped, with one inner value replaced or dropped, or bytes."""
    decoded = json.loads(valid)
    how = draw(st.sampled_from(["truncate", "retype", "replace", "bytes"]))
    if how == "truncate":
        return valid[: draw(st.integers(0, len(valid) - 1))].encode()
    if how == "retype":
        return _surrogatepass(json.dumps(draw(JUNK), ensure_ascii=draw(st.booleans())))
    if how == "bytes":
        return draw(st.binary(max_size=40))
    path = draw(st.sampled_from(_paths(decoded)))
    new = draw(JUNK | st.just(DROP)) if path else draw(JUNK)
    return _surrogatepass(json.dumps(_replaced(decoded, path, new), ensure_ascii=False))


def test_corrupt_stored_fields_raise_only_corrupt_record(conn):
    """Truncated, retyped or partly replaced JSON in an approval's fields or its history makes
    load/load_history raise CorruptRecord and nothing else; pending() skips the record."""
    approval = make_decided(Status.COMPLETED, DecisionKind.EDIT)
    key = store.keys.approval_key(approval.id)
    assert approval.decision and approval.result
    valid = {
        "record": json.dumps(approval.record()),
        "status": approval.status.value,
        "decision": json.dumps(decision_to_dict(approval.decision)),
        "result": json.dumps(result_to_dict(approval.result)),
        "votes": json.dumps(["UALICE", "UBOB"]),
    }
    history = json.dumps(HISTORY)
    store.records.create(conn, approval, HISTORY).execute()

    @settings(max_examples=100, deadline=None, database=None)
    @given(st.data())
    def fields(data: st.DataObject) -> None:
        conn.delete(key)
        conn.hset(key, mapping=valid)
        assert store.records.load(conn, approval.id).votes == ("UALICE", "UBOB")
        field = data.draw(st.sampled_from([*valid, "card_ts"]))
        if field in ("status", "card_ts"):  # plain text, not JSON
            raw = data.draw(st.binary(max_size=20) | TEXT.map(_surrogatepass))
        else:
            raw = data.draw(_corrupted(valid[field]))
        conn.hset(key, field, raw)
        try:
            loaded = store.records.load(conn, approval.id)
        except CorruptRecord:
            assert approval.id not in [a.id for a in store.pending.pending(conn)]
        else:
            assert [a.id for a in store.pending.pending(conn)] == [loaded.id]

    @settings(max_examples=60, deadline=None, database=None)
    @given(_corrupted(history))
    def histories(raw: bytes) -> None:
        conn.set(store.keys.history_key(approval.id), raw)
        try:
            loaded = store.records.load_history(conn, approval.id)
        except CorruptRecord:
            return
        assert isinstance(loaded, list) and all(isinstance(m, dict) for m in loaded)

    conn.zadd(store.keys.PENDING_KEY, {approval.id: approval.created_at})
    fields()
    histories()
    conn.hset(key, b"\xff\xfe", b"x")  # a field name that is not UTF-8
    with pytest.raises(CorruptRecord):
        store.records.load(conn, approval.id)
    assert store.pending.pending(conn) == []


@pytest.mark.parametrize("where", ["record", "history"])
def test_deeply_nested_stored_json_is_a_corrupt_record(conn, where):
    """JSON nested deeper than Python's recursion limit is CorruptRecord, not RecursionError."""
    approval = make_decided(Status.COMPLETED)
    store.records.create(conn, approval, HISTORY).execute()
    nested = b"[" * 100_000 + b"]" * 100_000
    if where == "record":
        conn.hset(store.keys.approval_key(approval.id), "record", nested)
        with pytest.raises(CorruptRecord):
            store.records.load(conn, approval.id)
    else:
        conn.set(store.keys.history_key(approval.id), nested)
        with pytest.raises(CorruptRecord):
            store.records.load_history(conn, approval.id)
