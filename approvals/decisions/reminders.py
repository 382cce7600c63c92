"""Nothing stranded: reminders to the approvers, and escalation to more people.

Both are deadlines (``deadlines``): written with the pause like the expiry and swept into jobs
by every worker, so they fire on time across restarts of every process; a decision removes them
in the same atomic step as the decision. A reminder goes to the card's thread and, as a direct
message with a link to the card, to each approver; it repeats every ``remind_after`` seconds,
at most ``MAX_REMINDERS`` times. An escalation posts the card to ``escalate_to`` once, and the
members of its user groups and channels may decide from then on. The calls of one turn share a
card: each keeps the deadlines, and the first still waiting speaks for the card
(``acts_for_card``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

import redis
from slack_sdk import WebClient

from approvals import store
from approvals.config import Settings
from approvals.decisions import deadlines
from approvals.models import Approval, Status
from approvals.slack import web as slack

#: Reminders per approval: after that, the escalation and the expiry take over.
MAX_REMINDERS = 3


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


def remind(conn: redis.Redis, settings: Settings, client: WebClient, approval_id: str) -> None:
    """Remind the thread and each approver of a request still waiting; schedule the next."""
    approval = store.records.load(conn, approval_id)
    round_ = due_round(approval, time.time())
    if approval.status is not Status.PENDING or round_ < 1:
        return
    following = next_reminder_at(approval, round_)
    if following is not None:  # first, so a failed post does not end the reminders
        deadlines.add(conn, deadlines.Kind.REMIND, approval_id, following)
    if not _acts_for_card(conn, approval):
        return
    # Claimed on the card's approval (the turn's lead), so each round is sent once per card.
    if not store.records.claim(conn, approval.turn_lead, f"reminded_{round_}"):
        return
    people = approvers_to_remind(
        settings, approval, lambda group: slack.group_members(client, conn, group)
    )
    slack.remind(client, approval, people, round_, MAX_REMINDERS)
    store.audit.append(conn, approval_id, "reminded", "system", round=round_, people=people)


def _acts_for_card(conn: redis.Redis, approval: Approval) -> bool:
    """Whether this approval's reminder or escalation speaks for its card: a turn's card is
    spoken for by its first call still waiting, not once per call."""
    pending = store.turns.turn_pending(conn, approval.turn) if approval.in_turn else [approval.id]
    return acts_for_card(approval, pending)


def escalate(conn: redis.Redis, client: WebClient, approval_id: str) -> None:
    """Post a request nobody decided to ``escalate_to``, once; its groups may then decide."""
    approval = store.records.load(conn, approval_id)
    if approval.status is not Status.PENDING or not approval.escalate_to:
        return
    if not _acts_for_card(conn, approval):
        return
    # The whole card is escalated: every call of a turn, claimed on the card's approval.
    whole = list(approval.turn) if approval.in_turn else [approval_id]
    if not store.records.claim(conn, approval.turn_lead, "escalated"):
        return
    for call_id in whole:
        if call_id != approval.turn_lead:
            store.records.claim(conn, call_id, "escalated")
    approval = store.records.load(conn, approval_id)  # with its escalation time, for the cards
    channels = escalation_channels(approval)
    try:
        slack.escalate(client, approval, channels, escalation_groups(approval))
    except Exception:
        # Slack refused or was away: try again shortly, as a deadline like the first.
        for call_id in whole:
            store.records.release(conn, call_id, "escalated")
        deadlines.add(conn, deadlines.Kind.ESCALATE, approval_id, time.time() + 30)
        raise
    store.audit.append(conn, approval_id, "escalated", "system", to=list(approval.escalate_to))
