"""Button clicks on approval cards, on the ``/agent-pending`` list and on the Home tab."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from slack_bolt import Ack, App, Respond
from slack_sdk import WebClient

from approvals import store
from approvals.bot.listeners.ack import acknowledge
from approvals.bot.listeners.actions import previews
from approvals.bot.listeners.commands import answer_pending
from approvals.bot.listeners.events import publish_home
from approvals.bot.listeners.payload import actor
from approvals.bot.modals import build_edit_modal, build_reject_modal, build_respond_modal
from approvals.bot.pending import (
    BULK_APPROVE_ACTION,
    BULK_PICK_ACTION,
    BULK_REJECT_ACTION,
    NEXT_PAGE_ACTION,
    selected_ids,
)
from approvals.bot.replies import bulk_summary, explain
from approvals.bot.runtime import Runtime, runtime_of
from approvals.decisions import grants
from approvals.decisions.review import decide, decide_many, precheck, retry
from approvals.errors import ApprovalsError
from approvals.models import DecisionKind, Status
from approvals.slack import web as slack
from approvals.slack.cards import (
    APPROVE_ACTION,
    APPROVE_ALL_ACTION,
    APPROVE_SCOPE_ACTION,
    EDIT_ACTION,
    REJECT_ACTION,
    REJECT_ALL_ACTION,
    RESPOND_ACTION,
    RETRY_ACTION,
    REVOKE_GRANT_ACTION,
    build_retry_message,
    parse_scope_value,
)

_MODALS = {
    REJECT_ACTION: (DecisionKind.REJECT, build_reject_modal),
    EDIT_ACTION: (DecisionKind.EDIT, build_edit_modal),
    RESPOND_ACTION: (DecisionKind.RESPOND, build_respond_modal),
}


def register(app: App) -> None:
    app.action(APPROVE_ACTION)(ack=acknowledge, lazy=[handle_approve])
    for action in _MODALS:
        # Not lazy: the modal must open within 3 s of the click (its trigger_id expires),
        # so it never waits behind other clicks' work; its 200 waits for views.open instead.
        app.action(action)(handle_open_modal)
    app.action(NEXT_PAGE_ACTION)(ack=acknowledge, lazy=[handle_next_page])
    app.action(RETRY_ACTION)(ack=acknowledge, lazy=[handle_retry])
    app.action(APPROVE_SCOPE_ACTION)(ack=acknowledge, lazy=[handle_approve_scope])
    app.action(REVOKE_GRANT_ACTION)(ack=acknowledge, lazy=[handle_revoke_grant])
    # Ticking a box decides nothing; the buttons read the boxes from the payload's state.
    app.action(re.compile(f"^{BULK_PICK_ACTION}-"))(acknowledge)
    for action in (BULK_APPROVE_ACTION, BULK_REJECT_ACTION):
        app.action(action)(ack=acknowledge, lazy=[handle_bulk])
    for action in (APPROVE_ALL_ACTION, REJECT_ALL_ACTION):
        app.action(action)(ack=acknowledge, lazy=[handle_turn])
    previews.register(app)


def _clicked(body: dict[str, Any]) -> tuple[str, str, str | None] | None:
    """(value, user id, user name) of a block_actions payload; None when one is unreadable."""
    sender, value = actor(body), body["actions"][0].get("value")
    if sender is None or not isinstance(value, str):
        return None
    return value, sender[0], sender[1]


def _tell(respond: Respond, text: str) -> None:
    if respond.response_url is not None:  # buttons in modals and on the Home tab have none
        respond(text=text, response_type="ephemeral", replace_original=False)


def handle_approve(
    body: dict[str, Any], context: dict[str, Any], client: WebClient, respond: Respond
) -> None:
    runtime = runtime_of(context)
    clicked = _clicked(body)
    if clicked is None:
        return
    approval_id, user, name = clicked
    try:
        approval = decide(
            runtime.conn,
            runtime.settings,
            approval_id,
            DecisionKind.APPROVE,
            user,
            actor_name=name,
            members_of=runtime.members_of,
        )
    except ApprovalsError as exc:
        _tell(respond, explain(exc))
        return
    if approval.status is Status.PENDING:  # counted toward a quorum that is not complete yet
        slack.announce_vote(client, approval)
        needed = approval.policy.approvals_required
        _tell(respond, f"Your approval is counted: {len(approval.votes)} of {needed}.")
        return
    slack.announce_decision(client, runtime.conn, approval)
    container = body.get("container")
    if isinstance(container, dict) and container.get("is_ephemeral"):
        _tell(respond, f"Approved `{approval.tool_name}` ({approval.id}).")


def handle_approve_scope(
    body: dict[str, Any], context: dict[str, Any], client: WebClient, respond: Respond
) -> None:
    """Approve from the scope menu: the call, and a grant for what the scope covers."""
    runtime = runtime_of(context)
    sender, option = actor(body), body["actions"][0].get("selected_option")
    value = option.get("value") if isinstance(option, dict) else None
    chosen = parse_scope_value(value) if isinstance(value, str) else None
    if sender is None or chosen is None:
        return
    (user, name), (approval_id, scope) = sender, chosen
    try:
        approval, grant = grants.approve_with_scope(
            runtime.conn, runtime.settings, approval_id, scope, user,
            actor_name=name, members_of=runtime.members_of,
        )  # fmt: skip
    except ApprovalsError as exc:
        _tell(respond, explain(exc))
        return
    slack.announce_decision(client, runtime.conn, approval)
    if grant is not None:
        _tell(respond, f"Approved, and granted: {grant.scope.label} (`{grant.id}`).")


def handle_bulk(
    body: dict[str, Any], context: dict[str, Any], client: WebClient, respond: Respond
) -> None:
    """Approve or reject every ticked approval, each on its own; say what was refused."""
    runtime = runtime_of(context)
    sender = actor(body)
    if sender is None:
        return
    user, name = sender
    view = body.get("view")
    state = view.get("state") if isinstance(view, dict) else body.get("state")
    picked = selected_ids(state)
    approve = body["actions"][0].get("action_id") == BULK_APPROVE_ACTION
    if not picked:
        _tell(respond, "Tick the requests to decide first.")
        return
    _decide_all(runtime, client, respond, picked, approve, user, name)
    if isinstance(view, dict) and view.get("type") == "home":
        publish_home(runtime, client, user)


def handle_turn(
    body: dict[str, Any], context: dict[str, Any], client: WebClient, respond: Respond
) -> None:
    """The "Approve all" / "Reject all" buttons of a turn's card: every call of the turn
    still waiting, each checked and decided on its own (``decide_many``); say what was
    refused."""
    runtime = runtime_of(context)
    clicked = _clicked(body)
    if clicked is None:
        return
    lead_id, user, name = clicked
    approve = body["actions"][0].get("action_id") == APPROVE_ALL_ACTION
    try:
        lead = store.records.load(runtime.conn, lead_id)
    except ApprovalsError as exc:
        _tell(respond, explain(exc))
        return
    waiting = store.turns.turn_pending(runtime.conn, lead.turn) if lead.in_turn else []
    if not waiting:
        _tell(respond, "Nothing of this turn waits for a decision any more.")
        return
    _decide_all(runtime, client, respond, waiting, approve, user, name)


def _decide_all(
    runtime: Runtime,
    client: WebClient,
    respond: Respond,
    approval_ids: list[str],
    approve: bool,
    user: str,
    name: str | None,
) -> None:
    """Approve or reject each of ``approval_ids`` on its own (``decide_many``), show each
    decision on its card, and tell the clicker what was refused."""
    kind = DecisionKind.APPROVE if approve else DecisionKind.REJECT
    results = decide_many(
        runtime.conn, runtime.settings, approval_ids, kind, user,
        actor_name=name, members_of=runtime.members_of,
    )  # fmt: skip
    for result in results:
        if result.approval is not None:
            if result.approval.status is Status.PENDING:
                slack.announce_vote(client, result.approval)
            else:
                slack.announce_decision(client, runtime.conn, result.approval)
    _tell(respond, bulk_summary(results, "Approved" if approve else "Rejected"))


def handle_revoke_grant(body: dict[str, Any], context: dict[str, Any], client: WebClient) -> None:
    """Revoke from the Home tab, then redraw it."""
    runtime = runtime_of(context)
    clicked = _clicked(body)
    if clicked is None:
        return
    grant_id, user, _ = clicked
    # Refused (not theirs, revoked already): the redrawn tab shows where the grant stands.
    with contextlib.suppress(ApprovalsError):
        grants.revoke(runtime.conn, runtime.settings, grant_id, user)
    publish_home(runtime, client, user)


def handle_open_modal(
    ack: Ack, body: dict[str, Any], context: dict[str, Any], client: WebClient, respond: Respond
) -> None:
    """Reject, Edit and Respond ask for details in a modal; refusals come first, privately."""
    ack()
    runtime = runtime_of(context)
    clicked, trigger_id = _clicked(body), body.get("trigger_id")
    if clicked is None or not (isinstance(trigger_id, str) and trigger_id):
        return
    approval_id, user, _ = clicked
    kind, build = _MODALS[body["actions"][0]["action_id"]]
    try:
        approval = precheck(
            runtime.conn, runtime.settings, approval_id, kind, user, runtime.members_of
        )
    except ApprovalsError as exc:
        _tell(respond, explain(exc))
        return
    client.views_open(trigger_id=trigger_id, view=build(approval))


def handle_next_page(body: dict[str, Any], context: dict[str, Any], respond: Respond) -> None:
    clicked = _clicked(body)
    if clicked is None:
        return
    value, user, _ = clicked
    try:
        page = json.loads(value)
        offset, query = int(page["offset"]), str(page["query"])
    except (ValueError, LookupError, TypeError, OverflowError, RecursionError):
        _tell(respond, "That list is out of date; type /agent-pending again.")
        return
    answer_pending(runtime_of(context), respond, user, query, offset, replace=True)


def handle_retry(
    body: dict[str, Any], context: dict[str, Any], client: WebClient, respond: Respond
) -> None:
    """A person judged that running an interrupted tool again is safe."""
    runtime = runtime_of(context)
    clicked = _clicked(body)
    if clicked is None:
        return
    approval_id, user, _ = clicked
    try:
        approval = retry(runtime.conn, runtime.settings, approval_id, user, runtime.members_of)
    except ApprovalsError as exc:
        _tell(respond, explain(exc))
        return
    slack.update_card(client, approval)
    slack.reply(client, approval, build_retry_message(user), "Retried: running it again")
