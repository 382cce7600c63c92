"""What an approval looks like in Slack: pure Block Kit builders, no I/O.

Both the bot (after a click) and the worker (after a run or an expiry) redraw the same card,
so the card and its thread messages are built here, from the approval alone. Action ids are
constants that the bot's listeners register against.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from approvals.models import DECIDED, Approval, DecisionKind, OnReject, RunResult, Status
from approvals.models.grant import Grant, Scope
from approvals.secrets import mask
from approvals.slack.limits import (
    FIELD_TEXT,
    HEADER_TEXT,
    SECTION_TEXT,
    SIBLING_PREVIEW,
    TURN_CALLS_SHOWN,
    truncate,
)
from approvals.slack.previews import (
    build_edited_preview_blocks,
    build_preview_blocks,
    first_line,
)

APPROVE_ACTION = "approval_approve"
REJECT_ACTION = "approval_reject"
EDIT_ACTION = "approval_edit"
RESPOND_ACTION = "approval_respond"
RETRY_ACTION = "approval_retry"
#: The scope menu beside Approve: choosing an option approves with that scope.
APPROVE_SCOPE_ACTION = "approval_approve_scope"
REVOKE_GRANT_ACTION = "grant_revoke"
#: On the card of a turn with several gated calls: decide every call still waiting at once
#: (each button's value is the turn's lead id).
APPROVE_ALL_ACTION = "turn_approve_all"
REJECT_ALL_ACTION = "turn_reject_all"

Block = dict[str, Any]

_STATUS_LINE = {
    Status.PENDING: ":hourglass_flowing_sand: Waiting for a decision",
    Status.APPROVED: ":white_check_mark: Approved",
    Status.EDITED: ":pencil2: Approved with edits",
    Status.REJECTED: ":no_entry: Rejected",
    Status.RESPONDED: ":speech_balloon: Answered by a reviewer",
    Status.EXPIRED: ":alarm_clock: Expired without a decision",
    Status.RUNNING: ":gear: Running",
    Status.INTERRUPTED: ":warning: Interrupted: the worker stopped during the run",
    Status.COMPLETED: ":checkered_flag: Completed",
    Status.PAUSED: ":double_vertical_bar: Paused again for another approval",
    Status.FAILED: ":x: Failed",
}

_VERB = {
    DecisionKind.APPROVE: "approved",
    DecisionKind.EDIT: "approved with edits",
    DecisionKind.REJECT: "rejected",
    DecisionKind.RESPOND: "answered instead of the tool",
    DecisionKind.EXPIRE: "expired",
}


def person(actor: str | None) -> str:
    """A Slack mention for user ids, the login for CLI users."""
    if not actor:
        return "someone"
    if actor.startswith("cli:"):
        return f"{actor[4:]} (CLI)"
    if actor == "system":
        return "the expiry timer"
    if actor.startswith("rule:"):
        return f"policy rule `{actor[5:]}`"
    if actor.startswith("grant:"):
        return f"grant `{actor[6:]}`"
    return f"<@{actor}>"


def slack_date(epoch: float) -> str:
    """A date Slack shows in each reader's own time zone."""
    return f"<!date^{int(epoch)}^{{date_short_pretty}} {{time}}|{int(epoch)}>"


#: Slack's ``<…>`` sequences in mrkdwn: mentions, dates, broadcasts and links.
_SPECIAL = re.compile(r"<([^<>\n]+)>")


def plain_text(mrkdwn: str) -> str:
    """What the builders write for Slack, as a terminal should show it: dates in this
    machine's local time, mentions as ``@id``, links as their label and address, and Slack's
    three escapes undone."""
    text = _SPECIAL.sub(lambda match: _plain_special(match.group(1)), mrkdwn)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _plain_special(inner: str) -> str:
    target, _, label = inner.partition("|")
    if target.startswith("!date^"):
        epoch = target.split("^")[1]
        if not epoch.isdigit():
            return label or target
        return time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(int(epoch)))
    if target.startswith(("@", "#")):
        return target[0] + (label or target[1:])
    if target.startswith("!"):  # !subteam^ID, !here, !channel
        return "@" + (label or target[1:].split("^")[-1])
    return f"{label} ({target})" if label and label != target else target


def _md(text: str, limit: int = SECTION_TEXT) -> Block:
    return {"type": "mrkdwn", "text": truncate(text, limit)}


def _section(text: str) -> Block:
    return {"type": "section", "text": _md(text)}


def _context(text: str, block_id: str | None = None) -> Block:
    block: Block = {"type": "context", "elements": [_md(text)]}
    if block_id:
        block["block_id"] = block_id
    return block


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
    if approval.in_turn and approval.turn_calls:
        return build_turn_card(approval.turn_calls)
    title = f"Approval needed: {approval.tool_name}"
    blocks: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": truncate(title, HEADER_TEXT)}},
    ]
    summary = approval.shown_summary
    if summary:
        blocks.append(_section(f"*{summary}*"))
    blocks.extend(build_preview_blocks(approval))
    blocks.append({"type": "section", "fields": _fields(approval)})
    blocks.append(_section(arguments_text(approval.shown_arguments)))
    blocks.extend(_siblings(approval))
    decision = approval.decision
    if decision is not None and decision.kind is DecisionKind.EDIT:
        title = "*Edited before running:*\n"
        blocks.append(_section(title + edit_diff(approval, SECTION_TEXT - len(title))))
    blocks.extend(_state_blocks(approval))
    return blocks


def build_turn_card(calls: tuple[Approval, ...]) -> list[Block]:
    """One card for the gated calls of one model turn: each call with its own buttons (or
    who decided it), "Approve all" / "Reject all" while two or more wait, then the run."""
    lead = calls[0]
    title = f"Approval needed: {len(calls)} calls of one turn"
    blocks: list[Block] = [
        {"type": "header", "text": {"type": "plain_text", "text": truncate(title, HEADER_TEXT)}},
        {"type": "section", "fields": _fields(lead, with_tool=False)},
    ]
    blocks.extend(_siblings(lead))
    for number, call in enumerate(calls[:TURN_CALLS_SHOWN], 1):
        summary = call.shown_summary
        head = f"*{number}. `{call.tool_name}`*" + (f" · {summary}" if summary else "")
        if call.status is Status.PENDING and call.votes:
            who = ", ".join(person(v) for v in call.votes)
            head += f" ({len(call.votes)} of {call.policy.approvals_required} approvals: {who})"
        line = first_line(call)
        if line:  # no room for each call's preview here: /agent-pending opens it
            head += f"\n:mag: {line}"
        args = arguments_text(call.shown_arguments, SECTION_TEXT - len(head) - 1)
        blocks.append({"type": "section", "block_id": f"call-{call.id}",
                       "text": _md(f"{head}\n{args}")})  # fmt: skip
        blocks.append(_turn_call_state(call))
    hidden = len(calls) - TURN_CALLS_SHOWN
    if hidden > 0:
        blocks.append(_context(
            f"{hidden} more call{'s' if hidden > 1 else ''} of this turn not shown: decide "
            "them with /agent-pending. The run resumes once every call is decided."
        ))  # fmt: skip
    waiting = [c for c in calls if c.status is Status.PENDING]
    if len(waiting) > 1:
        approve = _button(APPROVE_ALL_ACTION, "Approve all", lead, "primary")
        approve["confirm"] = _confirm(
            "Approve all?", f"Run the {len(waiting)} calls still waiting, as proposed?", "Approve"
        )
        reject = _button(REJECT_ALL_ACTION, "Reject all", lead, "danger")
        reject["confirm"] = _confirm(
            "Reject all?", f"Reject the {len(waiting)} calls still waiting?", "Reject"
        )
        blocks.append({"type": "actions", "block_id": f"turn-{lead.id}",
                       "elements": [approve, reject]})  # fmt: skip
    blocks.extend(_turn_run_state(calls, waiting))
    return blocks


def _siblings(approval: Approval) -> list[Block]:
    """The calls of the turn that already ran before the gated one, and what they returned."""
    if not approval.siblings:
        return []
    ran = "\n".join(
        f"• `{s.name}` → {truncate(s.output.replace(chr(10), ' '), SIBLING_PREVIEW)}"
        for s in approval.siblings[:10]
    )
    return [_context(f"Already ran this turn:\n{ran}")]


def _turn_call_state(call: Approval) -> Block:
    """A waiting call's buttons, or who decided it and how."""
    if call.status is Status.PENDING:
        return build_buttons(call)
    decision = call.decision
    kind = decision.kind.status if decision is not None else call.status
    line = _STATUS_LINE[kind] + (f" · {decision_line(call)}" if decision is not None else "")
    if decision is not None and decision.kind is DecisionKind.EDIT:
        line += f"\n{edit_diff(call, 1500)}"
    # A fresh block_id per revision, so Slack never keeps stale interactive state.
    return _context(line, f"state-{call.id}-{kind.value}")


def _turn_run_state(calls: tuple[Approval, ...], waiting: list[Approval]) -> list[Block]:
    """Where the turn's run stands: waiting, resuming, or how the resume ended."""
    lead = calls[0]
    if waiting:
        return [_context(f"{_STATUS_LINE[Status.PENDING]}: {len(waiting)} of the calls. The "
                         "run resumes once every call is decided.")]  # fmt: skip
    if lead.status in DECIDED:
        if any(c.stops_run for c in calls):
            return [_context("The run was stopped here, as a call's gate asks (on_reject=stop).",
                             f"run-{lead.id}-stopped")]  # fmt: skip
        return [_context("Every call is decided: the run resumes.", f"run-{lead.id}-decided")]
    if lead.status is Status.INTERRUPTED:
        return _state_blocks(lead)  # with Retry
    line = f"*Run:* {_STATUS_LINE[lead.status]}"
    if lead.result is not None and lead.result.error:
        line += f"\n{truncate(lead.result.error, 500)}"
    return [_context(line, f"run-{lead.id}-{lead.status.value}")]


def _fields(approval: Approval, with_tool: bool = True) -> list[Block]:
    fields = [_md(f"*Agent*\n{approval.agent}", FIELD_TEXT)]
    if with_tool:
        fields.append(_md(f"*Tool*\n`{approval.tool_name}`", FIELD_TEXT))
    if approval.requested_by:
        fields.append(_md(f"*Requested by*\n{person(approval.requested_by)}", FIELD_TEXT))
    if approval.status is Status.PENDING and approval.expires_at:
        fields.append(_md(f"*Expires*\n{slack_date(approval.expires_at)}", FIELD_TEXT))
    if approval.escalated_at is not None:
        targets = ", ".join(_target(t) for t in approval.escalate_to)
        escalated = f"*Escalated*\nto {targets} {slack_date(approval.escalated_at)}"
        fields.append(_md(escalated, FIELD_TEXT))
    required = approval.policy.approvals_required
    if required > 1:
        who = ", ".join(person(v) for v in approval.votes) or "none yet"
        fields.append(_md(f"*Approvals*\n{len(approval.votes)} of {required} ({who})", FIELD_TEXT))
    return fields


def _target(target: str) -> str:
    return f"<!subteam^{target}>" if target.startswith("S") else f"<#{target}>"


def build_card_text(approval: Approval) -> str:
    """Notification text for the card (what shows in notifications and screen readers)."""
    return truncate(
        f"{approval.agent} wants to run {approval.tool_name}: {_STATUS_LINE[approval.status]}",
        3000,
    )


def _button(action: str, label: str, approval: Approval, style: str | None = None) -> Block:
    button: Block = {
        "type": "button",
        "action_id": action,
        "text": {"type": "plain_text", "text": label},
        "value": approval.id,
    }
    if style:
        button["style"] = style
    return button


def build_buttons(approval: Approval) -> Block:
    """The decision buttons for one approval; each value carries only its id."""
    approve = _button(APPROVE_ACTION, "Approve", approval, "primary")
    approve["confirm"] = _confirm("Approve?", f"Run `{approval.tool_name}` now?", "Approve")
    elements = [approve]
    if approval.policy.allows_grants:
        elements.append(build_scope_menu(approval))
    elements.append(_button(REJECT_ACTION, "Reject", approval, "danger"))
    # A quorum is about approving the call as proposed: no single person edits or answers.
    if approval.policy.approvals_required == 1:
        if approval.editable:
            elements.append(_button(EDIT_ACTION, "Edit", approval))
        elements.append(_button(RESPOND_ACTION, "Respond", approval))
    return {"type": "actions", "block_id": f"decide-{approval.id}", "elements": elements}


def build_scope_menu(approval: Approval) -> Block:
    """The scope choice beside Approve; each option's value is ``<approval id>:<scope>``."""
    scopes = [s for s in Scope if s is not Scope.RUN or approval.run_id is not None]
    options = [
        {"text": {"type": "plain_text", "text": s.label}, "value": f"{approval.id}:{s.value}"}
        for s in scopes
    ]
    return {
        "type": "static_select",
        "action_id": APPROVE_SCOPE_ACTION,
        "placeholder": {"type": "plain_text", "text": "Approve for…"},
        "options": options,
        "confirm": _confirm(
            "Approve with this scope?",
            f"Run `{approval.tool_name}` now, and let the scope you chose through without asking.",
            "Approve",
        ),
    }


def parse_scope_value(value: str) -> tuple[str, Scope] | None:
    """(approval id, scope) from a scope option's value; None when it is not one."""
    approval_id, _, raw = value.partition(":")
    try:
        return approval_id, Scope(raw)
    except ValueError:
        return None


def card_link(approval: Approval) -> str | None:
    """A link to the card (Slack's permalink form), None before it is posted."""
    if approval.card_ts is None:
        return None
    return f"https://slack.com/archives/{approval.channel}/p{approval.card_ts.replace('.', '')}"


def build_reminder_message(approval: Approval, round_: int, of: int) -> list[Block]:
    """The thread reply that reminds people the request still waits (round ``round_``)."""
    return [
        _context(
            f":bell: Reminder {round_} of {of}: still waiting for a decision since "
            f"{slack_date(approval.created_at)}."
        )
    ]


def build_reminder_dm(approval: Approval) -> list[Block]:
    """The direct message to an approver: what waits, and a link to its card."""
    link = card_link(approval)
    what = approval.shown_summary or f"`{approval.tool_name}`"
    where = f" <{link}|Open the card>" if link else ""
    return [_section(f":bell: *{what}* from {approval.agent} waits for your decision.{where}")]


def build_escalation_notice(approval: Approval, groups: list[str]) -> list[Block]:
    """Above the escalated copy of the card: why it is here, and who is called on."""
    mentions = " ".join(f"<!subteam^{g}>" for g in groups)
    link = card_link(approval)
    text = f":rotating_light: Escalated: nobody decided since {slack_date(approval.created_at)}."
    if link:
        text += f" <{link}|The first card>."
    return [_section(f"{text} {mentions}".strip())]


def build_grant_use_line(approval: Approval) -> list[Block]:
    """The one compact line posted when a grant let a call through without a card."""
    what = approval.shown_summary or f"`{approval.tool_name}`"
    return [_context(f":zap: {what} · {approval.agent} · {decision_line(approval)}")]


def build_grant_line(grant: Grant, now: float) -> list[Block]:
    """One grant on the App Home tab, with Revoke while it is live."""
    state = "revoked" if grant.revoked_at else ("live" if grant.live(now) else "expired")
    until = f" until {slack_date(grant.expires_at)}" if grant.expires_at else ""
    text = (
        f"*{grant.scope.label}* · {grant.describe()} · by {person(grant.created_by)}"
        f" · {state}{until} · used {grant.uses} times · `{grant.id}`"
    )
    section: Block = {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 3000)}}
    if grant.live(now):
        section["accessory"] = {
            "type": "button",
            "action_id": REVOKE_GRANT_ACTION,
            "text": {"type": "plain_text", "text": "Revoke"},
            "value": grant.id,
            "style": "danger",
        }
    return [section]


def confirm_dialog(text: str, confirm: str = "Yes") -> Block:
    """A confirm dialog asking ``text`` (for buttons built outside this module)."""
    return _confirm("Are you sure?", text, confirm)


def _confirm(title: str, text: str, confirm: str) -> Block:
    return {
        "title": {"type": "plain_text", "text": title},
        "text": {"type": "mrkdwn", "text": text[:300]},
        "confirm": {"type": "plain_text", "text": confirm},
        "deny": {"type": "plain_text", "text": "Cancel"},
    }


#: Said on a card asked again because the state its decision depended on changed.
STALE_NOTICE = (
    ":warning: *Changed since it was approved*: the state this call depends on is not what it"
    " was when it was approved, so it did not run. Look again and decide."
)


def _state_blocks(approval: Approval) -> list[Block]:
    if approval.status is Status.PENDING:
        stale = [_section(STALE_NOTICE)] if approval.stale else []
        return [*stale, _context(_STATUS_LINE[Status.PENDING]), build_buttons(approval)]
    if approval.status is Status.INTERRUPTED:
        retry = _button(RETRY_ACTION, "Retry", approval, "danger")
        retry["confirm"] = _confirm(
            "Run it again?",
            f"`{approval.tool_name}` may already have run. Retry only if running it twice is safe.",
            "Retry",
        )
        return [
            _context(describe_state(approval), f"state-{approval.id}-interrupted"),
            {"type": "actions", "block_id": f"retry-{approval.id}", "elements": [retry]},
        ]
    # A fresh block_id per revision, so Slack never keeps stale interactive state.
    return [_context(describe_state(approval), f"state-{approval.id}-{approval.status.value}")]


def describe_state(approval: Approval) -> str:
    """One line saying where the approval stands and who decided."""
    line = _STATUS_LINE[approval.status]
    if approval.decision is not None:
        line += f" · {decision_line(approval)}"
    if _stopped(approval):
        line += "\nThe run was stopped here, as the tool's gate asks (on_reject=stop)."
    result = approval.result
    if result is not None and result.error:
        line += f"\n{truncate(result.error, 500)}"
    return line


def _stopped(approval: Approval) -> bool:
    return (
        approval.status in (Status.REJECTED, Status.EXPIRED)
        and approval.policy.on_reject is OnReject.STOP
    )


def decision_line(approval: Approval) -> str:
    """Who decided what, and when (empty while nobody has)."""
    decision = approval.decision
    if decision is None:
        return ""
    if decision.kind is DecisionKind.EXPIRE:
        return f"expired {slack_date(decision.at)}"
    quorum = decision.kind is DecisionKind.APPROVE and len(approval.votes) > 1
    voters = approval.votes if quorum else (decision.actor,)
    text = f"{_VERB[decision.kind]} by {', '.join(person(v) for v in voters)}"
    if decision.grant_creator:
        text += f" of {person(decision.grant_creator)}"
    text += f" {slack_date(decision.at)}"
    if decision.reason:
        text += f": {decision.reason}"
    return text


def build_decision_message(approval: Approval) -> list[Block]:
    """The thread reply that records a decision (with the edit's diff or the response)."""
    decision = approval.decision
    assert decision is not None
    line = decision_line(approval)
    blocks: list[Block] = [_section(line[:1].upper() + line[1:])]
    if decision.kind is DecisionKind.EDIT and decision.arguments is not None:
        blocks.append(_section(edit_diff(approval)))
    if decision.kind is DecisionKind.RESPOND and decision.response is not None:
        quoted = "\n".join(f">{line}" for line in decision.response.splitlines())
        blocks.append(_section(f"The agent receives:\n{truncate(quoted, 2900)}"))
    if _stopped(approval):
        blocks.append(_context("The run stops here: the agent is not resumed."))
    return blocks


def build_interrupted_message(approval: Approval) -> list[Block]:
    """The thread reply explaining an interrupted run, so a person can judge a Retry."""
    name = f"`{approval.tool_name}`"
    if approval.tool_finished_at is not None:
        what = f"{name} finished {slack_date(approval.tool_finished_at)}, but the run did not."
    elif approval.tool_started_at is not None:
        started = slack_date(approval.tool_started_at)
        what = f"{name} started {started} and may or may not have finished."
    else:
        what = f"It is unknown whether {name} ran."
    return [
        _section(
            f":warning: The worker stopped during the run. {what} It was not run again. "
            "*Retry* runs it once more, as decided; the tool gets the same idempotency key."
        )
    ]


def build_stale_message(approved: str | None, found: str | None) -> list[Block]:
    """The thread reply when the state changed between the decision and the run."""
    now = f"`{truncate(found, 200)}`" if found else "a state that could not be read"
    was = f"`{truncate(approved, 200)}`" if approved else "the state at the pause"
    return [
        _section(
            f":warning: The state this call depends on changed since it was approved ({was},"
            f" now {now}), so it did not run. The card asks again."
        )
    ]


def build_retry_message(actor: str) -> list[Block]:
    return [_section(f":repeat: Retried by {person(actor)}: running it again, as decided.")]


def build_vote_message(approval: Approval) -> list[Block]:
    """The thread reply when an approval counts toward a quorum that is not complete yet."""
    required = approval.policy.approvals_required
    voter = approval.votes[-1] if approval.votes else None
    return [
        _section(f"{person(voter)} approved: {len(approval.votes)} of {required} approvals so far.")
    ]


def build_warning_message(approval: Approval) -> list[Block]:
    """The thread reminder posted some time before an undecided approval expires."""
    return [
        _section(
            f":warning: Nobody has decided yet. This request expires "
            f"{slack_date(approval.expires_at)}; then the tool will not run."
        )
    ]


def edit_diff(approval: Approval, limit: int = SECTION_TEXT) -> str:
    """A short ``- old / + new`` diff of the edited arguments."""
    decision = approval.decision
    assert decision is not None and decision.arguments is not None
    lines = []
    before = approval.shown_arguments
    after = mask(decision.arguments, approval.secret_arguments)
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old != new:
            lines.append(f"- {name}: {json.dumps(old, ensure_ascii=False)}")
            lines.append(f"+ {name}: {json.dumps(new, ensure_ascii=False)}")
    return "```\n" + truncate("\n".join(lines) or "(no change)", limit - 8) + "\n```"


def _chunks(text: str, size: int = SECTION_TEXT - 100) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _caller_report(approval: Approval, result: RunResult) -> Block:
    """What an external approval's caller reported doing after the decision."""
    mark = ":white_check_mark:" if result.status is Status.COMPLETED else ":x:"
    verb = "done" if result.status is Status.COMPLETED else "it failed"
    output = truncate(result.tool_output or "(no output)", SECTION_TEXT - 200)
    return _section(f"{mark} {approval.agent} reports {verb}:\n```\n{output}\n```")


def build_result_messages(approval: Approval) -> list[list[Block]]:
    """The thread replies for a finished run: one, unless a long answer needs more; it shows
    what the tool returned, then the outcome (one reply is one Slack call fewer per run)."""
    result = approval.result
    if result is None:
        return []
    if approval.external:
        return [[_caller_report(approval, result)]]
    messages: list[list[Block]]
    if result.status is Status.FAILED:
        messages = [[_section(f":x: The run failed: {result.error}")]]
    elif result.status is Status.PAUSED:
        messages = [
            [_section(":double_vertical_bar: The agent paused again; the next approval is below.")]
        ]
    else:
        chunks = _chunks(result.text or "(no text)")
        messages = [[_section(c) for c in chunks[i : i + 40]] for i in range(0, len(chunks), 40)]
        messages[0].insert(0, _context(":checkered_flag: Final answer"))
    if approval.in_turn and approval.turn_calls:
        ran_calls = _turn_outputs(approval.turn_calls)
        if ran_calls:
            messages[0].insert(0, _section(ran_calls))  # one block for the whole turn
    elif result.executed_arguments is not None and result.tool_output is not None:
        output = truncate(result.tool_output, SECTION_TEXT - 200)
        ran = _section(f"`{approval.tool_name}` ran and returned:\n```\n{output}\n```")
        messages[0].insert(0, ran)  # at most 43 blocks: within Slack's 50
        messages[0][:0] = build_edited_preview_blocks(result.preview)
    return messages


def _turn_outputs(calls: tuple[Approval, ...]) -> str:
    """What each call of a turn that ran returned, in one section's room."""
    ran = [
        (number, call)
        for number, call in enumerate(calls, 1)
        if call.result is not None
        and call.result.executed_arguments is not None
        and call.result.tool_output is not None
    ]
    if not ran:
        return ""
    room = max(40, (SECTION_TEXT - 100) // len(ran) - 40)
    return "\n".join(
        f"{number}. `{call.tool_name}` returned: "
        f"`{truncate((call.result.tool_output or '').replace(chr(10), ' '), room)}`"
        for number, call in ran
        if call.result is not None
    )
