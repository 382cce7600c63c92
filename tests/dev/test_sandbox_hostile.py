"""Hostile requests to the dev sandbox: its page, its page API (``/sandbox/*``), its Web API
stand-in (``/api/*``, ``/response/*``) and its Socket Mode port, the twin of the bot's
``test_hostile_input.py``. Every request gets an answer below 500 in time (501 only for a
method HTTP does not define), no traceback is logged, the workspace is unchanged and the bot
receives nothing."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.dev.test_sandbox_server import ME, FakeBot, bot, sandbox, state  # noqa: F401
from tests.hostile_http import Request, acceptable, exchange, requests

FUZZ = settings(max_examples=150, deadline=None, database=None)
PAGE_PATHS = [
    "/",
    "/static/sandbox.js",
    "/sandbox/config",
    "/sandbox/state",
    "/sandbox/click",
    "/sandbox/submit",
    "/sandbox/send",
    "/sandbox/dismiss",
    "/sandbox/close",
    "/sandbox/home",
    "/api/chat.postMessage",
    "/api/auth.test",
    "/api/apps.connections.open",
    "/response/1",
]
#: Page actions that, for a known person, change nothing unless the body makes sense.
ACTIONS = ["/sandbox/click", "/sandbox/submit", "/sandbox/send", "/sandbox/dismiss"]
TEXT = st.text(max_size=12) | st.sampled_from(["\ud800", "\x00", "\u202e"])
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
#: Never a non-blank text: a composer message would be a legitimate change.
NO_TEXT = st.sampled_from([None, "", "   ", 0, False, [], {}])
#: Shaped like the page's own, with any field replaced by junk, so most get past the first
#: lookup and into the code that builds the bot's request.
CONTAINERS = JUNK | st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "view", "ephemeral", "home"]) | JUNK},
    optional={"channel": JUNK, "ts": JUNK, "view_id": JUNK, "id": JUNK},
)
CLICKED = JUNK | st.fixed_dictionaries(
    {"action_id": st.sampled_from(["approval_approve", "approval_edit"]) | TEXT},
    optional={"value": JUNK, "block_id": JUNK, "selected_option": JUNK, "text": JUNK},
)


def _post_json(url: str, body: Any) -> int:
    data = json.dumps(body).encode()  # lone surrogates travel as \\ud800 escapes
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        with error:
            return error.code


def _where(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def test_hostile_requests_to_the_sandbox_are_answered_and_change_nothing(
    sandbox,  # noqa: F811 - the fixture imported above
    bot,  # noqa: F811
    capfd,
    caplog,
):
    """Raw hostile requests on both ports, and JSON page actions with mistyped fields from
    known and unknown people: below 500 in time, no traceback, nothing changed, nothing
    sent to the bot; afterwards the page still works."""
    caplog.set_level(logging.INFO)
    before = state(sandbox)
    page = _where(sandbox.url)
    socket_port = _where(sandbox.workspace.socket_mode.url.replace("ws://", "http://"))

    @FUZZ
    @given(requests(PAGE_PATHS))
    def raw_page(request: Request) -> None:
        status = exchange(*page, request)
        assert acceptable(request, status), (status, request)

    @settings(max_examples=60, deadline=None, database=None)
    @given(requests(["/link/", "/link/?ticket=x&app_id=A0001", "/"]))
    def raw_socket_mode(request: Request) -> None:
        status = exchange(*socket_port, request)
        assert acceptable(request, status), (status, request)

    @FUZZ
    @given(st.data())
    def page_actions(data: st.DataObject) -> None:
        path = data.draw(st.sampled_from(ACTIONS))
        body = data.draw(
            st.fixed_dictionaries(
                {"user": st.sampled_from([ME, "UNOBODY"]) | JUNK},
                optional={
                    "container": CONTAINERS,
                    "action": CLICKED,
                    "state": JUNK,
                    "values": JUNK,
                    "id": JUNK,
                    "channel": JUNK,
                    "thread": JUNK,
                    "text": NO_TEXT,
                },
            )
            | JUNK
        )
        assert _post_json(sandbox.url.rstrip("/") + path, body) < 500, (path, body)

    raw_page()
    raw_socket_mode()
    page_actions()

    after = state(sandbox)
    assert after["revision"] == before["revision"] and after["main"] == before["main"]
    assert bot.requests == []
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and not _upstream(r)]
    assert errors == []
    assert "Traceback" not in capfd.readouterr().err


def _upstream(record: logging.LogRecord) -> bool:
    """websockets' own bug, not ours: its threading server (17.4) logs "unexpected internal
    error" when a client sends bytes after a request it answers with plain HTTP (a refused
    handshake) and then closes its side; about one time in two, with a bare ``serve()`` and
    no code of ours involved. The request still gets its answer; the connection is closed."""
    return record.name == "approvals.dev.sandbox.socket_mode" and (
        record.getMessage() == "unexpected internal error"
    )
