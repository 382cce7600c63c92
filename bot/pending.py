"""The list of waiting approvals, for ``/agent-pending`` and the App Home tab."""

from __future__ import annotations

from approvals import cards
from approvals.cards import Block
from approvals.limits import MESSAGE_BLOCKS, MODAL_BLOCKS, truncate
from approvals.models import Approval

#: Blocks each approval takes in the list (summary, buttons, divider).
_PER_ITEM = 3


def _item(approval: Approval) -> list[Block]:
    title = approval.summary or f"{approval.tool_name}"
    when = f"<!date^{int(approval.created_at)}^{{date_short_pretty}} {{time}}|waiting>"
    args = truncate(cards.arguments_text(approval.arguments, 600), 600)
    where = f"{approval.agent} · `{approval.tool_name}` · `{approval.id}` · {when}"
    text = f"*{title}*  ·  {where}\n{args}"
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 3000)}},
        cards.build_buttons(approval),
        {"type": "divider"},
    ]


def _list(approvals: list[Approval], total: int, max_blocks: int) -> list[Block]:
    if not approvals:
        return [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": "Nothing is waiting for approval."},
            }
        ]
    room = (max_blocks - 2) // _PER_ITEM
    shown = approvals[:room]
    blocks: list[Block] = [
        {
            "type": "header",
            "text": {
                "type": "plain_text",
                "text": truncate(f"{total} approval{'s' if total != 1 else ''} waiting", 150),
            },
        }
    ]
    for approval in shown:
        blocks.extend(_item(approval))
    if total > len(shown):
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": (f"Showing the newest {len(shown)} of {total}.")}
                ],
            }
        )
    return blocks


def build_pending_list(approvals: list[Approval], total: int) -> list[Block]:
    """Newest first, each with its buttons, within one message's block limit."""
    return _list(approvals, total, MESSAGE_BLOCKS)


def build_home(approvals: list[Approval], total: int) -> Block:
    """The App Home tab: the same list, with more room."""
    return {"type": "home", "blocks": _list(approvals, total, MODAL_BLOCKS)}
