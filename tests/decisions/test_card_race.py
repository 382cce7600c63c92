"""A click decided before the worker has recorded the card it posted.

Slack shows a card a moment before ``chat.postMessage`` returns its ts to the worker; a click
in between is decided by the bot with no card to redraw or reply under. The decision must
still show on the card, once, and nothing may land in the channel itself.
"""

from __future__ import annotations

import subprocess

from approvals import run_agent, store
from approvals.models import Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.e2e import CHANNEL, block_text, card_showing, click, wait_status
from tests.processes import ROOT, approvals_command, bot_url, start_bot

COMPLETED = ":checkered_flag: Completed"


def test_a_decision_made_before_the_card_was_recorded_shows_once_in_its_thread(
    env, slack, conn, tmp_path
):
    prompt = script(calls(("delete_path", {"path": "early"})), say("done early"))
    pause_id = run_agent("scripted", prompt, tools=[delete_path]).pause_id
    assert pause_id and store.records.load(conn, pause_id).card_ts is None  # no worker: not posted
    bot = start_bot(env, tmp_path / "bot.log")
    try:
        status, _ = click(slack, bot_url(bot), "approve", pause_id)
        assert status == 200
        wait_status(conn, pause_id, Status.APPROVED)
        # The bot had no card to show it on, and posted nothing in the channel instead.
        assert slack.calls("chat.postMessage") == [] and slack.calls("chat.update") == []

        subprocess.run(  # a worker posts the card, then resumes the approval
            approvals_command("worker", "--burst"), env=env, cwd=ROOT, check=True, timeout=120
        )
    finally:
        bot.stop()

    approval = wait_status(conn, pause_id, Status.COMPLETED)
    assert approval.card_ts is not None
    assert [m.ts for m in slack.messages() if m.thread_ts is None] == [approval.card_ts]
    thread = [block_text(m) for m in slack.thread(CHANNEL, approval.card_ts)]
    assert sum("approved by" in text.lower() for text in thread) == 1, thread
    assert sum("done early" in text for text in thread) == 1, thread
    card_showing(slack, approval.card_ts, COMPLETED)
