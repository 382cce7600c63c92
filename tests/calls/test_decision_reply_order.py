"""A card's thread tells the story in order: who decided, then what the tool returned and the
agent's answer, however slowly Slack takes the decider's reply and whoever decided."""

from __future__ import annotations

import time

from click.testing import CliRunner

from approvals import run_agent
from approvals.cli.main import cli
from approvals.models import Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, send_email
from tests.conftest import CHANNEL, wait_until
from tests.e2e import approve_on_card, block_text, card_of, pause, tool_runs, wait_status
from tests.processes import start_worker, wait_for_workers


def _thread_once_answered(slack, card_ts: str) -> list[str]:
    """The texts of the card's thread, once the agent's answer is in it."""

    def answered() -> list[str] | None:
        texts = [block_text(m) for m in slack.thread(CHANNEL, card_ts)]
        return texts if any("done: " in t for t in texts) else None

    return wait_until(answered, 30, "the agent's answer in the thread")


def _index(texts: list[str], fragment: str) -> int:
    (found,) = [i for i, text in enumerate(texts) if fragment in text]
    return found


def test_the_decision_reply_comes_first_when_slack_is_slow_to_take_it(services, slack, env, conn):
    """The bot's "Approved by" post takes Slack three seconds; the worker runs the tool in
    far less. The result still comes after the reply: it waited for it."""
    approval_id = pause()
    card = card_of(slack, approval_id)
    slack.delay_next("chat.postMessage", 3.0)  # the next post: the bot's "Approved by ..."
    approve_on_card(slack, services.bot_url, approval_id)
    wait_status(conn, approval_id, Status.COMPLETED)
    texts = _thread_once_answered(slack, card.ts)
    assert _index(texts, "Approved by") < _index(texts, "ran and returned")
    assert _index(texts, "Approved by") < _index(texts, "done: ")
    assert len(tool_runs(env, "delete_path")) == 1


def test_a_decision_made_outside_slack_is_replied_once_and_before_the_result(
    services, slack, env, conn
):
    """``approvals approve`` leaves the reply to a worker job that may run after the resume:
    the resume then posts the reply itself, first, and the job does not post it again."""
    approval_id = pause()
    card = card_of(slack, approval_id)
    assert CliRunner().invoke(cli, ["approve", approval_id]).exit_code == 0
    wait_status(conn, approval_id, Status.COMPLETED)
    texts = _thread_once_answered(slack, card.ts)
    assert _index(texts, "Approved by") < _index(texts, "done: ")
    assert len(tool_runs(env, "delete_path")) == 1


def test_the_card_of_the_next_pause_comes_after_the_decision_reply(
    services, slack, env, conn, tmp_path
):
    """The resumed run pauses again at once; a second worker posts the new card into the
    thread while the bot's "Approved by" is still on its way: the card waits for it."""
    services.workers.append(start_worker(env, tmp_path / "w2.log", f"w2-{time.time_ns()}"))
    wait_for_workers(env, services.workers, 2)
    prompt = script(
        calls(("delete_path", {"path": "a"})),
        calls(("send_email", {"to": "ops@example.com", "subject": "cleaned"})),
        say("done: {results}"),
    )
    first = run_agent("scripted", prompt, tools=[delete_path, send_email]).pause_id
    card = card_of(slack, first)
    slack.delay_next("chat.postMessage", 3.0)  # the next post: the bot's "Approved by ..."
    approve_on_card(slack, services.bot_url, first)
    second = wait_status(conn, first, Status.PAUSED).result.next_approval_id
    next_card = card_of(slack, second)
    thread = wait_until(
        lambda: (
            (t := slack.thread(CHANNEL, card.ts))
            and any("Approved by" in block_text(m) for m in t)
            and t
        ),
        30,
        "the decision's reply",
    )
    texts = [block_text(m) for m in thread]
    assert _index(texts, "Approved by") < [m.ts for m in thread].index(next_card.ts)
