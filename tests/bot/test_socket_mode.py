"""Socket Mode: requests come over Slack's WebSocket, unsigned, and Bolt dispatches them as
dicts. Admission then checks only the payload (there is no signature to check and no replay to
remember), and the acknowledged listeners still run their work after acknowledging."""

from __future__ import annotations

from slack_bolt import BoltRequest

from approvals import run_agent, store
from approvals.cards import APPROVE_ACTION
from approvals.config import Settings
from approvals.models import Status
from bot.app import create_bot
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.processes import wait_until
from tests.slack_requests import block_actions_payload


def _socket_mode_bot(env, conn):
    settings = Settings.from_env({**env, "SLACK_APP_TOKEN": "xapp-1-test"})
    return create_bot(settings, conn)


def _pause() -> str:
    prompt = script(calls(("delete_path", {"path": "build"})), say("done"))
    outcome = run_agent("scripted", prompt, tools=[delete_path])
    assert outcome.pause_id
    return outcome.pause_id


def _click(slack, pause_id: str, **changes) -> BoltRequest:
    payload = block_actions_payload(
        user_id="UALICE",
        action_id=APPROVE_ACTION,
        value=pause_id,
        response_url=slack.new_response_url(),
    )
    return BoltRequest(body={**payload, **changes}, mode="socket_mode")


def test_an_unsigned_socket_mode_click_is_acknowledged_and_decides(env, conn, slack):
    bot = _socket_mode_bot(env, conn)
    pause_id = _pause()
    response = bot.app.dispatch(_click(slack, pause_id))
    assert response.status == 200
    decided = wait_until(
        lambda: store.load(conn, pause_id).status is Status.APPROVED, 10, "the decision"
    )
    assert decided
    assert store.load(conn, pause_id).decision.actor == "UALICE"
    assert not list(conn.scan_iter(store.seen_key("*")))  # no signature to remember


def test_a_malformed_socket_mode_payload_gets_400_and_changes_nothing(env, conn, slack):
    bot = _socket_mode_bot(env, conn)
    pause_id = _pause()
    response = bot.app.dispatch(_click(slack, pause_id, response_url="javascript:alert(1)"))
    assert (response.status, response.body) == (400, '{"error": "malformed request"}')
    assert store.load(conn, pause_id).status is Status.PENDING
