"""Modal submissions: Edit (approve with new arguments) and Reject (with a reason)."""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App
from slack_sdk import WebClient

from approvals import slack, store
from approvals.errors import ApprovalsError, InvalidArguments
from approvals.models import Approval, DecisionKind
from approvals.review import decide, validate_arguments
from bot.modals import (
    EDIT_VIEW,
    REJECT_VIEW,
    build_edit_modal,
    build_notice_modal,
    error_block_for,
    read_edit_submission,
    read_reject_reason,
)
from bot.replies import explain
from bot.runtime import Runtime, runtime_of


def register(app: App) -> None:
    app.view(EDIT_VIEW)(handle_edit_submit)
    app.view(REJECT_VIEW)(handle_reject_submit)


def handle_edit_submit(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any], client: WebClient
) -> None:
    runtime = runtime_of(context)
    try:
        approval = store.load(runtime.conn, view["private_metadata"])
    except ApprovalsError as exc:
        ack(response_action="update", view=build_notice_modal(explain(exc)))
        return
    arguments, errors = read_edit_submission(approval, view["state"]["values"])
    if not errors:
        try:
            validate_arguments(approval.tool.schema, arguments)
        except InvalidArguments as exc:
            errors = {error_block_for(name): message for name, message in exc.errors.items()}
    if errors:
        # Validation happens before the ack so the person sees the errors in the modal.
        ack(response_action="errors", errors=_visible(errors, approval))
        return
    ack()
    _decide(runtime, client, body, approval, DecisionKind.EDIT, arguments=arguments)


def handle_reject_submit(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any], client: WebClient
) -> None:
    ack()
    runtime = runtime_of(context)
    reason = read_reject_reason(view["state"]["values"])
    try:
        approval = store.load(runtime.conn, view["private_metadata"])
    except ApprovalsError:
        return  # the approval vanished while the modal was open; nothing to tell in a channel
    _decide(runtime, client, body, approval, DecisionKind.REJECT, reason=reason)


def _decide(
    runtime: Runtime,
    client: WebClient,
    body: dict[str, Any],
    approval: Approval,
    kind: DecisionKind,
    **details: Any,
) -> None:
    user = body["user"]
    try:
        decided = decide(
            runtime.conn,
            runtime.settings,
            approval.id,
            kind,
            str(user["id"]),
            actor_name=user.get("name") or user.get("username"),
            **details,
        )
    except ApprovalsError as exc:
        client.chat_postEphemeral(channel=approval.channel, user=user["id"], text=explain(exc))
        return
    slack.announce_decision(client, decided)


def _visible(errors: dict[str, str], approval: Approval) -> dict[str, str]:
    """Errors keyed by block ids that exist in the modal (others go on the first input)."""
    inputs = [b["block_id"] for b in build_edit_modal(approval)["blocks"] if b["type"] == "input"]
    visible = {k: v for k, v in errors.items() if k in inputs}
    stray = [v for k, v in errors.items() if k not in inputs]
    if stray and inputs:
        visible[inputs[0]] = "; ".join([*stray, visible.get(inputs[0], "")]).strip("; ")
    return visible
