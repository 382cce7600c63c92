"""Hostile and broken input to the API's MCP mount (/mcp) is answered, never crashes it, and
changes nothing: the twin of tests/bot/test_hostile_input.py for /slack/events.

Malformed JSON-RPC, wrong content types, bodies over the cap (declared and chunked), bad and
missing tokens, unknown methods, wrong argument types and Unicode edge cases go to the running
API over HTTP (hypothesis draws them, next to hand-picked ones). Each answer is below 500 and
comes in time; without a valid token it is a refusal and nothing in Redis shows a request read
or asked for anything; with one, nothing is asked for. Then the API logged no traceback and
still answers a normal MCP call.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import urllib.parse
from collections.abc import Iterable
from typing import Any

import httpx
import httpx2
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from approvals import store
from approvals.calls import external
from approvals.proof.tokens import revoke_token, verify_token
from tests.api.conftest import Stack
from tests.api.test_mcp import INITIALIZE, MCP_HEADERS
from tests.e2e import key_value, settled

FUZZ = settings(max_examples=100, deadline=None, database=None)
#: The API's default cap on request bodies (APPROVALS_API_MAX_BODY).
MAX_BODY = 64 * 1024
#: A request answered later than this is a hang.
ANSWER_SECONDS = 15

# --- strategies -----------------------------------------------------------------------------

#: Characters that break naive code: NUL, bidi controls, emoji, a combining mark, a BOM.
EDGES = st.sampled_from(["\x00", "\u202e", "\u200f", "\U0001f600", "\u0301", "\ufeff"])
VALID_TEXT = st.text(st.characters(exclude_categories=["Cs"]) | EDGES, max_size=30)
#: A lone surrogate: a JSON escape can carry one, UTF-8 cannot.
LONE = st.sampled_from(["\ud800", "\udfff", "\udbff"])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | VALID_TEXT
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(VALID_TEXT, inner, max_size=3),
    max_leaves=6,
)
NOT_A_DICT = JUNK.filter(lambda value: not isinstance(value, dict))
NOT_A_STRING = JUNK.filter(lambda value: not isinstance(value, str))
METHODS = st.sampled_from(
    [
        "initialize",
        "notifications/initialized",
        "ping",
        "tools/list",
        "resources/list",
        "resources/read",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "notifications/cancelled",
        "notifications/progress",
        "subscriptions/listen",
    ]
)


def _mostly(usual: Any, other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` three times in four, else what ``other`` draws (so that most requests get as
    far as MCP's dispatcher, and one part of them is wrong)."""
    return st.sampled_from([True, True, True, False]).flatmap(
        lambda keep: st.just(usual) if keep else other
    )


@st.composite
def _tool_calls(draw: st.DrawFn) -> dict[str, Any]:
    """``tools/call`` params that never ask for anything: request_approval always has a
    mistyped ``tool`` or ``arguments`` (a well-typed one would post a card and wait)."""
    name = draw(st.sampled_from(["request_approval", "list_pending"]) | VALID_TEXT)
    arguments = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "tool": NOT_A_STRING | VALID_TEXT,
                "arguments": NOT_A_DICT | st.dictionaries(VALID_TEXT, JUNK, max_size=3),
                "summary": JUNK,
                "idempotency_key": JUNK,
            },
        )
        | NOT_A_DICT
    )
    well_typed = isinstance(arguments, dict) and (
        isinstance(arguments.get("tool"), str) and isinstance(arguments.get("arguments"), dict)
    )
    if name == "request_approval" and well_typed:
        arguments["tool"] = draw(NOT_A_STRING)
    return {"name": name, "arguments": arguments}


def _message(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON-RPC message, most often a tools/call, with some of its parts wrong."""
    method = draw(_mostly("tools/call", METHODS | VALID_TEXT))
    message: dict[str, Any] = {"jsonrpc": draw(_mostly("2.0", JUNK)), "method": method}
    if draw(_mostly(True, st.just(False))):
        message["id"] = draw(_mostly(7, st.integers(-(2**70), 2**70) | JUNK))
    if draw(_mostly(True, st.just(False))):
        message["params"] = draw(_tool_calls() if method == "tools/call" else JUNK)
    if draw(_mostly(False, st.just(True))):
        message[draw(VALID_TEXT)] = draw(JUNK)
    return message


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    """Mostly JSON-RPC messages wrong in some part, else batches, one with a lone surrogate
    escaped in it, JSON that is no message, non-JSON text and bytes."""
    kind = draw(st.sampled_from(["message"] * 4 + ["batch", "lone", "junk", "text", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "text":
        return draw(st.builds(str.__add__, VALID_TEXT, LONE)).encode("utf-8", "surrogatepass")
    if kind == "junk":
        return json.dumps(draw(JUNK)).encode()
    if kind == "batch":
        return json.dumps([_message(draw) for _ in range(draw(st.integers(0, 3)))]).encode()
    message = _message(draw)
    if kind == "lone":
        message["params"] = {"name": draw(LONE), "arguments": {draw(LONE): draw(LONE)}}
    ascii_only = draw(st.booleans()) or kind == "lone"
    return json.dumps(message, ensure_ascii=ascii_only).encode()


#: Header values: printable ASCII, Latin-1 and control bytes (never CR or LF: a request
#: cannot carry them).
HEADER_VALUES = st.binary(max_size=60).filter(lambda b: b"\r" not in b and b"\n" not in b)
CONTENT_TYPES = st.sampled_from(
    [
        b"application/json",
        b"application/json; charset=utf-8",
        b"text/plain",
        b"application/x-www-form-urlencoded",
        b"multipart/form-data; boundary=x",
        b"",
    ]
)
ACCEPTS = st.sampled_from(
    [b"application/json, text/event-stream", b"text/event-stream", b"application/json", b"*/*"]
)
HTTP_METHODS = st.sampled_from(["POST", "GET", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"])


def _bad_tokens(stack: Stack, revoked: str) -> st.SearchStrategy[bytes | None]:
    """Authorization values that are never a valid bearer token."""
    ambient = stack.ambient_token.encode()
    return (
        st.sampled_from(
            [
                None,
                b"",
                b"Bearer",
                b"Bearer ",
                b"bearer apv_",
                b"Basic dXNlcjpwYXNz",
                b"Bearer " + revoked.encode(),
                ambient,  # the API environment's token, without a scheme
                b"Token " + ambient,
                b"Bearer " + ambient[:-1],
                b"Bearer " + ambient + b"x",
                b"Bearer " + ambient.upper(),
                b"Bearer\x00" + ambient,
            ]
        )
        | HEADER_VALUES.map(lambda value: b"Bearer " + value)
    )


# --- helpers ----------------------------------------------------------------------------------


def _send(
    url: str,
    method: str,
    headers: dict[str, bytes | None],
    body: bytes | Iterable[bytes] = b"",
) -> int:
    """One raw request (headers as bytes, a body as bytes or as chunks); the status, read as
    soon as the answer's head arrives (an SSE stream is not waited for)."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.netloc, timeout=ANSWER_SECONDS)
    try:
        skip_host = "Host" in headers  # else a second Host header, which HTTP refuses
        connection.putrequest(method, parsed.path, skip_host=skip_host, skip_accept_encoding=True)
        for name, value in headers.items():
            if value is not None:
                connection.putheader(name, value)
        chunked = not isinstance(body, bytes)
        if chunked:
            connection.putheader("Transfer-Encoding", "chunked")
        elif body or method in ("POST", "PUT", "PATCH"):
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders()
        try:
            if chunked:
                for chunk in body:
                    connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                connection.send(b"0\r\n\r\n")
            elif body:
                connection.send(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the body was read: the answer is waiting
        return connection.getresponse().status
    finally:
        connection.close()


def _open_session(stack: Stack, token: str) -> str:
    """An initialized MCP session of ``token``; its id."""
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    opened = httpx.post(stack.api_url + "/mcp", json=INITIALIZE, headers=headers, timeout=10)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    headers["Mcp-Session-Id"] = session
    done = httpx.post(stack.api_url + "/mcp", json=initialized, headers=headers, timeout=10)
    assert done.status_code == 202, done.text
    return session


def _api_log(stack: Stack) -> str:
    return next(p for p in stack.processes if p.log.name == "api.log").output()


def _tracebacks(log: str) -> int:
    return log.count("Traceback")


def _footprint(conn: redis.Redis) -> dict[bytes, Any]:
    """What asking or reading as an agent leaves in Redis, and nothing that moves on its own
    (the expiry or reminders of other tests' approvals): which approval records exist, the
    tokens, each token's request counts and idempotency keys."""
    found: dict[bytes, Any] = {key: b"exists" for key in conn.keys(store.keys.approval_key("*"))}
    counts = store.keys.rate_key("*", 0).removesuffix("0") + "*"
    for pattern in (store.keys.TOKENS_KEY, store.keys.idempotency_key("*", "*"), counts):
        found.update({key: key_value(conn, key) for key in conn.keys(pattern)})
    return found


def _grown(before: dict[bytes, Any], after: dict[bytes, Any]) -> set[bytes]:
    """The keys that are new or changed (a count whose minute passed may have expired)."""
    return {key for key, value in after.items() if before.get(key) != value}


def _normal_call(stack: Stack, token: str) -> Any:
    async def run() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(stack.api_url + "/mcp", http_client=http)
            async with Client(transport) as client:
                return await client.call_tool("list_pending", {})

    return asyncio.run(run())


# --- the tests --------------------------------------------------------------------------------


def test_hostile_requests_without_a_valid_token_are_refused_and_change_nothing(
    stack: Stack,
) -> None:
    """Any method, headers and body without a valid bearer token get 401 (413 for a body
    declared over the cap, 400 for a head HTTP itself refuses), in time, with no approval,
    token, request count or idempotency key added or changed in Redis; then a normal call with
    a token still works."""
    url = stack.api_url + "/mcp"
    revoked = stack.token("mcp-hostile-revoked")
    revoke_token(stack.conn, verify_token(stack.conn, revoked).id)  # type: ignore[union-attr]
    tracebacks = _tracebacks(_api_log(stack))
    before = _footprint(stack.conn)

    hand_picked: list[tuple[str, dict[str, bytes | None], bytes | list[bytes], set[int]]] = [
        ("POST", {}, json.dumps(INITIALIZE).encode(), {401}),
        ("POST", {"Content-Type": b"application/json"}, b"[" * 60_000, {401}),
        ("POST", {"Content-Type": b"application/json"}, b"x" * (MAX_BODY + 1), {413}),
        ("POST", {"Content-Type": b"application/json"}, [b"x" * 50_000] * 4, {401}),
        ("GET", {"Accept": b"text/event-stream"}, b"", {401}),
        ("DELETE", {"Mcp-Session-Id": b"0" * 32}, b"", {401}),
        ("POST", {"Authorization": b"Bearer \xff\xfe"}, b"{}", {401}),
        ("POST", {"Host": b"evil.example", "Origin": b"http://evil.example"}, b"{}", {401}),
    ]
    for method, headers, body, expected in hand_picked:
        status = _send(url, method, {**headers, "Accept": MCP_HEADERS["Accept"].encode()}, body)
        assert status in expected, (method, headers, status)

    @FUZZ
    @given(st.data())
    def requests(data: st.DataObject) -> None:
        headers: dict[str, bytes | None] = {
            "Authorization": data.draw(_bad_tokens(stack, revoked), label="authorization"),
            "Content-Type": data.draw(CONTENT_TYPES | HEADER_VALUES),
            "Accept": data.draw(ACCEPTS | HEADER_VALUES),
        }
        if data.draw(st.booleans()):
            headers["Mcp-Session-Id"] = data.draw(HEADER_VALUES)
        if data.draw(st.booleans()):
            headers["Mcp-Protocol-Version"] = data.draw(HEADER_VALUES)
        body = data.draw(_bodies())
        status = _send(url, data.draw(HTTP_METHODS), headers, body)
        assert status in (400, 401), status

    requests()
    assert _grown(before, settled(lambda: _footprint(stack.conn))) == set()
    assert _tracebacks(_api_log(stack)) == tracebacks
    token = stack.token("mcp-hostile-after")
    assert not _normal_call(stack, token).is_error


def test_hostile_requests_with_a_valid_token_are_answered_and_ask_nothing(stack: Stack) -> None:
    """Inside a session of a valid token, malformed JSON-RPC, unknown methods, wrong argument
    types, odd headers and bodies over the cap get an answer below 500 in time and ask for
    nothing (only the token's request count moves); the session then still works."""
    agent = "mcp-hostile-agent"
    token = stack.token(agent)
    token_id = verify_token(stack.conn, token).id  # type: ignore[union-attr]
    url = stack.api_url + "/mcp"
    session = _open_session(stack, token)
    tracebacks = _tracebacks(_api_log(stack))
    before = _footprint(stack.conn)
    own: dict[str, bytes | None] = {
        "Authorization": f"Bearer {token}".encode(),
        "Mcp-Session-Id": session.encode(),
        "Accept": MCP_HEADERS["Accept"].encode(),
        "Content-Type": b"application/json",
    }

    def call(name: str, arguments: Any) -> bytes:
        params = {"name": name, "arguments": arguments}
        return json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params})

    hand_picked: list[tuple[dict[str, bytes | None], bytes | list[bytes]]] = [
        ({}, b"[" * 60_000 + b"]" * 60_000),
        ({}, b"x" * (MAX_BODY + 1)),
        ({}, [b" " * 50_000] * 4),  # chunked, over the cap: refused while the SDK reads it
        ({}, b"\xff\xfe{}"),
        ({}, call("request_approval", {"tool": 5, "arguments": {"a": "\ud800"}}).encode()),
        ({}, call("request_approval", {"tool": "x", "arguments": [1]}).encode()),
        ({}, call("request_approval", {"tool": "\ud800", "arguments": "\udfff"}).encode()),
        ({}, call("no_such_tool", {}).encode()),
        ({"Content-Type": b"text/plain"}, call("list_pending", {}).encode()),
        ({"Accept": b"text/html"}, call("list_pending", {}).encode()),
        ({"Mcp-Session-Id": b"0" * 32}, call("list_pending", {}).encode()),
        ({"Mcp-Protocol-Version": b"1999-01-01"}, call("list_pending", {}).encode()),
        ({"Host": b"evil.example"}, call("list_pending", {}).encode()),
        ({"Origin": b"http://evil.example"}, call("list_pending", {}).encode()),
        ({"Mcp-Session-Id": None}, json.dumps(INITIALIZE).encode()),
    ]
    for headers, body in hand_picked:
        status = _send(url, "POST", {**own, **headers}, body)
        assert status < 500, (headers, body[:40] if isinstance(body, bytes) else "chunked")

    @FUZZ
    @given(st.data())
    def requests(data: st.DataObject) -> None:
        headers = dict(own)
        for name, values in [
            ("Content-Type", CONTENT_TYPES | HEADER_VALUES),
            ("Accept", ACCEPTS | HEADER_VALUES),
            ("Mcp-Protocol-Version", HEADER_VALUES),
        ]:
            headers[name] = data.draw(_mostly(headers.get(name), values), label=name)
        assert _send(url, "POST", headers, data.draw(_bodies())) < 500

    requests()
    counts = store.keys.rate_key(token_id, 0).removesuffix("0").encode()
    grown = _grown(before, settled(lambda: _footprint(stack.conn)))
    assert {key for key in grown if not key.startswith(counts)} == set()
    assert external.pending_of(stack.conn, agent, 10) == []
    assert _tracebacks(_api_log(stack)) == tracebacks
    assert _send(url, "DELETE", own) == 200  # the session outlived it all, and ends
    assert not _normal_call(stack, token).is_error
