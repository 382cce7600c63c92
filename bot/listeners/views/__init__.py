"""Modal submissions: Edit (approve with new arguments), Reject (with a reason), Respond."""

from __future__ import annotations

from typing import Any

from slack_bolt import Ack, App
from slack_sdk import WebClient

from approvals import slack, store
from approvals.errors import ApprovalsError, InvalidArguments
from approvals.models import Approval, DecisionKind
from approvals.review import check_edit, decide
from bot.modals import (
    EDIT_VIEW,
    REASON_BLOCK,
    REJECT_VIEW,
    RESPOND_VIEW,
    RESPONSE_BLOCK,
    block_for,
    build_edit_modal,
    build_notice_modal,
    read_edit_submission,
    read_text,
)
from bot.replies import explain
from bot.runtime import Runtime, runtime_of


def register(app: App) -> None:
    app.view(EDIT_VIEW)(handle_edit_submit)
    app.view(REJECT_VIEW)(handle_reject_submit)
    app.view(RESPOND_VIEW)(handle_respond_submit)


def handle_edit_submit(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any], client: WebClient
) -> None:
    runtime = runtime_of(context)
    approval = _approval(runtime, ack, view)
    if approval is None:
        return
    arguments, errors = read_edit_submission(approval, view["state"]["values"])
    if not errors:
        try:
            check_edit(approval, arguments)
        except InvalidArguments as exc:
            errors = {block_for(name): message for name, message in exc.errors.items()}
    if errors:
        # Checked before the ack so the person sees what is wrong inside the modal.
        ack(response_action="errors", errors=_visible(errors, approval))
        return
    ack()
    _decide(runtime, client, body, approval, DecisionKind.EDIT, arguments=arguments)


def handle_reject_submit(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any], client: WebClient
) -> None:
    runtime = runtime_of(context)
    approval = _approval(runtime, ack, view)
    if approval is None:
        return
    reason = read_text(view["state"]["values"], REASON_BLOCK)
    if approval.policy.reason_required and reason is None:
        ack(response_action="errors", errors={REASON_BLOCK: "Say why: the agent is told."})
        return
    ack()
    _decide(runtime, client, body, approval, DecisionKind.REJECT, reason=reason)


def handle_respond_submit(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any], client: WebClient
) -> None:
    runtime = runtime_of(context)
    approval = _approval(runtime, ack, view)
    if approval is None:
        return
    response = read_text(view["state"]["values"], RESPONSE_BLOCK)
    if response is None:
        ack(response_action="errors", errors={RESPONSE_BLOCK: "Write what the agent receives."})
        return
    ack()
    _decide(runtime, client, body, approval, DecisionKind.RESPOND, response=response)


def _approval(runtime: Runtime, ack: Ack, view: dict[str, Any]) -> Approval | None:
    """The approval a modal is about; a vanished one replaces the modal with a notice."""
    try:
        return store.load(runtime.conn, str(view["private_metadata"]))
    except ApprovalsError as exc:
        ack(response_action="update", view=build_notice_modal(explain(exc)))
        return None


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
            members_of=runtime.members_of,
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
