"""How a resumed run shows on the card: "running" only when it takes a while, then its result,
published once even when Slack refuses the first attempt."""

from __future__ import annotations

from pathlib import Path

from approvals.calls.resume import RUNNING_AFTER
from tests.agents import tools
from tests.e2e import (
    CHANNEL,
    block_text,
    card_of,
    card_showing,
    click,
    pause,
    reply_containing,
    settled,
    tool_runs,
)
from tests.processes import wait_until

RUNNING = ":gear: Running"
COMPLETED = ":checkered_flag: Completed"


def _pause(tool: str, arguments: dict) -> str:
    return pause(tool, arguments, tools=[tools.charge_card, tools.delete_path])


def _card_updates(slack, card_ts: str) -> list[str]:
    return [
        str(c["args"].get("blocks"))
        for c in slack.calls("chat.update")
        if c["args"].get("ts") == card_ts and c["status"] == 200
    ]


def test_a_run_that_takes_a_while_shows_running_then_its_result(services, slack, env):
    """While the approved tool is still running after RUNNING_AFTER, the card says so."""
    pause_id = _pause("charge_card", {"amount": 7})
    card = card_of(slack, pause_id)
    hold = Path(env["HOLD_FILE"])
    hold.touch()
    click(slack, services.bot_url, "approve", pause_id, card_ts=card.ts)
    wait_until(lambda: tool_runs(env, "charge_card"), 20, "the tool to start")

    card_showing(slack, card.ts, RUNNING)
    # No result while the tool is still running.
    assert not [m for m in slack.thread(CHANNEL, card.ts) if "done:" in block_text(m)]
    hold.unlink()

    done = card_showing(slack, card.ts, COMPLETED)
    assert RUNNING not in block_text(done)
    reply_containing(slack, card.ts, "done:")
    assert len(tool_runs(env, "charge_card")) == 1


def test_a_quick_run_goes_straight_to_its_result(services, slack, env):
    """A run shorter than RUNNING_AFTER is never redrawn as running: one update, the result."""
    assert RUNNING_AFTER >= 0.5  # the scripted run below takes milliseconds
    pause_id = _pause("delete_path", {"path": "/tmp/x"})
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "approve", pause_id, card_ts=card.ts)

    reply_containing(slack, card.ts, "done:")
    card_showing(slack, card.ts, COMPLETED)
    updates = _card_updates(slack, card.ts)
    assert not [u for u in updates if RUNNING in u]
    assert [u for u in updates if COMPLETED in u]


def test_a_result_slack_refuses_is_published_later_and_once(services, slack, env):
    """Slack refuses the thread reply: the result still lands, once, through a retried job."""
    pause_id = _pause("delete_path", {"path": "/tmp/y"})
    card = card_of(slack, pause_id)
    slack.fail_next("chat.postMessage", count=1, error="fatal_error")
    click(slack, services.bot_url, "approve", pause_id, card_ts=card.ts)

    reply_containing(slack, card.ts, "done:")
    failed = [c for c in slack.calls("chat.postMessage") if c["error"] == "fatal_error"]
    assert len(failed) == 1
    replies = [m for m in slack.thread(CHANNEL, card.ts) if "done:" in block_text(m)]
    assert len(replies) == 1
    assert len(tool_runs(env, "delete_path")) == 1


def test_a_slow_redraw_of_the_decision_never_leaves_the_card_behind_its_result(
    services, slack, env, conn
):
    """The bot's "approved" redraw reaches Slack after the worker's "completed" one: the bot
    then sees the record moved on and draws it again, so the card ends on the result."""
    pause_id = _pause("delete_path", {"path": "x"})
    card = card_of(slack, pause_id)
    slack.delay_next("chat.update", 1.5)  # the bot's redraw of the decision: the first update
    click(slack, services.bot_url, "approve", pause_id, card_ts=card.ts)
    reply_containing(slack, card.ts, "done")
    wait_until(
        lambda: any(COMPLETED not in update for update in _card_updates(slack, card.ts)),
        10,
        "the slow redraw of the decision to land",
    )
    final = settled(lambda: _card_updates(slack, card.ts))
    assert COMPLETED in final[-1]
    assert COMPLETED in block_text(slack.message(CHANNEL, card.ts))
    assert len(tool_runs(env, "delete_path")) == 1
