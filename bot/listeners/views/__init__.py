"""Modal submissions: Edit (approve with new arguments), Reject (with a reason), Respond.

A submission's answer is the modal's fate: validation errors keep it open, an empty answer
closes it. So the ack function reads the form, checks it and records the decision (one atomic
write) before answering; what Slack is then asked to show (the card, the thread, or a private
note when the decision was refused) is lazy, after the answer, where a Slack call waiting out
a rate limit cannot keep the modal from closing.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from slack_bolt import Ack, App
from slack_sdk import WebClient

from approvals import store
from approvals.bot.listeners.payload import actor
from approvals.bot.modals import (
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
from approvals.bot.replies import explain
from approvals.bot.runtime import Runtime, runtime_of
from approvals.decisions.review import check_edit, decide
from approvals.errors import ApprovalsError, InvalidArguments
from approvals.models import Approval, DecisionKind
from approvals.slack import web as slack

_UNREADABLE = "Nothing changed: this form could not be read."


class _Form(NamedTuple):
    """A modal submission that can be acted on: its approval, input blocks and sender."""

    approval: Approval
    values: dict[str, dict[str, Any]]
    user: str
    name: str | None


#: Where the ack function leaves the outcome for ``announce_submission``: the decided
#: ``Approval``, or (channel, user, text) of a refusal.
DECIDED = "approvals_decided"
REFUSED = "approvals_refused"


def register(app: App) -> None:
    app.view(EDIT_VIEW)(ack=handle_edit_submit, lazy=[announce_submission])
    app.view(REJECT_VIEW)(ack=handle_reject_submit, lazy=[announce_submission])
    app.view(RESPOND_VIEW)(ack=handle_respond_submit, lazy=[announce_submission])


def handle_edit_submit(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    runtime = runtime_of(context)
    form = _form(runtime, ack, body, view)
    if form is None:
        return
    approval = form.approval
    arguments, errors = read_edit_submission(approval, form.values)
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
    _decide(runtime, context, form, DecisionKind.EDIT, arguments=arguments)


def handle_reject_submit(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    runtime = runtime_of(context)
    form = _form(runtime, ack, body, view)
    if form is None:
        return
    reason = read_text(form.values, REASON_BLOCK)
    if form.approval.policy.reason_required and reason is None:
        ack(response_action="errors", errors={REASON_BLOCK: "Say why: the agent is told."})
        return
    ack()
    _decide(runtime, context, form, DecisionKind.REJECT, reason=reason)


def handle_respond_submit(
    ack: Ack, body: dict[str, Any], view: dict[str, Any], context: dict[str, Any]
) -> None:
    runtime = runtime_of(context)
    form = _form(runtime, ack, body, view)
    if form is None:
        return
    response = read_text(form.values, RESPONSE_BLOCK)
    if response is None:
        ack(response_action="errors", errors={RESPONSE_BLOCK: "Write what the agent receives."})
        return
    ack()
    _decide(runtime, context, form, DecisionKind.RESPOND, response=response)


def _form(runtime: Runtime, ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> _Form | None:
    """The submission, read; a vanished approval or an unreadable form becomes a notice."""
    state, metadata, sender = view.get("state"), view.get("private_metadata"), actor(body)
    values = state.get("values") if isinstance(state, dict) else None
    if sender is None or not isinstance(values, dict) or not isinstance(metadata, str):
        ack(response_action="update", view=build_notice_modal(_UNREADABLE))
        return None
    try:
        approval = store.records.load(runtime.conn, metadata)
    except ApprovalsError as exc:
        ack(response_action="update", view=build_notice_modal(explain(exc)))
        return None
    # A block's state maps action ids to element states; anything else Slack never sends.
    blocks = {block: inputs for block, inputs in values.items() if isinstance(inputs, dict)}
    return _Form(approval, blocks, *sender)


def _decide(
    runtime: Runtime, context: dict[str, Any], form: _Form, kind: DecisionKind, **details: Any
) -> None:
    approval = form.approval
    try:
        decided = decide(
            runtime.conn,
            runtime.settings,
            approval.id,
            kind,
            form.user,
            actor_name=form.name,
            members_of=runtime.members_of,
            **details,
        )
    except ApprovalsError as exc:
        context[REFUSED] = (approval.channel, form.user, explain(exc))
        return
    context[DECIDED] = decided


def announce_submission(context: dict[str, Any], client: WebClient) -> None:
    """After the answer: show the decision on the card and in its thread, or tell the person
    privately why it was refused."""
    decided, refused = context.get(DECIDED), context.get(REFUSED)
    if isinstance(decided, Approval):
        slack.announce_decision(client, runtime_of(context).conn, decided)
    elif refused is not None:
        channel, user, text = refused
        client.chat_postEphemeral(channel=channel, user=user, text=text)


def _visible(errors: dict[str, str], approval: Approval) -> dict[str, str]:
    """Errors keyed by block ids that exist in the modal (others go on the first input)."""
    inputs = [b["block_id"] for b in build_edit_modal(approval)["blocks"] if b["type"] == "input"]
    visible = {k: v for k, v in errors.items() if k in inputs}
    stray = [v for k, v in errors.items() if k not in inputs]
    if stray and inputs:
        visible[inputs[0]] = "; ".join([*stray, visible.get(inputs[0], "")]).strip("; ")
    return visible
