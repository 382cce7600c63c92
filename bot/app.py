"""Builds the Bolt app: client, middleware, listeners. Serving it lives in ``bot.server``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from slack_bolt import App

from approvals import slack, store
from approvals.config import Settings
from bot.listeners import register_listeners
from bot.runtime import Runtime


def create_app(settings: Settings, conn: redis.Redis | None = None) -> App:
    """The Bolt app for these settings (Socket Mode when ``SLACK_APP_TOKEN`` is set).

    Raises:
        ConfigError: a required setting is missing (checked here, not at the first request).
    """
    socket_mode = settings.slack_app_token is not None
    settings.require("SLACK_BOT_TOKEN")
    if not socket_mode:
        settings.require("SLACK_SIGNING_SECRET")
    client = slack.web_client(settings)
    runtime = Runtime(settings=settings, conn=conn or store.connect(settings), client=client)
    app = App(
        client=client,
        signing_secret=settings.slack_signing_secret or "",
        # Socket Mode requests come over an authenticated WebSocket and carry no signature.
        request_verification_enabled=not socket_mode,
    )

    @app.middleware
    def inject_runtime(context: Any, next: Callable[[], Any]) -> Any:
        context["runtime"] = runtime
        return next()

    register_listeners(app)
    return app
