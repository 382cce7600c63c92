"""Every listener is registered here, grouped by kind as in Slack's Bolt templates."""

from __future__ import annotations

from slack_bolt import App

from bot.listeners import actions, commands, events, views
from bot.listeners.lazy import Acknowledged


def register_listeners(app: App) -> Acknowledged:
    """Register every listener; returns the acknowledged ones (answered before Bolt routes)."""
    acknowledged = Acknowledged(app)
    actions.register(app, acknowledged)
    views.register(app)
    commands.register(acknowledged)
    events.register(acknowledged)
    return acknowledged
