"""Nothing stranded: reminders to the approvers, and escalation to more people.

Both are deadlines in Redis, written with the pause like the expiry (``queue.schedule_reminders``)
and swept into jobs by every worker (``deadlines.sweep``), so they fire on time across restarts
of every process; a decision removes them in the same atomic step as the decision. A reminder
goes to the card's thread and, as a direct message with a link to the card, to each approver;
it repeats every ``remind_after`` seconds, at most ``MAX_REMINDERS`` times. An escalation posts
the card to ``escalate_to`` once, and the members of its user groups and channels may decide
from then on. The calls of one turn share a card: each keeps the deadlines, and the first
still waiting speaks for the card (``acts_for_card``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from approvals.config import Settings
from approvals.models import Approval

#: Reminders per approval: after that, the escalation and the expiry take over.
MAX_REMINDERS = 3


def set_schedule(
    approval: Approval,
    settings: Settings,
    remind_after: float | None,
    escalate_after: float | None,
    escalate_to: tuple[str, ...] | None,
) -> None:
    """The approval's reminder and escalation times: what its gate (or API request) asks,
    else the settings'; no escalation without somewhere to escalate to."""
    approval.remind_after = settings.remind_after if remind_after is None else remind_after
    approval.escalate_to = settings.escalate_to if escalate_to is None else escalate_to
    escalate = settings.escalate_after if escalate_after is None else escalate_after
    approval.escalate_after = escalate if approval.escalate_to else 0.0


def due_round(approval: Approval, now: float) -> int:
    """Which reminder is due at ``now`` (0: none yet), at most ``MAX_REMINDERS``."""
    if approval.remind_after <= 0:
        return 0
    return min(int((now - approval.created_at) // approval.remind_after), MAX_REMINDERS)


def next_reminder_at(approval: Approval, sent: int) -> float | None:
    """When the reminder after round ``sent`` is due (None: that was the last)."""
    if approval.remind_after <= 0 or sent >= MAX_REMINDERS:
        return None
    return approval.created_at + (sent + 1) * approval.remind_after


def approvers_to_remind(
    settings: Settings, approval: Approval, members_of: Callable[[str], Collection[str]]
) -> list[str]:
    """The people who may decide, each once, the agent's own requester left out unless they
    may approve for themselves. Empty when anyone may decide: then only the thread is told."""
    policy = approval.policy
    people = list(settings.approvers if policy.approvers is None else policy.approvers)
    groups = settings.approver_groups if policy.approver_groups is None else policy.approver_groups
    for group in (*groups, *approval.escalated_groups):
        people += members_of(group)
    if not policy.allow_self_approval:
        people = [p for p in people if p != approval.requested_by]
    return list(dict.fromkeys(people))


def acts_for_card(approval: Approval, pending: Collection[str]) -> bool:
    """Whether this approval's reminder or escalation speaks for its card: a call alone in
    its turn always does; of a turn sharing one card, only the first call still waiting
    (``pending``, in call order), so the card is reminded of and escalated once, for as long
    as any of its calls waits, whichever is decided first."""
    if not approval.in_turn:
        return True
    return bool(pending) and next(iter(pending)) == approval.id


def escalation_channels(approval: Approval) -> list[str]:
    """The channels an escalation posts the card to."""
    return [t for t in approval.escalate_to if not t.startswith("S")]


def escalation_groups(approval: Approval) -> list[str]:
    """The user groups an escalation calls on."""
    return [t for t in approval.escalate_to if t.startswith("S")]
