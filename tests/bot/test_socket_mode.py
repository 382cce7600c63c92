"""Socket Mode end to end: ``approvals bot`` with ``SLACK_APP_TOKEN`` set opens the stand-in's
WebSocket through slack_sdk's own ``SocketModeHandler`` (``apps.connections.open`` on
``SLACK_API_URL``), and every request arrives as Slack's envelope, acknowledged by its id.
The scenarios are HTTP mode's: approve, the click race, ``/agent-pending``, App Home, and a
server-side refresh of the connection in the middle of it all."""

from __future__ import annotations

import json
import signal
from typing import Any

from approvals import run_agent, store
from approvals.bot.modals import EDIT_VIEW, VALUE_ACTION
from approvals.models import DecisionKind, Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, list_files
from tests.bot.conftest import SocketServices
from tests.conftest import CHANNEL, wait_until
from tests.e2e import (
    ACTIONS,
    action_blocks,
    approve_values,
    at_once,
    block_text,
    card_of,
    card_showing,
    model_calls,
    pause,
    reply_containing,
    select,
    tool_runs,
    wait_status,
)
from tests.slack_requests import (
    block_actions_payload,
    event_callback_payload,
    slash_command_form,
    view_submission_payload,
)
from tests.slack_standin import SlackStandIn

CLEANUP = script(
    calls(("list_files", {"path": "build"}), ("delete_path", {"path": "build/app.o"})),
    say("Done. Results: {results}"),
)


def _pause(agent: str = "cleanup-bot", path: str = "build/app.o") -> str:
    return pause("delete_path", {"path": path}, agent=agent)


def _click(
    slack: SlackStandIn, action: str, approval_id: str, user: str = "UALICE", card_ts: str = ""
) -> dict[str, Any]:
    """A button press on the card, delivered over the WebSocket; the ack's payload."""
    payload = block_actions_payload(
        user_id=user,
        action_id=ACTIONS[action],
        value=approval_id,
        channel_id=CHANNEL,
        message_ts=card_ts or None,
        response_url=slack.new_response_url(),
    )
    return slack.deliver("interactive", payload)


def _pending(slack: SlackStandIn, user: str = "UALICE") -> dict[str, Any]:
    """``/agent-pending`` over the WebSocket; its answer, which comes by the response URL."""
    url = slack.new_response_url()
    form = slash_command_form(user_id=user, channel_id=CHANNEL, response_url=url)
    assert slack.deliver("slash_commands", form) == {}
    return slack.wait_for(lambda: [r for r in slack.responses() if r["response_url"] == url])[0]


def test_the_bot_opens_the_websocket_with_its_app_token_on_slack_api_url(
    socket_services: SocketServices, slack: SlackStandIn
):
    """The bot asks SLACK_API_URL for a connection with the app-level token and is greeted
    (having checked both tokens first, as `approvals doctor` does: a second call of each)."""
    opens = slack.calls("apps.connections.open")
    assert [call["error"] for call in opens] == [None, None]
    assert slack.socket_mode.connections == 1
    assert [call["error"] for call in slack.calls("auth.test")] == [None, None]  # the bot token


def test_approve_runs_the_gated_tool_once_and_shows_completed(
    socket_services: SocketServices, slack: SlackStandIn, env: dict[str, str], conn
):
    """Approve over the socket: acked at once, the tool runs once, the card and thread show it."""
    outcome = run_agent("scripted", CLEANUP, tools=[list_files, delete_path], agent="cleanup-bot")
    assert outcome.pause_id
    card = card_of(slack, outcome.pause_id)

    assert _click(slack, "approve", outcome.pause_id, card_ts=card.ts) == {}

    approval = wait_status(conn, outcome.pause_id, Status.COMPLETED)
    assert approval.decision is not None and approval.decision.kind is DecisionKind.APPROVE
    assert approval.decision.actor == "UALICE"
    deletes = tool_runs(env, "delete_path")
    assert [d["arguments"] for d in deletes] == [{"path": "build/app.o", "recursive": False}]
    assert len(model_calls(env)) == 2
    assert "deleted build/app.o" in block_text(reply_containing(slack, card.ts, "Results"))
    updated = card_showing(slack, card.ts, "Completed")
    assert action_blocks(updated) == [] and "<@UALICE>" in block_text(updated)
    (delivery,) = slack.socket_mode.deliveries()
    assert delivery["envelope"]["accepts_response_payload"] is False
    assert delivery["ack"] == {"envelope_id": delivery["envelope"]["envelope_id"]}


def test_two_approvers_clicking_at_once_have_one_winner(
    socket_services: SocketServices, slack: SlackStandIn, env: dict[str, str], conn
):
    """Two clicks at once: both acked, one decides, the other is told privately, one run."""
    pause_id = _pause()
    card = card_of(slack, pause_id)
    acks = at_once(
        lambda: _click(slack, "approve", pause_id, "UALICE", card.ts),
        lambda: _click(slack, "approve", pause_id, "UBOB", card.ts),
    )
    assert acks == [{}, {}]
    approval = wait_status(conn, pause_id, Status.COMPLETED)
    winner = approval.decision.actor
    loser = {"UALICE", "UBOB"} - {winner}
    refusals = slack.wait_for(lambda: [r for r in slack.responses() if "already" in r["text"]])
    assert len(refusals) == 1 and loser
    assert refusals[0]["response_type"] == "ephemeral" and f"<@{winner}>" in refusals[0]["text"]
    assert len(tool_runs(env, "delete_path")) == 1
    events = [e["event"] for e in store.audit.audit_trail(conn, pause_id)]
    assert events.count("approved") == 1 and events.count("resume_started") == 1


def test_agent_pending_answers_the_caller_through_the_response_url(
    socket_services: SocketServices, slack: SlackStandIn, conn
):
    """/agent-pending over the socket lists what waits, newest first, with buttons that work."""
    ids = [_pause(agent=f"agent-{i}", path=f"p{i}") for i in range(3)]
    answer = _pending(slack)
    assert answer["response_type"] == "ephemeral"
    assert approve_values(answer["blocks"]) == list(reversed(ids))

    assert _click(slack, "approve", ids[0]) == {}
    wait_status(conn, ids[0], Status.COMPLETED)
    assert approve_values(_pending(slack)["blocks"]) == list(reversed(ids[1:]))
    kinds = [
        (d["envelope"]["type"], d["envelope"]["accepts_response_payload"])
        for d in slack.socket_mode.deliveries()
    ]
    assert kinds == [("slash_commands", True), ("interactive", False), ("slash_commands", True)]


def test_opening_app_home_publishes_what_waits_and_what_was_decided(
    socket_services: SocketServices, slack: SlackStandIn, conn
):
    """An app_home_opened event over the socket makes the bot publish the viewer's Home tab."""
    decided, waiting = _pause(path="old"), _pause(path="new")
    _click(slack, "approve", decided)
    wait_status(conn, decided, Status.COMPLETED)
    event = {"type": "app_home_opened", "user": "UALICE", "tab": "home", "channel": "DALICE"}
    assert slack.deliver("events_api", event_callback_payload(event)) == {}
    published = slack.wait_for(lambda: [v for v in slack.views() if v["method"] == "views.publish"])
    assert published[0]["user_id"] == "UALICE"
    pending_part, recent_part = json.dumps(published[0]["view"]).split("Recent decisions")
    assert waiting in pending_part and decided not in pending_part
    assert decided in recent_part


def test_an_invalid_edit_comes_back_in_the_ack_and_changes_nothing(
    socket_services: SocketServices, slack: SlackStandIn, conn
):
    """A view submission's errors travel back in the envelope's acknowledgement."""
    pause_id = _pause()
    card_of(slack, pause_id)
    # The worker records the card's ts just after Slack answered its post.
    wait_until(lambda: store.records.load(conn, pause_id).card_ts, 10, "the card's ts recorded")
    before = conn.hgetall(store.keys.approval_key(pause_id))
    state = {
        "arg-path": {VALUE_ACTION: {"type": "plain_text_input", "value": "x"}},
        "arg-recursive": {VALUE_ACTION: select('"maybe"')},
    }
    payload = view_submission_payload(
        user_id="UALICE", callback_id=EDIT_VIEW, private_metadata=pause_id, values=state
    )
    answer = slack.deliver("interactive", payload)
    assert answer["response_action"] == "errors" and "arg-recursive" in answer["errors"]
    assert slack.socket_mode.deliveries()[-1]["envelope"]["accepts_response_payload"] is True
    assert conn.hgetall(store.keys.approval_key(pause_id)) == before


def test_after_slack_refreshes_the_connection_the_bot_reconnects_and_still_decides(
    socket_services: SocketServices, slack: SlackStandIn, env: dict[str, str], conn
):
    """On Slack's "disconnect" the bot opens a new connection, drops the old, and decides."""
    pause_id = _pause()
    card = card_of(slack, pause_id)
    assert slack.socket_mode.disconnect("refresh_requested") == 1
    slack.socket_mode.wait_for_connections(socket_services.connections_before + 2)
    slack.socket_mode.wait_for_closed(open_at_most=1)
    assert len(slack.calls("apps.connections.open")) == 3  # the start's check, two connections

    assert _click(slack, "approve", pause_id, card_ts=card.ts) == {}
    wait_status(conn, pause_id, Status.COMPLETED)
    assert len(tool_runs(env, "delete_path")) == 1
    card_showing(slack, card.ts, "Completed")


def test_sigterm_closes_the_socket_then_finishes_the_work_a_click_started(
    socket_services: SocketServices, slack: SlackStandIn, env: dict[str, str], conn
):
    """Told to stop while an acknowledged click's work waits on a slow Slack, the bot exits
    cleanly only once that work is done: the card shows the decision."""
    pause_id = _pause()
    card = card_of(slack, pause_id)
    updates_before = len(slack.calls("chat.update"))
    slack.delay_next("chat.update", 2.0)
    assert _click(slack, "approve", pause_id, card_ts=card.ts) == {}
    socket_services.bot.popen.send_signal(signal.SIGTERM)
    assert socket_services.bot.popen.wait(30) == 0
    updates = slack.calls("chat.update")[updates_before:]
    assert updates and updates[0]["args"]["ts"] == card.ts
    assert "UALICE" in json.dumps(updates[0]["args"])
    wait_status(conn, pause_id, Status.COMPLETED)
    assert len(tool_runs(env, "delete_path")) == 1
