"""The list of waiting approvals, for ``/agent-pending`` and the App Home tab."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from approvals.models import Approval
from approvals.models.grant import Grant
from approvals.slack import cards
from approvals.slack.cards import Block
from approvals.slack.limits import truncate
from approvals.slack.previews import build_view_button, first_line
from approvals.store.pending import Page

NEXT_PAGE_ACTION = "pending_next_page"
#: Decisions in bulk: the checkboxes (one element per ten approvals) and the two buttons.
BULK_PICK_ACTION = "pending_bulk_pick"
BULK_APPROVE_ACTION = "pending_bulk_approve"
BULK_REJECT_ACTION = "pending_bulk_reject"
#: Slack's limit on the options of one checkboxes element.
_CHECKBOXES_OPTIONS = 10
#: Approvals per page: 3 blocks each, plus header, footer and the Next button, within 50.
PAGE_SIZE = 15
HOME_PAGE_SIZE = 20
#: Grants shown on the Home tab, newest first (`approvals grants list` has them all).
HOME_GRANTS = 15


def _item(approval: Approval) -> list[Block]:
    title = approval.shown_summary or approval.tool_name
    args = cards.arguments_text(approval.shown_arguments, 600)
    where = f"{approval.agent} · `{approval.tool_name}` · `{approval.id}`"
    requested = f" · for {cards.person(approval.requested_by)}" if approval.requested_by else ""
    when = f"waiting since {cards.slack_date(approval.created_at)}"
    turn = ""
    if approval.in_turn:  # decided here or on the turn's card alike; the run waits for all
        number = approval.turn.index(approval.id) + 1
        turn = f" · call {number} of {len(approval.turn)} of one turn (`{approval.turn_lead}`)"
    line = first_line(approval)
    preview = f"\n:mag: Preview: {line}" if line else ""
    text = f"*{title}*\n{where}{requested} · {when}{turn}{preview}\n{args}"
    buttons = cards.build_buttons(approval)
    if line:
        buttons["elements"].append(build_view_button(approval))
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 3000)}},
        buttons,
        {"type": "divider"},
    ]


def describe_query(query: str) -> str:
    """How the list's filter reads in its header."""
    if query == "all":
        return "All waiting approvals"
    if query == "mine":
        return "Waiting approvals requested by you"
    if query:
        return f"Waiting approvals from {query} that you may decide"
    return "Waiting approvals you may decide"


def build_bulk_block(approvals: Sequence[Approval], offset: int) -> Block:
    """Checkboxes for the approvals of a page, with "Approve selected" / "Reject selected"."""
    elements: list[Block] = []
    for start in range(0, len(approvals), _CHECKBOXES_OPTIONS):
        chunk = approvals[start : start + _CHECKBOXES_OPTIONS]
        options = [
            {
                "text": {"type": "plain_text", "text": truncate(_label(a), 75)},
                "value": a.id,
            }
            for a in chunk
        ]
        elements.append(
            {"type": "checkboxes", "action_id": f"{BULK_PICK_ACTION}-{start}", "options": options}
        )
    for action, label, style in (
        (BULK_APPROVE_ACTION, "Approve selected", "primary"),
        (BULK_REJECT_ACTION, "Reject selected", "danger"),
    ):
        elements.append(
            {
                "type": "button",
                "action_id": action,
                "text": {"type": "plain_text", "text": label},
                "value": "selected",
                "style": style,
                "confirm": cards.confirm_dialog(f"{label.split()[0]} every selected request?"),
            }
        )
    return {"type": "actions", "block_id": f"pending-bulk-{offset}", "elements": elements}


def _label(approval: Approval) -> str:
    return f"{approval.shown_summary or approval.tool_name} · {approval.id}"


def selected_ids(state: Any) -> list[str]:
    """The approval ids ticked in a bulk block, from a payload's ``state.values``."""
    picked: list[str] = []
    values = state.get("values") if isinstance(state, dict) else None
    for block in (values or {}).values():
        for action_id, element in (block or {}).items() if isinstance(block, dict) else ():
            if not str(action_id).startswith(BULK_PICK_ACTION) or not isinstance(element, dict):
                continue
            for option in element.get("selected_options") or []:
                if isinstance(option, dict) and isinstance(option.get("value"), str):
                    picked.append(option["value"])
    return picked[:100]


def build_recent_section(recent: Sequence[Approval]) -> Block:
    """The latest decisions in one block (people, rules, grants and expiry alike)."""
    lines = [
        f"`{a.id}` {a.shown_summary or a.tool_name} · {a.agent}: {cards.describe_state(a)}"
        for a in recent
    ]
    text = "*Recent decisions*\n" + ("\n".join(lines) if lines else "None yet.")
    return {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 3000)}}


def build_pending_list(
    page: Page, offset: int, query: str = "", recent: Sequence[Approval] = ()
) -> list[Block]:
    """One page, newest first, each with its buttons, and a Next button when more wait.

    With two or more approvals, a bulk block picks several to approve or reject together;
    ``recent`` (for ``/agent-pending all``) adds the latest decisions in one block.
    """
    header: Block = {
        "type": "header",
        "text": {"type": "plain_text", "text": truncate(describe_query(query), 150)},
    }
    approvals, remaining = page.approvals, page.remaining
    tail = [build_recent_section(recent)] if recent else []
    if not approvals:
        empty = "Nothing is waiting for approval." if offset == 0 else "No more approvals."
        return [header, {"type": "section", "text": {"type": "mrkdwn", "text": empty}}, *tail]
    blocks = [header]
    for approval in approvals:
        blocks.extend(_item(approval))
    if len(approvals) > 1:
        blocks.append(build_bulk_block(approvals, offset))
    shown = f"Showing {offset + 1} to {offset + len(approvals)}"
    more = f", {remaining}{'' if page.exact else '+'} more" if remaining else ""
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": shown + more}]})
    if remaining:
        value = json.dumps({"offset": offset + len(approvals), "query": query[:1500]})
        blocks.append(
            {
                "type": "actions",
                "block_id": f"pending-next-{offset + len(approvals)}",
                "elements": [
                    {
                        "type": "button",
                        "action_id": NEXT_PAGE_ACTION,
                        "text": {"type": "plain_text", "text": "Next"},
                        "value": value,
                    }
                ],
            }
        )
    return blocks + tail


def build_home(page: Page, recent: list[Approval], grants: Sequence[Grant] = ()) -> Block:
    """The App Home tab: what the viewer may decide, then the latest decisions."""
    blocks = build_pending_list(page, 0)
    if page.remaining:
        blocks = blocks[:-1]  # paging lives in /agent-pending; Home shows the newest
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": "Type `/agent-pending` to see them all."}],
            }
        )
    blocks.append({"type": "header", "text": {"type": "plain_text", "text": "Recent decisions"}})
    if not recent:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": "None yet."}})
    for approval in recent:
        what = approval.shown_summary or approval.tool_name
        line = f"*{what}* · {approval.agent} · `{approval.id}`"
        text = f"{line}\n{cards.describe_state(approval)}"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 3000)}})
    if grants:
        blocks.append({"type": "header", "text": {"type": "plain_text", "text": "Grants"}})
        now = time.time()
        for grant in grants:
            blocks += cards.build_grant_line(grant, now)
    return {"type": "home", "blocks": blocks[:100]}
