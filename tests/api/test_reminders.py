"""Reminders and escalation for API requests, end to end: the request's remind_after,
escalate_after and escalate_to are deadlines like a paused llm call's, and the decision
removes them."""

from __future__ import annotations

import json

import pytest

from approvals import store
from approvals.client import ApiError
from approvals.decisions.reminders import MAX_REMINDERS
from approvals.models import Status
from tests.api.conftest import Stack
from tests.conftest import CHANNEL, wait_until
from tests.e2e import block_text, card_of, click, reply_containing, settled, wait_status

ESCALATION_CHANNEL = "C0ESCALATE"


def _events(stack: Stack, approval_id: str) -> list[str]:
    return [e["event"] for e in store.audit.audit_trail(stack.conn, approval_id)]


def _deadlines(stack: Stack, approval_id: str) -> set[str]:
    members = stack.conn.zrange(store.keys.DEADLINES_KEY, 0, -1)
    return {m.decode() for m in members if m.decode().endswith(approval_id)}


def test_a_reminder_and_an_escalation_fire_and_the_decision_removes_them(stack: Stack) -> None:
    """remind_after=2: the thread and the approver are reminded; escalate_after=3: the card
    is posted to escalate_to; the approver's decision ends both, and no reminder follows."""
    client = stack.client(stack.token("reminded"))
    made = client.request(
        "rotate_key",
        {"name": "prod"},
        approvers=["UBOB"],
        remind_after=2,
        escalate_after=3,
        escalate_to=[ESCALATION_CHANNEL],
        expires_in=60,
    )
    approval = store.records.load(stack.conn, made["id"])
    assert (approval.remind_after, approval.escalate_after) == (2.0, 3.0)
    assert {"remind:" + made["id"], "escalate:" + made["id"]} <= _deadlines(stack, made["id"])
    card = card_of(stack.slack, made["id"])
    reply_containing(stack.slack, card.ts, f"Reminder 1 of {MAX_REMINDERS}")
    dm = stack.slack.dm_channel("UBOB")
    wait_until(lambda: [m for m in stack.slack.messages(dm) if "rotate_key" in m.text], 20, "DM")
    escalated = wait_until(
        lambda: [
            m
            for m in stack.slack.messages(ESCALATION_CHANNEL)
            if made["id"] in m.ts + str(m.blocks)
        ],
        20,
        "the card in the escalation channel",
    )
    assert escalated[0].text.startswith("Escalated")
    # The worker records the escalation once Slack has taken every message of it.
    wait_until(lambda: "escalated" in _events(stack, made["id"]), 20, "the escalation's record")

    status, _ = click(stack.slack, stack.bot_url, "approve", made["id"], "UBOB", card.ts)
    assert status == 200
    wait_status(stack.conn, made["id"], Status.APPROVED)
    assert client.wait(made["id"], timeout=10)["status"] == "approved"
    assert _deadlines(stack, made["id"]) == set()
    assert "reminded" in _events(stack, made["id"])

    def reminders_sent() -> int:
        return sum("Reminder" in block_text(m) for m in stack.slack.thread(CHANNEL, card.ts))

    assert settled(reminders_sent, interval=2.5) == _events(stack, made["id"]).count("reminded")


def test_remind_after_defaults_to_the_setting_and_zero_turns_it_off(stack: Stack) -> None:
    """Without remind_after the approval takes APPROVALS_REMIND_AFTER; 0 schedules none."""
    client = stack.client(stack.token("reminded-defaults"))
    default = client.request("rotate_key", {"name": "a"})
    off = client.request("rotate_key", {"name": "b"}, remind_after=0)
    assert store.records.load(stack.conn, default["id"]).remind_after == 3600.0
    assert "remind:" + default["id"] in _deadlines(stack, default["id"])
    assert store.records.load(stack.conn, off["id"]).remind_after == 0.0
    assert _deadlines(stack, off["id"]) == {"expire:" + off["id"]}


def test_bad_reminder_fields_are_refused_and_change_nothing(stack: Stack) -> None:
    """A negative remind_after or an escalate_to that is no channel or group id: 422 naming
    the field, and no approval is created."""
    client = stack.client(stack.token("reminded-badly"))
    for fields in ({"remind_after": -1}, {"escalate_to": ["#ops"]}):
        with pytest.raises(ApiError) as refused:
            client.request("rotate_key", {"name": "a"}, **fields)
        assert refused.value.status == 422
        assert next(iter(fields)) in json.dumps(refused.value.detail)
    assert client.pending() == []
