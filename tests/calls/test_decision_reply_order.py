"""A card's thread tells the story in order: who decided, then what the tool returned and the
agent's answer, however slowly Slack takes the decider's reply and whoever decided."""

from __future__ import annotations

from click.testing import CliRunner

from approvals.cli.main import cli
from approvals.models import Status
from tests.conftest import CHANNEL, wait_until
from tests.e2e import approve_on_card, block_text, card_of, pause, tool_runs, wait_status


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
