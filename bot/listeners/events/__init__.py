"""Events API listeners."""

from __future__ import annotations

from typing import Any

from slack_bolt import App
from slack_sdk import WebClient

from approvals import store
from approvals.bot.listeners.ack import acknowledge
from approvals.bot.listeners.commands import pending_filter
from approvals.bot.pending import HOME_GRANTS, HOME_PAGE_SIZE, build_home
from approvals.bot.runtime import Runtime, runtime_of
from approvals.decisions import grants


def register(app: App) -> None:
    app.event("app_home_opened")(ack=acknowledge, lazy=[handle_app_home_opened])


def handle_app_home_opened(
    event: dict[str, Any], context: dict[str, Any], client: WebClient
) -> None:
    """Refresh the Home tab each time it is opened: what the viewer may decide, and history."""
    user = event.get("user")
    if event.get("tab", "home") != "home" or not (isinstance(user, str) and user):
        return
    publish_home(runtime_of(context), client, user)


def publish_home(runtime: Runtime, client: WebClient, user: str) -> None:
    """Draw the viewer's Home tab: pending, recent decisions, grants with Revoke."""
    keep = pending_filter(runtime, user, "")
    page = store.pending.pending_page(runtime.conn, keep, 0, HOME_PAGE_SIZE)
    recent = store.pending.recent_decisions(runtime.conn, limit=10)
    found = grants.list_grants(runtime.conn)[:HOME_GRANTS]
    client.views_publish(user_id=user, view=build_home(page, recent, found))
