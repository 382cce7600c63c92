"""Signed HTTP requests shaped like the ones Slack sends to a Bolt app's request URL.

The sandbox of ``approvals dev`` sends these to the bot when someone clicks in the browser, and
the tests send them directly (``tests/slack_requests.py`` re-exports this module).

Why it exists: the bot is tested over real HTTP, so its signature check, body parsing and
``ack()`` timing run exactly as in production. These helpers sign bodies the way Slack does
(``v0=HMAC-SHA256(secret, "v0:<ts>:<body>")``) and build payloads with the fields real Slack
payloads carry, so a handler that reads ``body["container"]["message_ts"]`` or
``body["view"]["private_metadata"]`` meets the same structure it will meet in Slack.

Interactivity goes as ``application/x-www-form-urlencoded`` with one ``payload=<json>`` field,
slash commands as plain form fields, and Events API callbacks as JSON.

No helper ever puts a real ``slack.com`` URL into a payload: pass a stand-in's
``new_response_url()`` as ``response_url`` so ``respond()`` stays on this machine.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

__all__ = [
    "FORM",
    "JSON",
    "block_actions_payload",
    "event_callback_payload",
    "post_signed",
    "send_command",
    "send_event",
    "send_interaction",
    "signature_headers",
    "slash_command_form",
    "view_submission_payload",
]

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
API_APP_ID = "A0001"
VERIFICATION_TOKEN = "legacy-verification-token"
"""Slack still sends the deprecated verification token in every payload; Bolt ignores it."""
TEAM_DOMAIN = "test"

_event_ids = itertools.count(1)


def signature_headers(secret: str, body: str, timestamp: int | None = None) -> dict[str, str]:
    """Return Slack's two signing headers for ``body``, signed now or at ``timestamp``.

    Pass an old ``timestamp`` to check that the app refuses replayed requests (> 300 s).
    """
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = f"v0:{ts}:{body}".encode()
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def post_signed(
    url: str,
    secret: str,
    body: str,
    content_type: str,
    timestamp: int | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, str]:
    """POST ``body`` signed with ``secret``; return ``(status, response body)``.

    HTTP errors come back as values rather than exceptions, because tests assert on 401s and
    404s as often as on 200s. ``headers`` are added last, so they can override the signature.
    """
    all_headers = {"Content-Type": content_type, **signature_headers(secret, body, timestamp)}
    all_headers.update(headers or {})
    request = urllib.request.Request(url, data=body.encode(), headers=all_headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def _user(user_id: str, team_id: str, name: str | None = None) -> dict[str, str]:
    name = name or user_id.lower()
    return {"id": user_id, "username": name, "name": name, "team_id": team_id}


def _team(team_id: str) -> dict[str, str]:
    return {"id": team_id, "domain": TEAM_DOMAIN}


def block_actions_payload(
    *,
    user_id: str,
    action_id: str,
    value: str,
    channel_id: str = "C0CARDS",
    message_ts: str | None = None,
    response_url: str | None = None,
    trigger_id: str = "111.222.abc",
    block_id: str = "b1",
    container_type: str = "message",
    team_id: str = "T0001",
    message: dict[str, Any] | None = None,
    view_id: str = "V0001",
    view: dict[str, Any] | None = None,
    is_ephemeral: bool = False,
    button_text: str | None = None,
    user_name: str | None = None,
) -> dict[str, Any]:
    """A ``block_actions`` payload for a button click, as Slack sends it.

    ``container_type="message"`` (a button on a message) adds ``channel`` and ``message``; its
    ``message_ts`` defaults to the stand-in's first ts. ``message`` overrides fields of the
    clicked message (say its real ``blocks``). ``is_ephemeral`` marks a button on a message only
    the clicker sees: Slack then sends no ``message``. ``container_type="view"`` (a button in a
    modal or Home tab) adds ``view`` instead, whose fields ``view`` overrides. ``response_url``
    is only included when given; ``button_text`` is the clicked button's label. ``user_name``
    defaults to the user id in lower case.
    """
    now = f"{time.time():.6f}"
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": _user(user_id, team_id, user_name),
        "api_app_id": API_APP_ID,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id,
        "team": _team(team_id),
        "enterprise": None,
        "is_enterprise_install": False,
        "state": {"values": {}},
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "text": {"type": "plain_text", "text": button_text or action_id, "emoji": True},
                "value": value,
                "type": "button",
                "action_ts": now,
            }
        ],
    }
    if container_type == "message":
        ts = message_ts or "1700000000.000100"
        payload["container"] = {
            "type": "message",
            "message_ts": ts,
            "channel_id": channel_id,
            "is_ephemeral": is_ephemeral,
        }
        payload["channel"] = {"id": channel_id, "name": channel_id.lower()}
        if not is_ephemeral:
            payload["message"] = {
                "type": "message",
                "subtype": "bot_message",
                "text": "",
                "user": "UBOT",
                "ts": ts,
                "bot_id": "B0001",
                "app_id": API_APP_ID,
                "team": team_id,
                "blocks": [],
                **(message or {}),
            }
    else:
        payload["container"] = {"type": container_type, "view_id": view_id}
        payload["view"] = {
            **_view(view_id, team_id, callback_id="", private_metadata="", values={}),
            **(view or {}),
        }
    if response_url is not None:
        payload["response_url"] = response_url
    return payload


def _view(
    view_id: str, team_id: str, *, callback_id: str, private_metadata: str, values: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": view_id,
        "team_id": team_id,
        "type": "modal",
        "blocks": [],
        "private_metadata": private_metadata,
        "callback_id": callback_id,
        "state": {"values": values},
        "hash": "1700000000.AbCdEf12",
        "title": {"type": "plain_text", "text": "Approval", "emoji": True},
        "clear_on_close": False,
        "notify_on_close": False,
        "close": {"type": "plain_text", "text": "Cancel", "emoji": True},
        "submit": {"type": "plain_text", "text": "Submit", "emoji": True},
        "previous_view_id": None,
        "root_view_id": view_id,
        "app_id": API_APP_ID,
        "external_id": "",
        "app_installed_team_id": team_id,
        "bot_id": "B0001",
    }


def view_submission_payload(
    *,
    user_id: str,
    callback_id: str,
    private_metadata: str,
    values: dict[str, Any],
    view_id: str = "V0001",
    team_id: str = "T0001",
    view: dict[str, Any] | None = None,
    user_name: str | None = None,
) -> dict[str, Any]:
    """A ``view_submission`` payload; ``values`` is ``view.state.values`` as Slack sends it.

    That is ``{block_id: {action_id: {"type": "plain_text_input", "value": "..."}}}``.
    ``view`` is the submitted view as Slack holds it (its blocks, title, hash...).
    """
    return {
        "type": "view_submission",
        "team": _team(team_id),
        "user": _user(user_id, team_id, user_name),
        "api_app_id": API_APP_ID,
        "token": VERIFICATION_TOKEN,
        "trigger_id": "111.222.view",
        "view": {
            **_view(view_id, team_id, callback_id="", private_metadata="", values={}),
            **(view or {}),
            "id": view_id,
            "callback_id": callback_id,
            "private_metadata": private_metadata,
            "state": {"values": values},
        },
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def slash_command_form(
    *,
    user_id: str,
    command: str = "/agent-pending",
    text: str = "",
    channel_id: str = "C0CARDS",
    response_url: str,
    trigger_id: str = "111.222.abc",
    team_id: str = "T0001",
    user_name: str | None = None,
) -> dict[str, str]:
    """The form fields Slack posts for a slash command."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team_id,
        "team_domain": TEAM_DOMAIN,
        "channel_id": channel_id,
        "channel_name": channel_id.lower(),
        "user_id": user_id,
        "user_name": user_name or user_id.lower(),
        "command": command,
        "text": text,
        "api_app_id": API_APP_ID,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id,
    }


def event_callback_payload(
    event: dict[str, Any],
    *,
    event_id: str | None = None,
    team_id: str = "T0001",
    bot_user_id: str = "UBOT",
) -> dict[str, Any]:
    """The Events API envelope around ``event``; ``event_id`` is unique unless given.

    Give the same ``event_id`` twice to test de-duplication of Slack's retries.
    """
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team_id,
        "api_app_id": API_APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{next(_event_ids):08d}",
        "event_time": int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
    }


def send_interaction(url: str, secret: str, payload: dict[str, Any], **kw: Any) -> tuple[int, str]:
    """Post an interactivity payload as Slack does: form body ``payload=<json>``."""
    body = urlencode({"payload": json.dumps(payload)})
    return post_signed(url, secret, body, FORM, **kw)


def send_command(url: str, secret: str, form: dict[str, str], **kw: Any) -> tuple[int, str]:
    """Post slash-command form fields."""
    return post_signed(url, secret, urlencode(form), FORM, **kw)


def send_event(
    url: str,
    secret: str,
    event: dict[str, Any],
    *,
    event_id: str | None = None,
    retry_num: int | None = None,
    team_id: str = "T0001",
    **kw: Any,
) -> tuple[int, str]:
    """Post an Events API callback wrapping ``event``.

    ``retry_num`` adds the ``X-Slack-Retry-Num``/``X-Slack-Retry-Reason`` headers Slack puts
    on redeliveries (reuse the ``event_id`` to make it a true retry).
    """
    body = json.dumps(event_callback_payload(event, event_id=event_id, team_id=team_id))
    if retry_num is not None:
        retry = {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "http_timeout"}
        kw["headers"] = {**retry, **(kw.get("headers") or {})}
    return post_signed(url, secret, body, JSON, **kw)
