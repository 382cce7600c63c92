"""Several gated calls of one model turn: one card lists them all, each decided on its own
(or all at once), and the run resumes once, when the last of them is decided."""

from __future__ import annotations

import time
from typing import Any

import pytest

from approvals import run_agent, run_agent_async, store
from approvals.calls.outcomes import wait
from approvals.models import DecisionKind, Status
from approvals.slack.cards import APPROVE_ALL_ACTION, REJECT_ALL_ACTION
from tests.agents import tools
from tests.agents.scripted import calls, say, script
from tests.conftest import CHANNEL, SIGNING_SECRET, wait_until
from tests.e2e import (
    approve_values,
    at_once,
    block_text,
    card_of,
    card_showing,
    click,
    model_calls,
    reply_containing,
    settled,
    submit_edit,
    submit_reject,
    tool_results_seen,
    tool_runs,
    wait_status,
)
from tests.processes import start_worker, wait_for_workers
from tests.slack_requests import block_actions_payload, send_interaction

TOOLS = [tools.list_files, tools.delete_path, tools.send_email]
THREE = script(
    calls(
        ("delete_path", {"path": "a"}),
        ("send_email", {"to": "ops@example.com", "subject": "hi"}),
        ("delete_path", {"path": "b"}),
    ),
    say("Done: {results}"),
)


def _pause(conn: Any, prompt: str = THREE) -> tuple[str, list[str]]:
    outcome = run_agent("scripted", prompt, tools=TOOLS, requested_by="UREQ")
    assert outcome.status == "paused" and outcome.pause_id is not None
    return outcome.pause_id, list(store.records.load(conn, outcome.pause_id).turn)


def _resumes(conn: Any, lead: str) -> int:
    return len([e for e in store.audit.audit_trail(conn, lead) if e["event"] == "resume_started"])


def _click_turn(slack: Any, bot_url: str, action: str, lead: str, card_ts: str) -> int:
    payload = block_actions_payload(
        user_id="UALICE",
        action_id=action,
        value=lead,
        channel_id=CHANNEL,
        message_ts=card_ts,
        response_url=slack.new_response_url(),
    )
    return send_interaction(bot_url, SIGNING_SECRET, payload)[0]


def _approve_all_and_finish(services: Any, slack: Any, conn: Any, lead: str) -> None:
    """Approve all on the turn's card (answered 200), then wait for the run to complete."""
    card = card_of(slack, lead)
    assert _click_turn(slack, services.bot_url, APPROVE_ALL_ACTION, lead, card.ts) == 200
    wait_status(conn, lead, Status.COMPLETED)


def test_three_gated_calls_decided_on_one_card_in_mixed_ways(services, slack, env, conn):
    """Approve one, reject one, edit one on the one card: one resume, each tool at most once
    with the right arguments, the model told each result or cancellation in one more call,
    and the card redrawn after each decision with who decided what."""
    lead, turn = _pause(conn)
    assert len(turn) == 3 and turn[0] == lead
    first, email, second = (store.records.load(conn, i) for i in turn)
    assert [first.tool_name, email.tool_name, second.tool_name] == [
        "delete_path", "send_email", "delete_path",
    ]  # fmt: skip
    card = card_of(slack, lead)
    assert approve_values(card.blocks) == turn  # each call its own Approve, in call order
    assert "Approve all" in block_text(card) and "3 calls of one turn" in block_text(card)
    assert len(slack.calls("chat.postMessage")) == 1  # one card for the turn

    assert click(slack, services.bot_url, "approve", lead, "UALICE", card.ts)[0] == 200
    wait_status(conn, lead, Status.APPROVED)
    card_showing(slack, card.ts, "approved by <@UALICE>")
    started = time.monotonic()  # waiting on a later call waits for the whole turn
    assert wait(turn[2], timeout=1, follow=False).status == "paused"
    assert time.monotonic() - started >= 0.9
    assert submit_reject(services.bot_url, email.id, "not now", user="UBOB")[0] == 200
    wait_status(conn, email.id, Status.REJECTED)
    assert _resumes(conn, lead) == 0  # one call still waits: nothing resumed yet
    assert store.records.load(conn, lead).status is Status.APPROVED
    assert submit_edit(services.bot_url, second.id, {"path": "c"})[0] == 200

    done = wait_status(conn, lead, Status.COMPLETED)
    assert [r["arguments"]["path"] for r in tool_runs(env, "delete_path")] == ["a", "c"]
    assert tool_runs(env, "send_email") == []
    assert _resumes(conn, lead) == 1
    (_, resumed) = model_calls(env)  # the turn's call, then one after every decision
    seen = dict(tool_results_seen(resumed))
    assert seen["send_email"] == "Cancelled: rejected by ubob: not now"
    results = [output for name, output in tool_results_seen(resumed) if name == "delete_path"]
    assert results[0] == "deleted a" and "edited the arguments" in results[1]
    assert "deleted c" in results[1]
    assert "deleted c" in (done.result.text or "")
    final = card_showing(slack, card.ts, "Completed")
    text = block_text(final)
    assert "rejected by <@UBOB>" in text and "approved with edits by <@UALICE>" in text
    assert approve_values(final.blocks) == []
    result = block_text(reply_containing(slack, card.ts, "Final answer"))
    assert "1. `delete_path` returned: `deleted a`" in result
    assert "3. `delete_path` returned:" in result and "2. `send_email`" not in result
    assert len(slack.calls("chat.postMessage")) - len(slack.thread(CHANNEL, card.ts)) == 1
    assert [c.status for c in (store.records.load(conn, i) for i in turn)] == [Status.COMPLETED] * 3

    outcome = wait(lead, timeout=10)
    assert outcome.status == "completed"
    assert [c.pause_id for c in outcome.calls] == turn
    assert [(c.ran_with or {}).get("path") for c in outcome.calls] == ["a", None, "c"]
    assert [d.kind for d in outcome.decisions] == [
        DecisionKind.APPROVE, DecisionKind.REJECT, DecisionKind.EDIT,
    ]  # fmt: skip
    assert outcome.calls[2].output is not None and "deleted c" in outcome.calls[2].output


def test_approve_all_decides_every_waiting_call_and_resumes_once(services, slack, env, conn):
    """Approve all: each call approved on its own, the run resumes once, every tool runs
    once; a second click on it changes nothing."""
    lead, turn = _pause(conn)
    _approve_all_and_finish(services, slack, conn, lead)
    assert [r["arguments"]["path"] for r in tool_runs(env, "delete_path")] == ["a", "b"]
    assert len(tool_runs(env, "send_email")) == 1
    assert len(model_calls(env)) == 2
    assert [store.records.load(conn, i).decision.actor for i in turn] == ["UALICE"] * 3
    before = settled(lambda: (len(slack.calls()), _resumes(conn, lead)))
    assert before[1] == 1
    card = card_of(slack, lead)
    assert _click_turn(slack, services.bot_url, APPROVE_ALL_ACTION, lead, card.ts) == 200
    wait_until(
        lambda: [r for r in slack.responses() if "Nothing of this turn waits" in str(r)],
        10,
        "the answer to the second click",
    )
    assert _resumes(conn, lead) == 1 and len(tool_runs(env)) == 3


def test_reject_all_cancels_every_call_and_the_model_is_told(services, slack, env, conn):
    """Reject all: nothing runs; the model receives a cancellation for each call."""
    lead, _ = _pause(conn)
    card = card_of(slack, lead)
    assert _click_turn(slack, services.bot_url, REJECT_ALL_ACTION, lead, card.ts) == 200
    wait_status(conn, lead, Status.COMPLETED)
    assert tool_runs(env) == []
    (_, resumed) = model_calls(env)
    outputs = [output for _, output in tool_results_seen(resumed)]
    assert outputs == ["Cancelled: rejected by ualice"] * 3


def test_two_clicks_at_once_on_the_last_two_calls_resume_exactly_once(services, slack, env, conn):
    """The last two calls decided at the same instant by two people: one resume."""
    lead, turn = _pause(conn)
    card = card_of(slack, lead)
    assert click(slack, services.bot_url, "approve", lead, "UALICE", card.ts)[0] == 200
    wait_status(conn, lead, Status.APPROVED)
    statuses = at_once(
        lambda: click(slack, services.bot_url, "approve", turn[1], "UBOB", card.ts)[0],
        lambda: click(slack, services.bot_url, "approve", turn[2], "UCAROL", card.ts)[0],
    )
    assert statuses == [200, 200]
    wait_status(conn, lead, Status.COMPLETED)
    settled(lambda: _resumes(conn, lead))
    assert _resumes(conn, lead) == 1
    assert len(tool_runs(env)) == 3 and len(model_calls(env)) == 2
    settled_flags = [e for e in store.audit.audit_trail(conn, lead) if e["event"] == "turn_decided"]
    assert len(settled_flags) == 1


def test_an_ungated_call_of_the_turn_simply_runs(services, slack, env, conn):
    """One gated and one ungated call after it: one card for the one gated call (no turn),
    and the ungated call runs on resume, once."""
    prompt = script(
        calls(("delete_path", {"path": "a"}), ("list_files", {"path": "."})), say("ok {results}")
    )
    lead, turn = _pause(conn, prompt)
    assert turn == []  # one gated call: an ordinary card
    card = card_of(slack, lead)
    assert "Approve all" not in block_text(card)
    click(slack, services.bot_url, "approve", lead, "UALICE", card.ts)
    wait_status(conn, lead, Status.COMPLETED)
    assert [r["tool"] for r in tool_runs(env)] == ["delete_path", "list_files"]
    assert len(model_calls(env)) == 2


def test_an_ungated_call_between_gated_ones_runs_once_on_resume(services, slack, env, conn):
    """gated, ungated, gated: the two gated share a card; the ungated runs once, in order."""
    prompt = script(
        calls(
            ("delete_path", {"path": "a"}),
            ("list_files", {"path": "."}),
            ("delete_path", {"path": "b"}),
        ),
        say("ok {results}"),
    )
    lead, turn = _pause(conn, prompt)
    assert len(turn) == 2
    _approve_all_and_finish(services, slack, conn, lead)
    assert [r["tool"] for r in tool_runs(env)] == ["delete_path", "list_files", "delete_path"]


def test_an_expired_call_counts_as_decided_and_the_others_run(services, slack, env, conn):
    """A call of the turn that expires is refused by the expiry; the rest run as decided."""
    prompt = script(
        calls(("delete_path", {"path": "a"}), ("rotate_key", {"name": "k"})), say("ok {results}")
    )
    outcome = run_agent("scripted", prompt, tools=[*TOOLS, tools.rotate_key])
    lead = outcome.pause_id
    assert lead is not None
    turn = store.records.load(conn, lead).turn
    card = card_of(slack, lead)
    click(slack, services.bot_url, "approve", lead, "UALICE", card.ts)
    wait_status(conn, turn[1], Status.EXPIRED, timeout=20)
    wait_status(conn, lead, Status.COMPLETED)
    assert [r["tool"] for r in tool_runs(env)] == ["delete_path"]
    (_, resumed) = model_calls(env)
    assert dict(tool_results_seen(resumed))["rotate_key"].startswith("Cancelled: the approval")


@pytest.mark.parametrize("count", [23])
def test_a_turn_with_more_calls_than_a_card_holds(services, slack, env, conn, count):
    """The card lists the first calls and says how many more wait; every call stays
    decidable (the hidden ones from /agent-pending), and the card stays within 50 blocks."""
    prompt = script(calls(*[("delete_path", {"path": f"p{n}"}) for n in range(count)]), say("ok"))
    lead, turn = _pause(conn, prompt)
    assert len(turn) == count
    card = card_of(slack, lead)
    assert len(card.blocks) <= 50
    assert len(approve_values(card.blocks)) == 20
    assert "3 more calls of this turn not shown" in block_text(card)
    assert _click_turn(slack, services.bot_url, APPROVE_ALL_ACTION, lead, card.ts) == 200
    wait_status(conn, lead, Status.COMPLETED, timeout=40)
    assert len(tool_runs(env)) == count


def test_async_chains_share_one_card_too(services, slack, env, conn):
    """run_agent_async: the coroutine calls that paused together wait on one card."""
    import asyncio

    prompt = script(
        calls(("publish_post", {"slug": "a"}), ("publish_post", {"slug": "b"})),
        say("ok {results}"),
    )
    outcome = asyncio.run(
        run_agent_async("scripted", prompt, tools=[tools.publish_post], requested_by="UREQ")
    )
    assert outcome.pause_id is not None
    turn = store.records.load(conn, outcome.pause_id).turn
    assert len(turn) == 2
    card = card_of(slack, outcome.pause_id)
    assert _click_turn(slack, services.bot_url, APPROVE_ALL_ACTION, turn[0], card.ts) == 200
    wait_status(conn, turn[0], Status.COMPLETED)
    assert sorted(r["arguments"]["slug"] for r in tool_runs(env, "publish_post")) == ["a", "b"]
    assert len(model_calls(env)) == 2


@pytest.mark.service_env(APPROVERS="UALICE")
def test_a_turn_is_escalated_once_and_the_channel_decides_the_rest(
    services, slack, env, conn, monkeypatch
):
    """The lead decided, another call still waiting: that call speaks for the card, so the
    turn's card is escalated once, every call marked escalated, and a member of the
    escalation channel decides the waiting call there; the run then resumes once."""
    monkeypatch.setenv("APPROVALS_ESCALATE_AFTER", "3")
    monkeypatch.setenv("APPROVALS_ESCALATE_TO", "C0ESC")
    slack.channel_members["C0ESC"] = ["UDAVE"]
    prompt = script(
        calls(("delete_path", {"path": "a"}), ("delete_path", {"path": "b"})), say("ok")
    )
    lead, turn = _pause(conn, prompt)
    card = card_of(slack, lead)
    click(slack, services.bot_url, "approve", lead, "UALICE", card.ts)
    wait_status(conn, lead, Status.APPROVED)
    (escalated,) = wait_until(lambda: slack.messages("C0ESC"), 20, "the escalated card")
    assert approve_values(escalated.blocks) == [turn[1]]  # the turn's card, as it stands
    assert all(store.records.load(conn, i).escalated_at is not None for i in turn)
    click(slack, services.bot_url, "approve", turn[1], "UDAVE", escalated.ts)
    wait_status(conn, lead, Status.COMPLETED)
    assert store.records.load(conn, turn[1]).decision.actor == "UDAVE"
    assert settled(lambda: len(slack.messages("C0ESC"))) == 1
    assert _resumes(conn, lead) == 1 and len(tool_runs(env)) == 2


def test_a_call_whose_gate_stops_the_run_stops_the_whole_turn(services, slack, env, conn):
    """on_reject="stop" on one call: once the turn is settled, the run ends stopped, none of
    the turn runs, and the outcome says who stopped it and why."""
    prompt = script(
        calls(("delete_path", {"path": "a"}), ("drop_table", {"name": "users"})), say("ok")
    )
    outcome = run_agent("scripted", prompt, tools=[*TOOLS, tools.drop_table])
    lead = outcome.pause_id
    assert lead is not None
    turn = store.records.load(conn, lead).turn
    card = card_of(slack, lead)
    assert submit_reject(services.bot_url, turn[1], "not in production")[0] == 200
    wait_status(conn, turn[1], Status.REJECTED)
    assert _resumes(conn, lead) == 0
    click(slack, services.bot_url, "approve", lead, "UALICE", card.ts)
    ended = wait(lead, timeout=20)
    assert ended.status == "stopped" and ended.reason == "not in production"
    assert [c.pause_id for c in ended.calls] == list(turn)
    card_showing(slack, card.ts, "on_reject=stop")
    assert settled(lambda: _resumes(conn, lead)) == 0
    assert tool_runs(env) == [] and len(model_calls(env)) == 1


def test_a_call_a_rule_settles_is_left_off_the_card_and_decided_on_resume(
    services, slack, env, conn, tmp_path, monkeypatch
):
    """Between two calls that need a person, one a policy rule approves: the card lists the
    two, and the rule's call runs on resume, once, decided and audited by the rule."""
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(
        '[[rule]]\nid = "tmp-is-fine"\ntool = "delete_path"\n'
        'when = \'args.path.startsWith("/tmp/")\'\naction = "approve"\n'
    )
    monkeypatch.setenv("APPROVALS_POLICY", str(policy_file))
    ruled = {**env, "APPROVALS_POLICY": str(policy_file)}
    for process in services.workers:  # the resume reads the same rules
        process.stop()
    services.workers = [start_worker(ruled, tmp_path / "ruled.log", f"wr-{time.time_ns()}")]
    wait_for_workers(ruled, services.workers, 1)
    prompt = script(
        calls(
            ("delete_path", {"path": "/srv/a"}),
            ("delete_path", {"path": "/tmp/a"}),
            ("delete_path", {"path": "/srv/b"}),
        ),
        say("ok"),
    )
    lead, turn = _pause(conn, prompt)
    assert [store.records.load(conn, i).arguments["path"] for i in turn] == ["/srv/a", "/srv/b"]
    _approve_all_and_finish(services, slack, conn, lead)
    paths = [r["arguments"]["path"] for r in tool_runs(env, "delete_path")]
    assert paths == ["/srv/a", "/tmp/a", "/srv/b"]
    (auto,) = [a for a in store.pending.recent_decisions(conn, 50) if a.rule_id == "tmp-is-fine"]
    assert auto.arguments == {"path": "/tmp/a"} and auto.id not in turn
    assert len(model_calls(env)) == 2
