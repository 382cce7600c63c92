"""Button clicks on approval cards (and on the ``/agent-pending`` list)."""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App, Respond
from slack_sdk import WebClient

from approvals import slack, store
from approvals.cards import APPROVE_ACTION, EDIT_ACTION, REJECT_ACTION
from approvals.errors import AlreadyDecided, ApprovalsError
from approvals.models import DecisionKind, Status
from approvals.review import check_may_decide, decide
from bot.modals import build_edit_modal, build_reject_modal
from bot.replies import explain
from bot.runtime import runtime_of


def register(app: App) -> None:
    app.action(APPROVE_ACTION)(handle_approve)
    app.action(REJECT_ACTION)(handle_reject)
    app.action(EDIT_ACTION)(handle_edit)


def _clicked(body: dict[str, Any]) -> tuple[str, str, str | None]:
    """(approval id, user id, user name) of a block_actions payload."""
    user = body["user"]
    return (
        str(body["actions"][0]["value"]),
        str(user["id"]),
        user.get("name") or user.get("username"),
    )


def _tell(respond: Respond, text: str) -> None:
    respond(text=text, response_type="ephemeral", replace_original=False)


def handle_approve(
    ack: Ack, body: dict[str, Any], context: dict[str, Any], client: WebClient, respond: Respond
) -> None:
    ack()
    runtime = runtime_of(context)
    approval_id, user, name = _clicked(body)
    try:
        approval = decide(
            runtime.conn, runtime.settings, approval_id, DecisionKind.APPROVE, user, actor_name=name
        )
    except ApprovalsError as exc:
        _tell(respond, explain(exc))
        return
    slack.announce_decision(client, approval)
    if body.get("container", {}).get("is_ephemeral"):
        _tell(respond, f"Approved `{approval.tool_name}` ({approval.id}).")


def _open_modal(
    body: dict[str, Any], context: dict[str, Any], client: WebClient, respond: Respond, edit: bool
) -> None:
    runtime = runtime_of(context)
    approval_id, user, _ = _clicked(body)
    try:
        approval = store.load(runtime.conn, approval_id)
        check_may_decide(runtime.conn, runtime.settings, approval_id, user)
        if approval.status is not Status.PENDING:
            decided_by = approval.decision.actor if approval.decision else None
            raise AlreadyDecided(approval_id, approval.status.value, decided_by)
    except ApprovalsError as exc:
        _tell(respond, explain(exc))
        return
    view = build_edit_modal(approval) if edit else build_reject_modal(approval)
    client.views_open(trigger_id=body["trigger_id"], view=view)


def handle_reject(
    ack: Ack, body: dict[str, Any], context: dict[str, Any], client: WebClient, respond: Respond
) -> None:
    ack()
    _open_modal(body, context, client, respond, edit=False)


def handle_edit(
    ack: Ack, body: dict[str, Any], context: dict[str, Any], client: WebClient, respond: Respond
) -> None:
    ack()
    _open_modal(body, context, client, respond, edit=True)
