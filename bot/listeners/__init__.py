"""Every listener is registered here, grouped by kind as in Slack's Bolt templates.

One dispatch path: Bolt routes every request to its listener. A listener whose answer is an
empty 200 acknowledges in its ack function and does its work in a lazy listener, after the
answer; a modal's submission and a button that opens a modal do their work before answering
(the submission's validation errors are the answer; a modal must open while its trigger lives).
"""

from __future__ import annotations

from slack_bolt import App

from approvals.bot.listeners import actions, commands, events, views


def register_listeners(app: App) -> None:
    """Register every listener of the app.

    Bolt tries listeners in the order they were registered, and its slash-command matcher
    looks only for a ``command`` field: views come before commands, so a modal's submission
    always reaches its view listener.
    """
    for kind in (actions, views, commands, events):
        kind.register(app)
