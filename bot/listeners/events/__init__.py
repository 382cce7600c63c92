"""Events API listeners."""

from __future__ import annotations

from typing import Any

from slack_bolt import App
from slack_sdk import WebClient

from approvals import store
from bot.pending import build_home
from bot.runtime import runtime_of


def register(app: App) -> None:
    app.event("app_home_opened")(handle_app_home_opened)


def handle_app_home_opened(
    event: dict[str, Any], context: dict[str, Any], client: WebClient
) -> None:
    """Refresh the Home tab with what is waiting, each time it is opened."""
    if event.get("tab", "home") != "home":
        return
    runtime = runtime_of(context)
    approvals = store.pending(runtime.conn, limit=40)
    client.views_publish(
        user_id=event["user"], view=build_home(approvals, store.pending_count(runtime.conn))
    )
