"""Nothing stranded: reminders and escalation as Redis deadlines, on time across restarts and
removed by the decision; ``expires_in=None`` waits indefinitely."""

from __future__ import annotations

import json
import time

import pytest

from approvals import store
from approvals.calls.gate import gate_from_dict, gate_of, gate_to_dict, requires_approval
from approvals.config import Settings
from approvals.decisions import reminders
from approvals.decisions.review import decide, refusal
from approvals.models import DecisionKind, Policy, Status
from tests.agents import tools
from tests.conftest import CHANNEL, wait_until
from tests.e2e import block_text, card_of, click, pause, wait_status
from tests.factories import make_approval
from tests.processes import bot_url, start_bot, start_worker, stop_all, wait_for_workers

TOOLS = [tools.list_files, tools.delete_path, tools.archive_bucket]


def _pause(tool: str = "delete_path", **args: object) -> str:
    return pause(tool, args or {"path": "/srv/a"}, tools=TOOLS, requested_by="UREQ")


def _refusals(conn, approval_id: str, actor: str) -> int:
    trail = store.audit.audit_trail(conn, approval_id)
    return len([e for e in trail if e["event"] == "refused" and e["actor"] == actor])


def _deadlines(conn) -> set[str]:
    return {m.decode() for m in conn.zrange(store.keys.DEADLINES_KEY, 0, -1)}


def test_reminder_rounds_repeat_at_most_three_times():
    """Round n is due n intervals after the pause; there is no fourth."""
    approval = make_approval(remind_after=60.0)
    start = approval.created_at
    assert [reminders.due_round(approval, start + t) for t in (59, 60, 130, 185, 999)] == [
        0, 1, 2, 3, 3,
    ]  # fmt: skip
    assert reminders.next_reminder_at(approval, 1) == start + 120
    assert reminders.next_reminder_at(approval, 3) is None
    assert reminders.due_round(make_approval(remind_after=0.0), start + 999) == 0


def test_escalated_groups_may_decide_and_are_reminded():
    """Once escalated, the members of escalate_to's user groups may decide too."""
    settings = Settings(approvers=("UALICE",))
    members = {"S0SRE": ["UCAROL"]}.get
    waiting = make_approval(escalate_to=("C0ESC", "S0SRE"), requested_by="UREQ")
    assert refusal(settings, waiting, "UCAROL", lambda g: members(g, [])) is not None
    waiting.escalated_at = time.time()
    assert refusal(settings, waiting, "UCAROL", lambda g: members(g, [])) is None
    people = reminders.approvers_to_remind(settings, waiting, lambda g: members(g, []))
    assert people == ["UALICE", "UCAROL"]
    mine = make_approval(policy=Policy(approvers=("UREQ", "UBOB")), requested_by="UREQ")
    assert reminders.approvers_to_remind(settings, mine, lambda g: []) == ["UBOB"]


def test_gate_options_round_trip_and_are_checked():
    """remind_after, escalate_after, escalate_to and expires_in=None survive the pause record."""

    @requires_approval(expires_in=None, remind_after=5, escalate_after=9, escalate_to=["S0X"])
    def tool(x: str) -> str:
        return x

    gate = gate_of(tool)
    assert gate is not None and gate.waits_forever and gate.expires_in is None
    assert gate_from_dict(gate_to_dict(gate)) == gate
    with pytest.raises(ValueError, match="remind_after"):
        requires_approval(remind_after=-1)


def test_expires_in_none_waits_indefinitely(env, conn):
    """No expiry deadline and no expiry time; reminders still apply."""
    pause_id = _pause("archive_bucket", bucket="logs")
    approval = store.records.load(conn, pause_id)
    assert approval.expires_at == 0.0 and approval.remind_after == 3600.0
    assert _deadlines(conn) == {f"remind:{pause_id}"}


def test_the_decision_removes_reminder_and_escalation_deadlines(env, conn, monkeypatch):
    """All of an approval's deadlines leave with it, in the decision's atomic step."""
    monkeypatch.setenv("APPROVALS_ESCALATE_AFTER", "600")
    monkeypatch.setenv("APPROVALS_ESCALATE_TO", "C0ESC")
    pause_id = _pause()
    kinds = {m.split(":")[0] for m in _deadlines(conn)}
    assert kinds == {"expire", "warn", "remind", "escalate"}
    decide(conn, Settings.from_env(), pause_id, DecisionKind.APPROVE, "UALICE")
    assert _deadlines(conn) == set()


@pytest.mark.service_env(APPROVERS="UALICE,UBOB")
def test_reminders_and_escalation_fire_on_time_across_a_restart(
    services, slack, env, conn, tmp_path, monkeypatch
):
    """Small intervals through settings: with bot and worker restarted after the pause, the
    thread and each approver are reminded, the card is escalated to a channel and a user
    group, and a member of that group decides from the escalated card."""
    monkeypatch.setenv("APPROVALS_REMIND_AFTER", "6")
    monkeypatch.setenv("APPROVALS_ESCALATE_AFTER", "7")
    monkeypatch.setenv("APPROVALS_ESCALATE_TO", "C0ESC,S0SRE")
    slack.usergroups["S0SRE"] = ["UCAROL"]
    pause_id = _pause()
    approval = store.records.load(conn, pause_id)
    card = card_of(slack, pause_id)
    stop_all([services.bot, *services.workers])
    assert time.time() < approval.created_at + 6, "the restart must come before the reminder"
    restarted = {**env, "APPROVERS": "UALICE,UBOB"}
    services.workers = [start_worker(restarted, tmp_path / "worker2.log", f"w2-{time.time_ns()}")]
    services.bot = start_bot(restarted, tmp_path / "bot2.log")
    services.bot_url = bot_url(services.bot)
    wait_for_workers(restarted, services.workers, 1)

    wait_until(
        lambda: [m for m in slack.thread(CHANNEL, card.ts) if "Reminder 1 of 3" in block_text(m)],
        20,
        "the first reminder",
    )
    (reminded,) = wait_until(  # audited just after the reply is posted
        lambda: [e for e in store.audit.audit_trail(conn, pause_id) if e["event"] == "reminded"],
        10,
        "the reminder audited",
    )
    assert approval.created_at + 6 <= float(reminded["at"]) < approval.created_at + 11  # on time
    assert reminded["round"] == "1"
    for user in ("UALICE", "UBOB"):
        (dm,) = wait_until(lambda u=user: slack.messages(slack.dm_channel(u)), 10, f"DM {user}")
        assert f"/archives/{CHANNEL}/p{card.ts.replace('.', '')}" in block_text(dm)
    (escalated,) = wait_until(lambda: slack.messages("C0ESC"), 20, "the escalated card")
    assert "<!subteam^S0SRE>" in block_text(escalated)
    first = wait_until(
        lambda: [m for m in slack.messages(CHANNEL) if m.ts == card.ts and "Escalated" in
                 block_text(m)],
        10,
        "the first card showing the escalation",
    )  # fmt: skip
    assert "C0ESC" in block_text(first[0])
    assert store.records.load(conn, pause_id).escalated_at is not None

    status, _ = click(slack, services.bot_url, "approve", pause_id, "UCAROL", escalated.ts)
    assert status == 200
    decided = wait_status(conn, pause_id, Status.APPROVED, Status.RUNNING, Status.COMPLETED)
    assert decided.decision is not None and decided.decision.actor == "UCAROL"
    assert not [m for m in _deadlines(conn) if m.endswith(pause_id)]


@pytest.mark.service_env(APPROVERS="UALICE")
def test_escalation_channel_members_may_decide_after_escalation(services, slack, env, conn,
                                                                monkeypatch):  # fmt: skip
    """A member of the escalation channel is refused before the escalation; after it, the
    bot asks Slack (conversations.members, every page) and lets them decide. A failed lookup
    refuses (fails closed) and changes nothing. The first card is redrawn to say where and
    when it was escalated."""
    monkeypatch.setenv("APPROVALS_ESCALATE_AFTER", "2")
    monkeypatch.setenv("APPROVALS_ESCALATE_TO", "C0ESC")
    slack.channel_members["C0ESC"] = [f"UM{n:04d}" for n in range(450)] + ["UDAVE"]
    pause_id = _pause()
    card = card_of(slack, pause_id)
    assert click(slack, services.bot_url, "approve", pause_id, "UDAVE", card.ts)[0] == 200
    wait_until(lambda: _refusals(conn, pause_id, "UDAVE") == 1, 10, "the refusal")
    assert store.records.load(conn, pause_id).status is Status.PENDING
    assert not slack.calls("conversations.members")  # not escalated yet: nobody asked

    (escalated,) = wait_until(lambda: slack.messages("C0ESC"), 20, "the escalated card")
    first = wait_until(
        lambda: [u for u in slack.calls("chat.update") if u["args"].get("ts") == card.ts
                 and "Escalated" in json.dumps(u["args"].get("blocks"))],
        10,
        "the first card redrawn to show the escalation",
    )  # fmt: skip
    assert "C0ESC" in json.dumps(first[0]["args"]["blocks"])
    assert "Escalated" in block_text(slack.message(CHANNEL, card.ts))

    slack.fail_next("conversations.members", error="internal_error")
    assert click(slack, services.bot_url, "approve", pause_id, "UDAVE", escalated.ts)[0] == 200
    wait_until(
        lambda: _refusals(conn, pause_id, "UDAVE") == 2,
        10,
        "the refusal while Slack could not say who is in the channel",
    )
    assert store.records.load(conn, pause_id).status is Status.PENDING

    assert click(slack, services.bot_url, "approve", pause_id, "UDAVE", escalated.ts)[0] == 200
    decided = wait_status(conn, pause_id, Status.APPROVED, Status.RUNNING, Status.COMPLETED)
    assert decided.decision is not None and decided.decision.actor == "UDAVE"
    pages = slack.calls("conversations.members")
    assert len(pages) == 1 + 3  # the failed lookup, then three pages of 200
    assert [p["args"].get("channel") for p in pages] == ["C0ESC"] * 4
