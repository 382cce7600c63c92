"""Builds the Bolt app: client, middleware, listeners. Serving it lives in ``bot.server``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redis
from slack_bolt import App, BoltRequest, BoltResponse
from slack_bolt.middleware import Middleware

from approvals import slack, store
from approvals.config import Settings
from bot.listeners import register_listeners
from bot.runtime import Runtime


def check_settings(settings: Settings) -> None:
    """Raise ``ConfigError`` for a setting the bot needs and does not have."""
    settings.require("SLACK_BOT_TOKEN")
    if settings.slack_app_token is None:
        settings.require("SLACK_SIGNING_SECRET")


def create_app(settings: Settings, conn: redis.Redis | None = None) -> App:
    """The Bolt app for these settings (Socket Mode when ``SLACK_APP_TOKEN`` is set).

    Raises:
        ConfigError: a required setting is missing (checked here, not at the first request).
    """
    socket_mode = settings.slack_app_token is not None
    check_settings(settings)
    client = slack.web_client(settings)
    runtime = Runtime(settings=settings, conn=conn or store.connect(settings), client=client)
    app = App(
        client=client,
        signing_secret=settings.slack_signing_secret or "",
        # Socket Mode requests come over an authenticated WebSocket and carry no signature.
        request_verification_enabled=not socket_mode,
        # Right after the signature check: Bolt's authorization already reads the payload.
        before_authorize=RefuseMalformed(),
        # Only custom workflow functions use it; it would let a payload swap the bot token.
        attaching_function_token_enabled=False,
        # Answer from the request's thread; the work runs after (bot/listeners/lazy.py).
        process_before_response=True,
    )
    if not socket_mode:  # after Bolt's own middleware, so only verified signatures count
        app.middleware(RefuseReplays(runtime.conn))

    @app.middleware
    def inject_runtime(context: Any, next: Callable[[], Any]) -> Any:
        context["runtime"] = runtime
        return next()

    register_listeners(app)
    return app


#: Bolt refuses timestamps more than 5 minutes old; a signature is remembered a little longer.
REPLAY_WINDOW = 310


class RefuseReplays(Middleware):
    """401 for a request whose signature was accepted before, by this bot or another replica.

    The signature covers the timestamp, so one key per signature remembers the (timestamp,
    signature) pair; Slack re-signs its retries with a new timestamp, so they still get in.
    Registered after Bolt's verification: only verified signatures are ever remembered.
    """

    def __init__(self, conn: redis.Redis) -> None:
        self.conn = conn

    def process(
        self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]
    ) -> BoltResponse:
        signature = req.headers.get("x-slack-signature", [""])[0]
        if store.first_sighting(self.conn, signature, REPLAY_WINDOW):
            return next()
        return BoltResponse(status=401, body={"error": "replayed request"})


class RefuseMalformed(Middleware):
    """400 for a payload that Bolt's routing would crash on, or that UTF-8 cannot carry."""

    def process(
        self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]
    ) -> BoltResponse:
        if _routable(req.body) and _encodable(req.body):
            return next()
        return BoltResponse(status=400, body={"error": "malformed request"})


def _routable(body: dict[str, Any]) -> bool:
    """Bolt indexes ``actions[0]["action_id"]``, ``view["type"]`` and ``event`` unchecked, and
    ``respond()`` posts to ``response_url`` as is."""
    actions = body.get("actions", [{"action_id": ""}])
    first = actions[0] if isinstance(actions, list) and actions else None
    view = body.get("view", {"type": ""})
    url = body.get("response_url", "https://")
    return (
        isinstance(first, dict)
        and isinstance(first.get("action_id"), str)
        and isinstance(view, dict)
        and "type" in view
        and isinstance(body.get("event", {}), dict)
        and isinstance(url, str)
        and url.startswith(("https://", "http://"))
    )


def _encodable(body: dict[str, Any]) -> bool:
    """False when a string holds a lone surrogate (JSON escapes allow them; Redis and Slack
    take UTF-8, which does not), or when the payload nests too deeply to walk."""
    try:
        json.dumps(body, ensure_ascii=False).encode()
    except (UnicodeEncodeError, RecursionError):
        return False
    return True
