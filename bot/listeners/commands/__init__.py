"""Slash commands."""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App, Respond

from approvals import store
from bot.pending import build_pending_list
from bot.runtime import runtime_of

PENDING_COMMAND = "/agent-pending"


def register(app: App) -> None:
    app.command(PENDING_COMMAND)(handle_agent_pending)


def handle_agent_pending(ack: Ack, respond: Respond, context: dict[str, Any]) -> None:
    """Answer the caller only, newest first, with buttons."""
    ack()
    runtime = runtime_of(context)
    approvals = store.pending(runtime.conn, limit=50)
    blocks = build_pending_list(approvals, store.pending_count(runtime.conn))
    respond(response_type="ephemeral", text=f"{len(approvals)} waiting", blocks=blocks)
