"""What an approval looks like in Slack: pure Block Kit builders, no I/O.

Both the bot (after a click) and the worker (after a run) redraw the same card, so the card
and its thread messages are built here, from the approval alone. Action ids are constants
that the bot's listeners register against.
"""

from __future__ import annotations

import json
from typing import Any

from approvals.limits import FIELD_TEXT, HEADER_TEXT, SECTION_TEXT, truncate
from approvals.models import Approval, DecisionKind, Status

APPROVE_ACTION = "approval_approve"
REJECT_ACTION = "approval_reject"
EDIT_ACTION = "approval_edit"

Block = dict[str, Any]

_STATUS_LINE = {
    Status.PENDING: ":hourglass_flowing_sand: Waiting for a decision",
    Status.APPROVED: ":white_check_mark: Approved",
    Status.EDITED: ":pencil2: Approved with edits",
    Status.REJECTED: ":no_entry: Rejected",
    Status.RUNNING: ":gear: Running",
    Status.COMPLETED: ":checkered_flag: Completed",
    Status.PAUSED: ":double_vertical_bar: Paused again for another approval",
    Status.FAILED: ":x: Failed",
}


def person(actor: str | None) -> str:
    """A Slack mention for user ids, the login for CLI users."""
    if not actor:
        return "someone"
    if actor.startswith("cli:"):
        return f"{actor[4:]} (CLI)"
    return f"<@{actor}>"


def _md(text: str, limit: int = SECTION_TEXT) -> Block:
    return {"type": "mrkdwn", "text": truncate(text, limit)}


def arguments_text(arguments: dict[str, Any], limit: int = SECTION_TEXT) -> str:
    """Pretty JSON in a code block, cut with a note when it would not fit."""
    body = json.dumps(arguments, indent=2, ensure_ascii=False)
    fence = "```"
    room = limit - 2 * len(fence) - 2
    if len(body) > room:
        # The note's own length depends on the count it states; settle it in two passes.
        note = f"\n… ({len(body)} more characters not shown)"
        kept = room - len(note)
        note = f"\n… ({len(body) - kept} more characters not shown)"
        body = body[:kept] + note
    return f"{fence}\n{body}\n{fence}"


def build_card(approval: Approval) -> list[Block]:
    """The approval card: what the agent wants, and buttons while it is pending."""
    title = f"Approval needed: {approval.tool_name}"
    blocks: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": truncate(title, HEADER_TEXT)}},
    ]
    if approval.summary:
        blocks.append({"type": "section", "text": _md(f"*{approval.summary}*")})
    fields = [
        _md(f"*Agent*\n{approval.agent}", FIELD_TEXT),
        _md(f"*Tool*\n`{approval.tool_name}`", FIELD_TEXT),
    ]
    if approval.requested_by:
        fields.append(_md(f"*Requested by*\n{person(approval.requested_by)}", FIELD_TEXT))
    blocks.append({"type": "section", "fields": fields})
    blocks.append({"type": "section", "text": _md(arguments_text(approval.arguments))})
    if approval.siblings:
        ran = "\n".join(
            f"• `{s.name}` → {truncate(s.output.replace(chr(10), ' '), 200)}"
            for s in approval.siblings[:10]
        )
        blocks.append({"type": "context", "elements": [_md(f"Already ran this turn:\n{ran}")]})
    blocks.extend(_state_blocks(approval))
    return blocks


def build_card_text(approval: Approval) -> str:
    """Notification text for the card (what shows in notifications and screen readers)."""
    return truncate(
        f"{approval.agent} wants to run {approval.tool_name}: {_STATUS_LINE[approval.status]}",
        3000,
    )


def build_buttons(approval: Approval) -> Block:
    """Approve / Reject / Edit for one approval; the value carries only its id."""
    return {
        "type": "actions",
        "block_id": f"decide-{approval.id}",
        "elements": [
            {
                "type": "button",
                "action_id": APPROVE_ACTION,
                "text": {"type": "plain_text", "text": "Approve"},
                "style": "primary",
                "value": approval.id,
                "confirm": _confirm("Approve?", f"Run `{approval.tool_name}` now?", "Approve"),
            },
            {
                "type": "button",
                "action_id": REJECT_ACTION,
                "text": {"type": "plain_text", "text": "Reject"},
                "style": "danger",
                "value": approval.id,
            },
            {
                "type": "button",
                "action_id": EDIT_ACTION,
                "text": {"type": "plain_text", "text": "Edit"},
                "value": approval.id,
            },
        ],
    }


def _confirm(title: str, text: str, confirm: str) -> Block:
    return {
        "title": {"type": "plain_text", "text": title},
        "text": {"type": "mrkdwn", "text": text[:300]},
        "confirm": {"type": "plain_text", "text": confirm},
        "deny": {"type": "plain_text", "text": "Cancel"},
    }


def _state_blocks(approval: Approval) -> list[Block]:
    if approval.status is Status.PENDING:
        return [
            {"type": "context", "elements": [_md(_STATUS_LINE[Status.PENDING])]},
            build_buttons(approval),
        ]
    # A fresh block_id per revision, so Slack never keeps stale interactive state.
    return [
        {
            "type": "context",
            "block_id": f"state-{approval.id}-{approval.status.value}",
            "elements": [_md(describe_state(approval))],
        }
    ]


def describe_state(approval: Approval) -> str:
    """One line saying where the approval stands and who decided."""
    line = _STATUS_LINE[approval.status]
    decision = approval.decision
    if decision is not None:
        line += f" · {decision_line(approval)}"
    result = approval.result
    if result is not None and result.error:
        line += f"\n{truncate(result.error, 500)}"
    return line


def decision_line(approval: Approval) -> str:
    decision = approval.decision
    if decision is None:
        return ""
    verb = {
        DecisionKind.APPROVE: "approved",
        DecisionKind.EDIT: "approved with edits",
        DecisionKind.REJECT: "rejected",
    }[decision.kind]
    when = f"<!date^{int(decision.at)}^{{date_short_pretty}} {{time}}|{int(decision.at)}>"
    text = f"{verb} by {person(decision.actor)} {when}"
    if decision.reason:
        text += f": {decision.reason}"
    return text


def build_decision_message(approval: Approval) -> list[Block]:
    """The thread reply that records a decision (and, for edits, what changed)."""
    decision = approval.decision
    assert decision is not None
    line = decision_line(approval)
    text = line[:1].upper() + line[1:]
    blocks: list[Block] = [{"type": "section", "text": _md(text)}]
    if decision.kind is DecisionKind.EDIT and decision.arguments is not None:
        blocks.append({"type": "section", "text": _md(edit_diff(approval))})
    return blocks


def edit_diff(approval: Approval) -> str:
    """A short ``- old / + new`` diff of the edited arguments."""
    decision = approval.decision
    assert decision is not None and decision.arguments is not None
    lines = []
    for name in sorted(set(approval.arguments) | set(decision.arguments)):
        old, new = approval.arguments.get(name), decision.arguments.get(name)
        if old != new:
            lines.append(f"- {name}: {json.dumps(old, ensure_ascii=False)}")
            lines.append(f"+ {name}: {json.dumps(new, ensure_ascii=False)}")
    return "```\n" + truncate("\n".join(lines) or "(no change)", SECTION_TEXT - 10) + "\n```"


def build_result_messages(approval: Approval) -> list[list[Block]]:
    """The thread replies for a finished run: the final answer, split to fit, or the error."""
    result = approval.result
    if result is None:
        return []
    if result.status is Status.FAILED:
        return [[{"type": "section", "text": _md(f":x: The run failed: {result.error}")}]]
    if result.status is Status.PAUSED:
        return [
            [
                {
                    "type": "section",
                    "text": _md(
                        ":double_vertical_bar: The agent paused again; the next approval is below."
                    ),
                }
            ]
        ]
    answer = result.text or "(no text)"
    chunks = [answer[i : i + SECTION_TEXT - 100] for i in range(0, len(answer), SECTION_TEXT - 100)]
    messages: list[list[Block]] = []
    for start in range(0, len(chunks), 40):
        messages.append([{"type": "section", "text": _md(c)} for c in chunks[start : start + 40]])
    messages[0].insert(0, {"type": "context", "elements": [_md(":checkered_flag: Final answer")]})
    return messages
