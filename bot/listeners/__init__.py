"""Every listener is registered here, grouped by kind as in Slack's Bolt templates."""

from __future__ import annotations

from slack_bolt import App

from bot.listeners import actions, commands, events, views


def register_listeners(app: App) -> None:
    actions.register(app)
    views.register(app)
    commands.register(app)
    events.register(app)
