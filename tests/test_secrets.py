"""Secrets stay out of Slack: masked on the card, the list, the modals and the thread."""

from __future__ import annotations

import json

from click.testing import CliRunner

from approvals import run_agent
from approvals.cli import cli
from approvals.models import Status
from tests.agents import tools
from tests.agents.scripted import calls, say, script
from tests.conftest import CHANNEL
from tests.e2e import card_of, click, pending_command, submit_edit, tool_runs, wait_status

PASSWORD, KEY = "hunter2-S3cret", "sk-live-0123456789"


def test_secret_arguments_are_masked_everywhere_people_look(services, slack, env, conn):
    """The card, /agent-pending, the Edit modal and the thread never show a secret value."""
    arguments = {"user": "ada", "new_password": PASSWORD, "api_key": KEY}
    prompt = script(calls(("set_password", arguments)), say("done"))
    pause_id = run_agent("scripted", prompt, tools=[tools.set_password]).pause_id
    card = card_of(slack, pause_id)
    shown_card = json.dumps(card.blocks, ensure_ascii=False)
    assert "ada" in shown_card and "••••" in shown_card

    pending_command(slack, services.bot_url)
    click(slack, services.bot_url, "edit", pause_id, card_ts=card.ts)
    modal = slack.wait_for(lambda: slack.views())[0]["view"]
    inputs = [b["block_id"] for b in modal["blocks"] if b["type"] == "input"]
    assert inputs == ["arg-user"]  # a secret cannot be edited: the modal would show it

    submit_edit(services.bot_url, pause_id, {"user": "grace"})
    done = wait_status(conn, pause_id, Status.COMPLETED)
    (run,) = tool_runs(env, "set_password")
    assert run["arguments"] == {"user": "grace", "new_password": PASSWORD, "api_key": KEY}
    assert done.result.executed_arguments["new_password"] == PASSWORD  # the record keeps it

    slack.wait_for(lambda: len(slack.thread(CHANNEL, card.ts)) >= 2)
    everything_slack_saw = json.dumps(slack.calls()) + json.dumps(slack.responses())
    assert PASSWORD not in everything_slack_saw and KEY not in everything_slack_saw

    shown = CliRunner().invoke(cli, ["show", pause_id])
    assert PASSWORD in shown.output  # operators, who hold Redis access, see the record
