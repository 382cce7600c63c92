"""The list of waiting approvals, for ``/agent-pending`` and the App Home tab."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from approvals import cards
from approvals.cards import Block
from approvals.grants import Grant
from approvals.limits import truncate
from approvals.models import Approval
from approvals.store import Page

NEXT_PAGE_ACTION = "pending_next_page"
#: Approvals per page: 3 blocks each, plus header, footer and the Next button, within 50.
PAGE_SIZE = 15
HOME_PAGE_SIZE = 20
#: Grants shown on the Home tab, newest first (`approvals grants list` has them all).
HOME_GRANTS = 15


def _item(approval: Approval) -> list[Block]:
    title = approval.summary or approval.tool_name
    args = cards.arguments_text(approval.shown_arguments, 600)
    where = f"{approval.agent} · `{approval.tool_name}` · `{approval.id}`"
    requested = f" · for {cards.person(approval.requested_by)}" if approval.requested_by else ""
    when = f"waiting since {cards.slack_date(approval.created_at)}"
    text = f"*{title}*\n{where}{requested} · {when}\n{args}"
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 3000)}},
        cards.build_buttons(approval),
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


def build_pending_list(page: Page, offset: int, query: str = "") -> list[Block]:
    """One page, newest first, each with its buttons, and a Next button when more wait."""
    header: Block = {
        "type": "header",
        "text": {"type": "plain_text", "text": truncate(describe_query(query), 150)},
    }
    approvals, remaining = page.approvals, page.remaining
    if not approvals:
        empty = "Nothing is waiting for approval." if offset == 0 else "No more approvals."
        return [header, {"type": "section", "text": {"type": "mrkdwn", "text": empty}}]
    blocks = [header]
    for approval in approvals:
        blocks.extend(_item(approval))
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
    return blocks


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
        line = f"*{approval.summary or approval.tool_name}* · {approval.agent} · `{approval.id}`"
        text = f"{line}\n{cards.describe_state(approval)}"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 3000)}})
    if grants:
        blocks.append({"type": "header", "text": {"type": "plain_text", "text": "Grants"}})
        now = time.time()
        for grant in grants:
            blocks += cards.build_grant_line(grant, now)
    return {"type": "home", "blocks": blocks[:100]}
