"""The bot's HTTP surface: signatures, malformed input, /agent-pending, App Home, start-up."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

from approvals import run_agent, store
from approvals.models import Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.conftest import SIGNING_SECRET, approvals_command
from tests.e2e import (
    approve_values,
    card_of,
    click,
    pause,
    pending_command,
    redis_state,
    settled,
    wait_status,
)
from tests.slack_requests import (
    FORM,
    block_actions_payload,
    post_signed,
    send_event,
    send_interaction,
)


def _pause(agent: str = "cleanup-bot", path: str = "build") -> str:
    return pause("delete_path", {"path": path}, agent=agent)


def _snapshot(conn):
    """Every approvals key and value, except the replay guard's record of seen signatures."""
    return redis_state(conn, seen=False)


def test_bad_signature_stale_timestamp_and_tampered_body_get_401_and_change_nothing(
    services, slack, conn
):
    """Only correctly signed, fresh, untampered requests reach a listener."""
    pause_id = _pause()
    card_of(slack, pause_id)
    before = settled(lambda: _snapshot(conn))  # the worker records the card after Slack has it
    payload = json.dumps(
        block_actions_payload(user_id="U1", action_id="approval_approve", value=pause_id)
    )
    body = "payload=" + urllib.request.quote(payload)
    assert post_signed(services.bot_url, "wrong-secret", body, FORM)[0] == 401
    stale = int(time.time()) - 6 * 60
    assert post_signed(services.bot_url, SIGNING_SECRET, body, FORM, timestamp=stale)[0] == 401
    from tests.slack_requests import signature_headers

    headers = signature_headers(SIGNING_SECRET, body)
    tampered = body.replace("U1", "U2")
    assert post_signed(services.bot_url, "x", tampered, FORM, headers=headers)[0] == 401
    assert _snapshot(conn) == before
    assert store.records.load(conn, pause_id).status is Status.PENDING


def test_malformed_and_unknown_requests_get_a_4xx_and_the_bot_keeps_serving(services, slack, conn):
    """Garbage is answered, not fatal: the bot still decides the next real click."""
    pause_id = _pause()
    card = card_of(slack, pause_id)
    before = settled(lambda: _snapshot(conn))  # the worker records the card after Slack has it
    for body in ["payload=%7Bnot-json", "payload=", "", "a=b&c", "payload=" + "x" * 5000]:
        status, _ = post_signed(services.bot_url, SIGNING_SECRET, body, FORM)
        assert 400 <= status < 500, body[:30]
    unknown = block_actions_payload(user_id="U1", action_id="no_such_action", value=pause_id)
    assert send_interaction(services.bot_url, SIGNING_SECRET, unknown)[0] == 404
    assert _snapshot(conn) == before
    status, _ = click(slack, services.bot_url, "approve", "0000000000000000", card_ts=card.ts)
    assert status == 200
    unknown_reply = slack.wait_for(lambda: slack.responses())
    assert "does not exist" in unknown_reply[0]["text"]
    click(slack, services.bot_url, "approve", pause_id, card_ts=card.ts)
    wait_status(conn, pause_id, Status.COMPLETED)


def test_agent_pending_lists_waiting_approvals_newest_first_to_the_caller_only(
    services, slack, conn
):
    """/agent-pending answers ephemerally, newest first, each with working buttons."""
    status, _, _ = pending_command(slack, services.bot_url)
    assert status == 200
    empty = slack.wait_for(lambda: slack.responses())
    assert "Nothing is waiting" in json.dumps(empty[0]["blocks"])

    ids = [_pause(agent=f"agent-{i}", path=f"p{i}") for i in range(3)]
    slack.reset()
    status, _, _ = pending_command(slack, services.bot_url)
    answer = slack.wait_for(lambda: slack.responses())[0]
    assert answer["response_type"] == "ephemeral"
    listed = approve_values(answer["blocks"])
    assert listed == list(reversed(ids))
    assert "Showing 1 to 3" in json.dumps(answer["blocks"])

    click(slack, services.bot_url, "approve", ids[0])
    wait_status(conn, ids[0], Status.COMPLETED)
    slack.reset()
    pending_command(slack, services.bot_url)
    answer = slack.wait_for(lambda: slack.responses())[0]
    assert ids[0] not in json.dumps(answer["blocks"])
    assert "Showing 1 to 2" in json.dumps(answer["blocks"])


def test_app_home_shows_the_waiting_approvals_and_recent_decisions(services, slack, conn):
    """Opening the App Home publishes what the viewer may decide and the latest decisions."""
    decided, waiting = _pause(path="old"), _pause(path="new")
    click(slack, services.bot_url, "approve", decided)
    wait_status(conn, decided, Status.COMPLETED)
    event = {"type": "app_home_opened", "user": "UALICE", "tab": "home", "channel": "D1"}
    status, _ = send_event(services.bot_url, SIGNING_SECRET, event)
    assert status == 200
    published = slack.wait_for(lambda: [v for v in slack.views() if v["method"] == "views.publish"])
    assert published[0]["user_id"] == "UALICE"
    text = json.dumps(published[0]["view"])
    pending_part, recent_part = text.split("Recent decisions")
    assert waiting in pending_part and decided not in pending_part
    assert decided in recent_part and "UALICE" in recent_part


def test_an_agent_process_can_exit_while_its_approval_waits(services, slack, env, conn, tmp_path):
    """The agent runs in its own process, exits after the pause, and the worker finishes."""
    code = (
        "from approvals import run_agent\n"
        "from tests.agents.tools import list_files, delete_path\n"
        "from tests.agents.scripted import script, calls, say\n"
        "o = run_agent('scripted', script(calls(('delete_path', {'path': 'dist'})), say('bye')),"
        " tools=[list_files, delete_path], agent='exiting-bot')\n"
        "print(o.status, o.pause_id)\n"
    )
    import os
    import sys

    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env, "PYTHONPATH": "."},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    status, pause_id = done.stdout.split()
    assert status == "paused"
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "approve", pause_id, card_ts=card.ts)
    assert wait_status(conn, pause_id, Status.COMPLETED).result.text == "bye"


def test_bot_start_up_names_a_missing_setting(env, tmp_path):
    """Without SLACK_SIGNING_SECRET (HTTP mode) the bot stops at once with one clear line."""
    import os

    child = {**os.environ, **env, "SLACK_SIGNING_SECRET": ""}
    child.pop("SLACK_APP_TOKEN", None)
    done = subprocess.run(
        approvals_command("bot", "--port", "0"),
        env=child,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Error: missing required setting SLACK_SIGNING_SECRET: the signing secret from the "
        "Slack app's Basic Information page"
    ]


def test_a_click_is_answered_without_waiting_for_its_slack_calls(services, slack, env, conn):
    """Slack throttles card updates (429, Retry-After 1 s): the click's 200 still comes at
    once, and the decision and the card follow."""
    prompt = script(calls(("delete_path", {"path": "x"})), say("done"))
    pause_id = run_agent("scripted", prompt, tools=[delete_path]).pause_id
    card = card_of(slack, pause_id)
    slack.fail_next("chat.update", count=3, status=429, retry_after=1)

    status, _ = click(slack, services.bot_url, "approve", pause_id, card_ts=card.ts)

    # Had the answer waited for the card update, that update would have succeeded by now
    # (slack_sdk sleeps out each Retry-After before trying again).
    assert status == 200
    assert not [c for c in slack.calls("chat.update") if c["status"] == 200]
    done = wait_status(conn, pause_id, Status.COMPLETED)
    assert done.decision.actor == "UALICE"
    slack.wait_for(
        lambda: [c for c in slack.calls("chat.update") if c["status"] == 200], timeout=20
    )
