"""Requests over real HTTP against the real bot process (gunicorn, Bolt's own request path):
the empty answer to a click, the checks before anything acts (Bolt's signature verification,
the replay guard, payloads Bolt would crash on), and the work after the answer."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from slack_bolt import BoltRequest

from approvals import store
from approvals.bot.listeners.commands import PENDING_COMMAND
from approvals.bot.modals import EDIT_VIEW, VALUE_ACTION
from approvals.models import Status
from approvals.slack.cards import APPROVE_ACTION, EDIT_ACTION
from tests.conftest import SIGNING_SECRET
from tests.e2e import (
    action_blocks,
    at_once,
    block_text,
    card_of,
    card_showing,
    pause,
    redis_state,
    select,
    settled,
    tool_runs,
    wait_status,
)
from tests.processes import wait_until
from tests.slack_requests import (
    FORM,
    JSON,
    block_actions_payload,
    event_callback_payload,
    post_signed,
    signature_headers,
    slash_command_form,
    view_submission_payload,
)

# --- helpers ----------------------------------------------------------------------------------


def _pause(path: str = "build") -> str:
    return pause("delete_path", {"path": path})


def _card_ts(slack, conn, pause_id: str) -> str:
    """The card's ts, once the worker has also recorded it (Redis settles then)."""
    card = card_of(slack, pause_id)
    key = store.keys.approval_key(pause_id)
    wait_until(lambda: conn.hexists(key, "card_ts"), 10, "the card's ts recorded")
    return card.ts


def _click_payload(slack, pause_id: str, card_ts: str, action_id: str = APPROVE_ACTION):
    return block_actions_payload(
        user_id="UALICE",
        action_id=action_id,
        value=pause_id,
        message_ts=card_ts,
        response_url=slack.new_response_url(),
    )


def _form(payload: dict[str, Any]) -> str:
    return urlencode({"payload": json.dumps(payload)})


def _send(url: str, body: str, content_type: str = FORM, **kw: Any) -> tuple[int, str]:
    return post_signed(url, SIGNING_SECRET, body, content_type, **kw)


def _replay(url: str, body: str, headers: dict[str, str]) -> tuple[int, str]:
    """Send ``body`` with exactly these signing headers."""
    return post_signed(url, "unused", body, FORM, headers=headers)


def _state(conn) -> dict[bytes, bytes]:
    """Every approvals key, DUMPed (the replay guard's signatures included), and RQ's jobs."""
    return redis_state(conn, jobs=True)


def _seen(conn) -> list[bytes]:
    return conn.keys(store.keys.seen_key("*"))


def _crashes(log: str) -> list[str]:
    return [line for line in log.splitlines() if "Traceback" in line or "Failed to run" in line]


def _quiet_since(slack, conn, calls_before: int, state_before: dict[bytes, bytes]) -> None:
    """Nothing changed in Redis and Slack was asked nothing since (read once settled)."""
    assert settled(lambda: (_state(conn), len(slack.calls()))) == (state_before, calls_before)
    assert slack.responses() == []


def _approve_completes(services, slack, env, conn, pause_id: str, card_ts: str) -> None:
    """A genuine Approve click still decides and runs the tool once."""
    assert _send(services.bot_url, _form(_click_payload(slack, pause_id, card_ts))) == (200, "")
    wait_status(conn, pause_id, Status.COMPLETED)
    assert len(settled(lambda: tool_runs(env, "delete_path"))) == 1


# --- the answer and the work after it ----------------------------------------------------------


def test_an_approve_click_is_answered_empty_then_decided_and_run_once(services, slack, env, conn):
    pause_id = _pause()
    card_ts = _card_ts(slack, conn, pause_id)
    body = _form(_click_payload(slack, pause_id, card_ts))
    headers = signature_headers(SIGNING_SECRET, body)

    assert _replay(services.bot_url, body, headers) == (200, "")

    approval = wait_status(conn, pause_id, Status.COMPLETED)
    assert approval.decision is not None and approval.decision.actor == "UALICE"
    updated = card_showing(slack, card_ts, "Completed")
    assert action_blocks(updated) == [] and "<@UALICE>" in block_text(updated)
    assert [r["arguments"] for r in settled(lambda: tool_runs(env, "delete_path"))] == [
        {"path": "build", "recursive": False}
    ]
    # A click on a channel card is answered on the card, not privately.
    assert slack.responses() == [] and slack.ephemerals() == []
    assert conn.exists(store.keys.seen_key(headers["X-Slack-Signature"]))
    events = [e["event"] for e in store.audit.audit_trail(conn, pause_id)]
    assert events.count("approved") == 1, events
    assert _crashes(services.bot.output()) == []


def test_the_same_signed_click_twice_is_refused_the_second_time_and_runs_once(
    services, slack, env, conn
):
    """The replay arrives before the first click's work has run, and again after it."""
    pause_id = _pause()
    card_ts = _card_ts(slack, conn, pause_id)
    body = _form(_click_payload(slack, pause_id, card_ts))
    headers = signature_headers(SIGNING_SECRET, body)
    replayed = (401, {"error": "replayed request"})

    first, second = (
        _replay(services.bot_url, body, headers),
        _replay(services.bot_url, body, headers),
    )
    assert first == (200, "")
    assert (second[0], json.loads(second[1])) == replayed

    wait_status(conn, pause_id, Status.COMPLETED)
    card_showing(slack, card_ts, "Completed")
    decided = settled(lambda: (_state(conn), len(slack.calls())))
    status, text = _replay(services.bot_url, body, headers)
    assert (status, json.loads(text)) == replayed
    assert settled(lambda: (_state(conn), len(slack.calls()))) == decided

    assert len(tool_runs(env, "delete_path")) == 1
    events = [e["event"] for e in store.audit.audit_trail(conn, pause_id)]
    assert events.count("approved") == 1, events
    assert slack.responses() == []
    assert _crashes(services.bot.output()) == []


def test_the_same_signed_click_twice_at_once_is_answered_once(services, slack, env, conn):
    """Two copies in flight together: one gets in, the other is the replay."""
    pause_id = _pause("dist")
    card_ts = _card_ts(slack, conn, pause_id)
    body = _form(_click_payload(slack, pause_id, card_ts))
    headers = signature_headers(SIGNING_SECRET, body)

    answers = at_once(*[lambda: _replay(services.bot_url, body, headers)] * 2)
    assert sorted(status for status, _ in answers) == [200, 401]
    assert (200, "") in answers

    wait_status(conn, pause_id, Status.COMPLETED)
    card_showing(slack, card_ts, "Completed")
    assert [r["arguments"]["path"] for r in settled(lambda: tool_runs(env, "delete_path"))] == [
        "dist"
    ]
    events = [e["event"] for e in store.audit.audit_trail(conn, pause_id)]
    assert events.count("approved") == 1, events


def test_an_approve_click_with_a_bad_signature_gets_401_and_changes_nothing(
    services, slack, env, conn
):
    pause_id = _pause()
    card_ts = _card_ts(slack, conn, pause_id)
    body = _form(_click_payload(slack, pause_id, card_ts))
    headers = signature_headers(SIGNING_SECRET, body)
    before = settled(lambda: _state(conn))
    calls_before = len(slack.calls())
    invalid = (401, {"error": "invalid request"})

    forged = [
        post_signed(services.bot_url, "wrong-secret", body, FORM),
        _replay(services.bot_url, body.replace("UALICE", "UMALLORY"), headers),
        _replay(services.bot_url, body, {**headers, "X-Slack-Signature": "v0=" + "0" * 64}),
        _replay(services.bot_url, body, {**headers, "X-Slack-Signature": ""}),
        post_signed(services.bot_url, SIGNING_SECRET, body, FORM, timestamp=int(time.time()) - 400),
    ]
    assert [(status, json.loads(text)) for status, text in forged] == [invalid] * len(forged)

    _quiet_since(slack, conn, calls_before, before)
    assert _seen(conn) == []
    assert store.records.load(conn, pause_id).status is Status.PENDING
    assert tool_runs(env) == []
    # The genuine signature was not remembered by the forgery that carried it.
    assert _replay(services.bot_url, body, headers) == (200, "")
    wait_status(conn, pause_id, Status.COMPLETED)
    assert len(settled(lambda: tool_runs(env, "delete_path"))) == 1


def _malformed(payload: dict[str, Any], how: str) -> dict[str, Any]:
    if how == "response_url javascript:":
        payload["response_url"] = "javascript:x"
    elif how == "response_url not a string":
        payload["response_url"] = 5
    elif how == "view not an object":
        payload["view"] = "x"
    elif how == "view without a type":
        payload["view"] = {"id": "V1"}
    elif how == "event not an object":
        payload["event"] = "x"
    elif how == "a lone surrogate":
        payload["user"]["name"] = "\ud800"
    return payload


MALFORMED = [
    "response_url javascript:",
    "response_url not a string",
    "view not an object",
    "view without a type",
    "event not an object",
    "a lone surrogate",
]


def test_a_signed_approve_click_that_bolt_could_not_route_gets_400_and_changes_nothing(
    services, slack, env, conn
):
    """actions[0] is Approve's, so Bolt would route it: refused before any listener runs."""
    pause_id = _pause()
    card_ts = _card_ts(slack, conn, pause_id)
    before = settled(lambda: _state(conn))
    calls_before = len(slack.calls())

    for how in MALFORMED:
        payload = _malformed(_click_payload(slack, pause_id, card_ts), how)
        status, text = _send(services.bot_url, _form(payload))
        assert (status, json.loads(text)) == (400, {"error": "malformed request"}), how

    _quiet_since(slack, conn, calls_before, before)
    assert _seen(conn) == []  # refused before the replay guard remembered them
    assert store.records.load(conn, pause_id).status is Status.PENDING
    assert tool_runs(env) == []
    assert _crashes(services.bot.output()) == []
    _approve_completes(services, slack, env, conn, pause_id, card_ts)


def test_authorizations_true_gets_a_4xx_and_no_traceback(services, slack, env, conn):
    """Bolt's request building raises on ``"authorizations": true``; the bot answers 400
    before anything acts on it, whichever listener the payload names."""
    pause_id = _pause()
    card_ts = _card_ts(slack, conn, pause_id)
    before = settled(lambda: _state(conn))
    calls_before = len(slack.calls())

    approve = _click_payload(slack, pause_id, card_ts)
    edit = _click_payload(slack, pause_id, card_ts, EDIT_ACTION)  # opens a modal: not acked
    home = event_callback_payload({"type": "app_home_opened", "user": "UALICE", "tab": "home"})
    command = slash_command_form(user_id="UALICE", response_url=slack.new_response_url())
    bodies = [
        (_form({**approve, "authorizations": True}), FORM),
        (_form({**edit, "authorizations": True}), FORM),
        (json.dumps({**home, "authorizations": True}), JSON),
        (json.dumps({**command, "authorizations": True}), JSON),
    ]
    for body, content_type in bodies:
        with pytest.raises(TypeError):  # the premise: Bolt cannot build its request
            BoltRequest(body=body, headers={"content-type": [content_type]})
        status, _ = _send(services.bot_url, body, content_type)
        assert 400 <= status < 500, body[:80]
        # Unsigned: the same (the body is read before the signature, as in Bolt).
        status, _ = post_signed(services.bot_url, "wrong-secret", body, content_type)
        assert 400 <= status < 500, body[:80]

    _quiet_since(slack, conn, calls_before, before)
    assert _seen(conn) == []
    assert _crashes(services.bot.output()) == []
    _approve_completes(services, slack, env, conn, pause_id, card_ts)
    assert _crashes(services.bot.output()) == []


def _edit_submission(pause_id: str) -> dict[str, Any]:
    """An Edit submission the modal refuses (``recursive`` is never valid): its answer is the
    errors to show, and nothing is decided."""
    state = {
        "arg-path": {VALUE_ACTION: {"type": "plain_text_input", "value": "build"}},
        "arg-recursive": {VALUE_ACTION: select('"maybe"')},
    }
    return view_submission_payload(
        user_id="UALICE", callback_id=EDIT_VIEW, private_metadata=pause_id, values=state
    )


def test_a_modal_submission_carrying_a_command_field_still_gets_its_errors(
    services, slack, env, conn
):
    """Bolt routes a view_submission to its view listener, whose answer carries the errors,
    even when the payload also carries a slash command's field."""
    pause_id = _pause()
    _card_ts(slack, conn, pause_id)
    status, text = _send(services.bot_url, _form(_edit_submission(pause_id)))
    assert status == 200 and json.loads(text)["response_action"] == "errors"

    payload = {**_edit_submission(pause_id), "command": PENDING_COMMAND}
    status, text = _send(services.bot_url, _form(payload))
    assert status == 200
    assert json.loads(text)["response_action"] == "errors"
    assert store.records.load(conn, pause_id).status is Status.PENDING
