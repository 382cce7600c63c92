"""Slash commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slack_bolt import App, Respond

from approvals import store
from approvals.bot.listeners.ack import acknowledge
from approvals.bot.pending import PAGE_SIZE, build_pending_list, describe_query
from approvals.bot.runtime import Runtime, runtime_of
from approvals.decisions.review import refusal
from approvals.models import Approval

PENDING_COMMAND = "/agent-pending"
#: Recent decisions listed under ``/agent-pending all`` (one block: the page stays within 50).
RECENT_SHOWN = 8


def register(app: App) -> None:
    app.command(PENDING_COMMAND)(ack=acknowledge, lazy=[handle_agent_pending])


def handle_agent_pending(
    respond: Respond, command: dict[str, Any], context: dict[str, Any]
) -> None:
    """``/agent-pending [agent name | mine | all]``, answered to the caller only."""
    user = command.get("user_id")
    if not isinstance(user, str):
        return
    query = " ".join(str(command.get("text") or "").split())
    if query.lower() in ("mine", "all"):
        query = query.lower()
    answer_pending(runtime_of(context), respond, user, query, 0)


def pending_filter(runtime: Runtime, user: str, query: str) -> Callable[[Approval], bool]:
    """Which approvals a query shows: by default, those ``user`` may decide."""
    if query == "all":
        return lambda approval: True
    if query == "mine":
        return lambda approval: approval.requested_by == user

    def may_decide(approval: Approval) -> bool:
        if query and approval.agent.lower() != query.lower():
            return False
        return refusal(runtime.settings, approval, user, runtime.members_of) is None

    return may_decide


def answer_pending(
    runtime: Runtime, respond: Respond, user: str, query: str, offset: int, replace: bool = False
) -> None:
    """Send one page of the list (replacing the previous page when paging)."""
    if respond.response_url is None:  # nowhere to answer
        return
    keep = pending_filter(runtime, user, query)
    page = store.pending.pending_page(runtime.conn, keep, offset, PAGE_SIZE)
    # "all" also shows what was decided lately, by people, rules, grants or expiry.
    recent = store.pending.recent_decisions(runtime.conn, RECENT_SHOWN) if query == "all" else []
    respond(
        response_type="ephemeral",
        replace_original=replace,
        text=f"{describe_query(query)}: {len(page.approvals)} shown",
        blocks=build_pending_list(page, offset, query, recent),
    )
