"""Hostile and broken input to the API's /v1 routes is answered, never crashes it, and changes
nothing: the twin of tests/bot/test_hostile_input.py for ``approvals api``.

Hypothesis draws bodies, content types, headers, paths and query strings, sent verbatim
(``http.client``) to ``approvals api`` alone on its own database (``lone_api``). Every answer
comes at once and below 500; a refusal is a 4xx with the body the OpenAPI document lists for
it; a request that creates nothing leaves every key of the database as it was; the API logs
no traceback; and a normal request still works after each fuzz.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals.api.bodies import MAX_DEPTH
from tests.api.conftest import LoneApi
from tests.api.contract import check

FUZZ = settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: Seconds any answer may take: bad input is answered at once (only a valid ``wait`` on a
#: pending approval holds an answer, and these tests never send one).
PROMPT = 10.0
CREATE = "/v1/approvals"
ONE = "/v1/approvals/{approval_id}"
RESULT = "/v1/approvals/{approval_id}/result"
UNKNOWN_ID = "0000000000000000"

# --- strategies -----------------------------------------------------------------------------

#: Characters that break naive code: NUL, bidi controls, emoji, a combining mark, a lone
#: surrogate (a JSON escape can carry one; UTF-8 cannot).
EDGES = st.sampled_from(["\x00", "\u202e", "\u200f", "\U0001f600", "\u0301", "\ud800", "\udfff"])
TEXT = st.text(st.characters() | EDGES, max_size=30)
NUMBERS = (
    st.integers()
    | st.sampled_from([2**53 + 1, 2**64, -(2**63) - 1])
    | st.floats(allow_nan=False, allow_infinity=False)
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | NUMBERS | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from(
    ["tool", "arguments", "schema", "summary", "preview", "agent", "requested_by", "channel",
     "expires_in", "editable", "approvers", "approver_groups", "approvals_required",
     "reason_required", "idempotency_key", "run_id", "grantable", "remind_after",
     "escalate_after", "escalate_to", "ok", "output", "x"]
)  # fmt: skip
#: JSON texts strict JSON refuses, or that sit at its edges.
ODD_JSON = st.sampled_from(
    ["NaN", "Infinity", "-Infinity", "1e999", "-0", "1E400", "1e-400", "01", "1.", ".5", "+1",
     "0x10", "'a'", "undefined", '"\\ud800"', '"\\u0000"', '"\\x"', "[1,]", "{,}", "true false"]
)  # fmt: skip


def _odd_body(value: str) -> bytes:
    return f'{{"tool": "deploy", "arguments": {{"x": {value}}}}}'.encode()


def _nested(depth: int) -> bytes:
    return b'{"tool": "deploy", "arguments": ' + b"[" * depth + b"]" * depth + b"}"


BODIES = st.one_of(
    st.dictionaries(FIELDS, JSON_VALUES, max_size=6).map(lambda body: json.dumps(body).encode()),
    st.fixed_dictionaries({"tool": st.just("deploy"), "arguments": JSON_VALUES}).map(
        lambda body: json.dumps(body).encode()
    ),
    JSON_VALUES.map(lambda value: json.dumps(value).encode()),
    st.binary(max_size=300),
    ODD_JSON.map(_odd_body),
    st.integers(MAX_DEPTH - 2, 3000).map(_nested),
    st.sampled_from(
        [
            b'{"tool": "deploy", "tool": "x", "arguments": {}}',
            b'\xef\xbb\xbf{"tool": "deploy", "arguments": {}}',
            b'{"tool": "deploy", "arguments": {"x": "\xff"}}',
            '{"tool": "deploy", "arguments": {"x": "\ud800"}}'.encode("utf-8", "surrogatepass"),
            '{"tool": "deploy", "arguments": {}}'.encode("utf-16"),
            b'{"ok": true, "output": "' + b"x" * 70_000 + b'"}',
            b"",
        ]
    ),
)
CONTENT_TYPES = st.sampled_from(
    ["application/json", "application/json; charset=utf-8", "application/json; charset=latin-1",
     "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=zz",
     "application/vnd.api+json", "application/", "json", ";;;", "", None]
)  # fmt: skip
#: Header names an attacker would try first, and any token-shaped name.
HEADER_NAMES = st.sampled_from(
    ["Authorization", "Content-Type", "Accept", "Accept-Encoding", "X-Forwarded-For",
     "X-Forwarded-Host", "Origin", "Cookie", "Idempotency-Key", "Range", "Expect"]
) | st.from_regex(r"\AX-[A-Za-z0-9-]{1,20}\Z")  # fmt: skip
#: Header values http.client can send: latin-1, without line breaks.
HEADER_VALUES = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=60
)
QUERY_VALUES = st.one_of(
    st.sampled_from(
        ["nan", "inf", "-inf", "-0", "1e-320", "1e309", "", "abc", "0x10", "60.0000001", "61",
         "-1", "0", "true", "[]", "9" * 400, "%", "%zz", "%ed%a0%80", "%00", "1&wait=2"]
    ),
    st.floats().map(repr),
    st.integers().map(str),
    TEXT.map(lambda text: urllib.parse.quote(text.encode("utf-8", "surrogatepass"))),
)  # fmt: skip
QUERY_NAMES = st.sampled_from(["wait", "limit", "status", "idempotency_key", "x", "", "wait[]"])
PATH_SEGMENTS = st.one_of(
    st.sampled_from(
        ["..", "%2e%2e", "..%2f..%2fetc", "%00", "0123456789ABCDEF", "0123456789abcde",
         "0123456789abcdef0", "x" * 8000, "%ff%fe", "%ed%a0%80", "approvals:pending", "*",
         "%2F", "a%2Fb", ";", "?", "#"]
    ),
    TEXT.map(lambda text: urllib.parse.quote(text.encode("utf-8", "surrogatepass"), safe="")),
)  # fmt: skip

# --- helpers ----------------------------------------------------------------------------------


@dataclass
class Target:
    """The API under fuzz, a token of its own agent, and approvals to aim at."""

    api: LoneApi
    token: str
    pending: str
    decided: str
    theirs: str
    log_start: int

    def auth(self) -> list[tuple[str, str]]:
        return [("Authorization", f"Bearer {self.token}")]


@pytest.fixture(scope="module")
def target(lone_api: LoneApi) -> Iterator[Target]:
    token = lone_api.token("hostile")
    pending = _create(lone_api.url, token)
    decided = _create(lone_api.url, token)
    lone_api.decide(decided, {"path": "docs/"})
    theirs = _create(lone_api.url, lone_api.token("bystander"))
    yield Target(lone_api, token, pending, decided, theirs, len(lone_api.process.output()))


def _create(url: str, token: str) -> str:
    made = httpx.post(
        url + CREATE,
        json={"tool": "deploy", "arguments": {"path": "web"}},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert made.status_code == 201, made.text
    approval_id: str = made.json()["id"]
    return approval_id


def _send(
    target: Target,
    method: str,
    path: str,
    headers: Sequence[tuple[str, str]],
    body: bytes | None = None,
) -> httpx.Response:
    """Send exactly these bytes, headers and path; return the answer once checked: below 500,
    within ``PROMPT``, a refusal in its documented shape, and nothing changed unless an
    approval was created."""
    before = target.api.state()
    parsed = urllib.parse.urlsplit(target.api.url)
    connection = http.client.HTTPConnection(parsed.netloc, timeout=PROMPT)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        raw = connection.getresponse()
        answer = httpx.Response(raw.status, headers=raw.getheaders(), content=raw.read())
    finally:
        connection.close()
    sent = (method, path, headers, (body or b"")[:300])
    assert answer.status_code < 500, (sent, answer.status_code, answer.text)
    if answer.status_code >= 400:
        check(target.api.url, _route(method, path), method, answer)
    if answer.status_code != 201:
        assert target.api.state() == before, (sent, answer.status_code)
    return answer


def _route(method: str, path: str) -> str | None:
    """The route of the document that serves ``method path`` as the server reads the path
    (percent-decoded, without its query), if any."""
    plain = urllib.parse.unquote(path.split("?", 1)[0], errors="surrogateescape")
    for route, pattern, methods in (
        (CREATE, r"/v1/approvals", {"GET", "POST"}),
        (ONE, r"/v1/approvals/[^/]+", {"GET"}),
        (RESULT, r"/v1/approvals/[^/]+/result", {"POST"}),
    ):
        if re.fullmatch(pattern, plain) and method in methods:
            return route
    return None


def _still_works(target: Target) -> None:
    """A normal request is answered as before, and the API logged no traceback."""
    made = _create(target.api.url, target.token)
    got = httpx.get(
        f"{target.api.url}{CREATE}/{made}", headers={"Authorization": f"Bearer {target.token}"}
    )
    assert got.status_code == 200 and got.json()["status"] == "pending"
    log = target.api.process.output()[target.log_start :]
    assert "Traceback" not in log, log[-4000:]


# --- the fuzzes -------------------------------------------------------------------------------


def test_hostile_bodies_and_content_types(target: Target) -> None:
    """Any bytes, JSON value, field and content type, to both routes that read a body: 201, or
    a documented refusal that created nothing (never a 400: unreadable bodies are a 422)."""

    @FUZZ
    @given(body=BODIES, content_type=CONTENT_TYPES, route=st.sampled_from([CREATE, RESULT]))
    def fuzz(body: bytes, content_type: str | None, route: str) -> None:
        headers = target.auth()
        if content_type is not None:
            headers.append(("Content-Type", content_type))
        path = CREATE if route == CREATE else f"{CREATE}/{target.pending}/result"
        answer = _send(target, "POST", path, headers, body)
        allowed = {201, 403, 413, 422} if route == CREATE else {409, 413, 422}
        assert answer.status_code in allowed, (answer.status_code, answer.text)

    fuzz()
    _still_works(target)


def test_hostile_headers(target: Target) -> None:
    """Mangled, doubled or foreign Authorization headers and odd other headers: 200 with the
    valid token only, 401 otherwise, with ``WWW-Authenticate``; never anything else."""
    token = target.token
    authorizations = st.sampled_from(
        ["", "Bearer", "Bearer ", f"Basic {token}", f"Bearer {token}x", f"Bearer x{token}",
         "Bearer " + "a" * 8000, "Bearer apv_\xe9", f"Token {token}", f"Bearer\t{token}",
         f"Bearer {token} extra", f"bearer {token}", f"BEARER {token}", f"Bearer  {token}",
         f"Bearer {token}\xa0"]
    ) | HEADER_VALUES  # fmt: skip

    @FUZZ
    @given(
        authorization=st.lists(authorizations, max_size=2),
        others=st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=4),
    )
    def fuzz(authorization: list[str], others: list[tuple[str, str]]) -> None:
        headers = [("Authorization", value) for value in authorization] + others
        answer = _send(target, "GET", CREATE, headers)
        assert answer.status_code in (200, 401, 422), answer.text
        if answer.status_code == 401:
            assert answer.headers["WWW-Authenticate"] == "Bearer"

    fuzz()
    _still_works(target)


def test_hostile_paths_and_methods(target: Target) -> None:
    """Traversal, encoded separators and NULs, wrong-length and other agents' ids, trailing
    slashes, under every method: 404 (never a redirect) or 405 (with ``Allow``), or the
    route's own refusal; never a 5xx."""

    @FUZZ
    @given(
        segment=PATH_SEGMENTS | st.sampled_from([target.theirs, UNKNOWN_ID]),
        suffix=st.sampled_from(["", "/result", "/result/x", "/", "//"]),
        prefix=st.sampled_from(["/v1/approvals/", "/v1//approvals/", "/v1/approvals/x/", "/"]),
        method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]),
    )
    def fuzz(segment: str, suffix: str, prefix: str, method: str) -> None:
        path = prefix + segment + suffix
        body = b'{"ok": true}' if method != "GET" else None
        headers = [*target.auth(), ("Content-Type", "application/json")]
        answer = _send(target, method, path, headers, body)
        assert answer.status_code in (404, 405, 422), (path, answer.status_code)
        if answer.status_code == 405:
            assert answer.headers["Allow"]

    fuzz()
    _still_works(target)


def test_hostile_query_strings(target: Target) -> None:
    """Any names and values, repeated or malformed, on the two reads: 200 or a 422 naming the
    parameter; never a hang (the approval read is decided, so no wait holds an answer)."""

    @FUZZ
    @given(
        pairs=st.lists(st.tuples(QUERY_NAMES, QUERY_VALUES), max_size=4),
        path=st.sampled_from([CREATE, f"{CREATE}/{target.decided}"]),
        junk=st.sampled_from(["", "&", "&&", "=", "&=&", ";", "%", "?"]),
    )
    def fuzz(pairs: list[tuple[str, str]], path: str, junk: str) -> None:
        query = "&".join(f"{name}={value}" for name, value in pairs) + junk
        answer = _send(target, "GET", f"{path}?{query}", target.auth())
        assert answer.status_code in (200, 422), (query, answer.text)
        if answer.status_code == 422:
            assert all(problem["loc"][0] == "query" for problem in answer.json()["detail"])

    fuzz()
    _still_works(target)


def test_another_agents_approval_is_never_told(target: Target) -> None:
    """Another agent's approval, by any route and query: the same 404 as an unknown id, and
    it is not listed."""
    for path, method, body in (
        (f"{CREATE}/{target.theirs}", "GET", None),
        (f"{CREATE}/{target.theirs}?wait=0.001", "GET", None),
        (f"{CREATE}/{target.theirs}/result", "POST", b'{"ok": true}'),
    ):
        headers = [*target.auth(), ("Content-Type", "application/json")]
        theirs = _send(target, method, path, headers, body)
        unknown = _send(target, method, path.replace(target.theirs, UNKNOWN_ID), headers, body)
        assert theirs.status_code == unknown.status_code == 404
        assert theirs.json() == unknown.json()
    listed = _send(target, "GET", CREATE, target.auth()).json()["approvals"]
    assert target.theirs not in {approval["id"] for approval in listed}
