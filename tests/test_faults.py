"""Faults injected for real: workers killed mid-tool, racing deciders, restarts."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from approvals import run_agent, store
from approvals.cli.main import cli
from approvals.decisions.recovery import STRANDED_AFTER
from approvals.errors import ApprovalsError
from approvals.models import Decision, DecisionKind, Status, decision_to_dict
from approvals.store import queue
from tests.agents import tools
from tests.agents.scripted import calls, say, script
from tests.conftest import CHANNEL
from tests.e2e import (
    SHORT_LEASE,
    action_blocks,
    at_once,
    block_text,
    card_of,
    card_showing,
    click,
    kill_worker,
    pause,
    replace_worker,
    reply_containing,
    tool_runs,
    wait_status,
)
from tests.processes import wait_until
from tests.slack_standin import Message


def _pause(tool: str, arguments: dict) -> str:
    return pause(tool, arguments, tools=[tools.charge_card, tools.delete_path])


def _approve_held_charge(services, slack, env) -> tuple[str, Message, Path, dict]:
    """A charge approved in Slack whose tool has started and waits while ``hold`` exists:
    (approval id, card, hold file, the tool's start with the work-horse's pid)."""
    pause_id = _pause("charge_card", {"amount": 42})
    card = card_of(slack, pause_id)
    hold = Path(env["HOLD_FILE"])
    hold.touch()
    click(slack, services.bot_url, "approve", pause_id, card_ts=card.ts)
    (started,) = wait_until(lambda: tool_runs(env, "charge_card"), 20, "the tool to start")
    return pause_id, card, hold, started


@pytest.mark.service_env(**SHORT_LEASE)
def test_a_worker_killed_inside_the_gated_tool_never_runs_it_twice(
    services, slack, env, conn, tmp_path
):
    """SIGKILL mid-tool: the tool is not rerun, the card says interrupted, Retry runs it."""
    pause_id, card, hold, started = _approve_held_charge(services, slack, env)

    kill_worker(services, started["pid"])  # inside the tool
    hold.unlink()
    replace_worker(services, env, tmp_path / "worker2.log")

    interrupted = wait_status(conn, pause_id, Status.INTERRUPTED, timeout=60)
    assert interrupted.tool_started_at is not None and interrupted.tool_finished_at is None
    shown = card_showing(slack, card.ts, "Interrupted")
    (retry_block,) = action_blocks(shown)
    assert [e["action_id"] for e in retry_block["elements"]] == ["approval_retry"]
    assert "may or may not have finished" in block_text(
        reply_containing(slack, card.ts, "worker stopped")
    )
    assert len(tool_runs(env, "charge_card")) == 1  # not run again by anyone
    assert tool_runs(env, "charge_card_done") == []

    status, _ = click_retry(slack, services.bot_url, pause_id, card.ts)
    assert status == 200
    done = wait_status(conn, pause_id, Status.COMPLETED, timeout=30)
    assert "charged 42" in done.result.tool_output
    starts = tool_runs(env, "charge_card")
    assert len(starts) == 2  # the second run is the person's Retry
    assert {r["arguments"]["key"] for r in starts} == {pause_id}  # one idempotency key
    events = [e["event"] for e in store.audit.audit_trail(conn, pause_id)]
    assert events.count("interrupted") == 1 and events.count("retried") == 1


def click_retry(slack, bot_url, approval_id, card_ts):
    from tests.conftest import CHANNEL, SIGNING_SECRET
    from tests.slack_requests import block_actions_payload, send_interaction

    payload = block_actions_payload(
        user_id="UALICE",
        action_id="approval_retry",
        value=approval_id,
        channel_id=CHANNEL,
        message_ts=card_ts,
        response_url=slack.new_response_url(),
    )
    return send_interaction(bot_url, SIGNING_SECRET, payload)


def test_a_work_horse_killed_after_the_run_ended_still_shows_the_result_once(
    services, slack, env, conn
):
    """The run's end is recorded, then the work-horse dies while Slack is slow to take the
    card's redraw: RQ runs the resume job again, which runs nothing again and shows the
    result, once, on the card and in its thread."""
    pause_id, card, hold, started = _approve_held_charge(services, slack, env)
    card_showing(slack, card.ts, "Running")  # the redraws before the result are done
    redraws = len(_card_updates(slack, card.ts))
    slack.delay_next("chat.update", 5)  # the result's redraw: the horse dies waiting on it
    hold.unlink()
    wait_status(conn, pause_id, Status.COMPLETED)
    # The end is recorded before the redraw is sent: kill only once Slack holds the redraw.
    wait_until(lambda: slack.delays_left("chat.update") == 0, 20, "the result's redraw")

    os.kill(started["pid"], signal.SIGKILL)  # the work-horse only: its worker lives on

    reply = reply_containing(slack, card.ts, "charged 42")
    card_showing(slack, card.ts, "Completed")
    # The dead horse's redraw, held by the slow Slack, lands too, beside the new attempt's.
    wait_until(lambda: len(_card_updates(slack, card.ts)) == redraws + 2, 20, "both redraws")
    results = [m for m in slack.thread(CHANNEL, card.ts) if "charged 42" in block_text(m)]
    assert [m.ts for m in results] == [reply.ts]
    assert "Completed" in block_text(slack.message(CHANNEL, card.ts))
    assert len(tool_runs(env, "charge_card")) == 1
    assert len(tool_runs(env, "charge_card_done")) == 1


def _card_updates(slack, card_ts: str) -> list[dict]:
    return [
        c
        for c in slack.calls("chat.update")
        if c["args"].get("ts") == card_ts and c["status"] == 200
    ]


def test_the_cli_and_slack_deciding_at_once_have_one_winner(services, slack, env, conn):
    """`approvals approve` and an Approve click at the same moment: exactly one decision."""
    for _ in range(5):
        pause_id = _pause("delete_path", {"path": "race"})
        card = card_of(slack, pause_id)
        cli_exit, _ = at_once(
            lambda pause_id=pause_id: CliRunner().invoke(cli, ["approve", pause_id]).exit_code,
            lambda pause_id=pause_id, ts=card.ts: click(
                slack, services.bot_url, "approve", pause_id, "UBOB", ts
            ),
        )
        done = wait_status(conn, pause_id, Status.COMPLETED)
        decided = [e for e in store.audit.audit_trail(conn, pause_id) if e["event"] == "approved"]
        assert len(decided) == 1
        assert done.decision.actor == decided[0]["actor"]
        assert cli_exit == (0 if done.decision.actor.startswith("cli:") else 1)
    assert len(tool_runs(env, "delete_path")) == 5


def test_a_click_racing_the_expiry_has_one_outcome(services, slack, env, conn):
    """Approve at the deadline, against the expiry: approved xor expired; the tool runs ≤ once."""
    from approvals.config import Settings
    from approvals.decisions.review import decide, expire

    settings = Settings.from_env()
    outcomes = []
    for _ in range(3):
        prompt = script(calls(("rotate_key", {"name": "k"})), say("done: {results}"))
        pause_id = run_agent("scripted", prompt, tools=[tools.rotate_key]).pause_id
        deadline = store.records.load(conn, pause_id).expires_at
        wait_until(lambda deadline=deadline: time.time() >= deadline, 10, "the deadline")
        decided, expired = at_once(
            lambda pause_id=pause_id: _try(
                lambda: decide(conn, settings, pause_id, DecisionKind.APPROVE, "UALICE")
            ),
            lambda pause_id=pause_id: expire(conn, settings, pause_id),
        )
        final = wait_status(conn, pause_id, Status.COMPLETED)
        assert decided is None or expired is None  # never both
        assert (decided is not None) == (final.decision.kind is DecisionKind.APPROVE)
        outcomes.append(final.decision.kind)
    assert len(tool_runs(env, "rotate_key")) == outcomes.count(DecisionKind.APPROVE)


def _try(action):
    try:
        return action()
    except ApprovalsError:
        return None


def test_a_decision_whose_decider_died_before_queuing_the_resume_still_resumes(
    services, slack, env, conn
):
    """The decision is recorded (as the bot's first step does) and nothing follows, as when
    the bot dies between the two: a worker carries out what follows once the decision is old
    enough (its audit entry, its resume), and the tool runs once."""
    pause_id = _pause("delete_path", {"path": "stranded"})
    card_of(slack, pause_id)
    approval = store.records.load(conn, pause_id)
    decision = Decision(DecisionKind.APPROVE, "UALICE", time.time(), arguments=approval.arguments)
    encoded = json.dumps(decision_to_dict(decision))
    assert (
        store.transitions.vote(conn, pause_id, Status.APPROVED, "UALICE", 1, encoded).outcome
        == "decided"
    )
    assert not queue.resume_queued(conn, pause_id)
    # Time passes: the decision is now older than a live decider would ever take.
    long_ago = time.time() - STRANDED_AFTER - 1
    conn.zadd(store.keys.DECIDED_KEY, {pause_id: long_ago}, xx=True)
    conn.zadd(store.keys.OWED_KEY, {pause_id: long_ago}, xx=True)

    wait_status(conn, pause_id, Status.COMPLETED, timeout=30)
    assert [r["arguments"]["path"] for r in tool_runs(env, "delete_path")] == ["stranded"]
    trail = store.audit.audit_trail(conn, pause_id)
    [approved] = [e for e in trail if e["event"] == "approved"]
    assert (approved["actor"], approved["finished_by"]) == ("UALICE", "recovery")
    assert [e["event"] for e in trail].count("resume_started") == 1
