"""Only Slack gets in, and only approvers decide: signatures, replays, forged button values."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import pytest

from approvals import store
from approvals.bot.app import REPLAY_WINDOW
from approvals.models import Status
from approvals.ops import retention
from approvals.slack.cards import APPROVE_ACTION
from tests.agents.tools import delete_path, restart_service
from tests.conftest import SIGNING_SECRET
from tests.e2e import (
    card_of,
    click,
    pause,
    redis_state,
    settled,
    submit_edit,
    submit_reject,
    submit_respond,
    tool_runs,
    wait_status,
)
from tests.processes import bot_url, start_bot, wait_until
from tests.slack_requests import FORM, block_actions_payload, post_signed, signature_headers


def _pause(tool: str, arguments: dict[str, str]) -> str:
    return pause(tool, arguments, tools=[delete_path, restart_service])


def _snapshot(conn):
    """Every approvals key, DUMPed (the seen signatures included)."""
    return redis_state(conn)


def _seen(conn):
    return conn.keys(store.keys.seen_key("*"))


def test_forged_stale_and_replayed_requests_get_401_on_every_replica_and_change_nothing(
    services, slack, env, conn, tmp_path
):
    """Bad signature, stale timestamp, tampered body and a replay (to either of two bot
    replicas sharing Redis) are refused; Slack's re-signed retry still gets in."""
    replica = start_bot(env, tmp_path / "bot-replica.log")
    try:
        replica_url = bot_url(replica)
        pause_id = _pause("delete_path", {"path": "build"})
        card = card_of(slack, pause_id)
        payload = block_actions_payload(
            user_id="UALICE",
            action_id=APPROVE_ACTION,
            value=pause_id,
            message_ts=card.ts,
            response_url=slack.new_response_url(),
        )
        body = urlencode({"payload": json.dumps(payload)})
        headers = signature_headers(SIGNING_SECRET, body)
        signature = headers["X-Slack-Signature"]

        # The worker may still release the card lock.
        before = settled(lambda: _snapshot(conn), interval=2 * retention.SWEEP_INTERVAL)
        stale = int(time.time()) - 5 * 60 - 10
        tampered = body.replace("UALICE", "UMALLORY")
        assert post_signed(services.bot_url, "wrong-secret", body, FORM)[0] == 401
        assert post_signed(services.bot_url, SIGNING_SECRET, body, FORM, timestamp=stale)[0] == 401
        # The genuine signature on a tampered body: refused, and not remembered, so it cannot
        # block the genuine request that follows.
        assert post_signed(replica_url, "x", tampered, FORM, headers=headers)[0] == 401
        assert _snapshot(conn) == before and _seen(conn) == []

        assert post_signed(services.bot_url, "x", body, FORM, headers=headers)[0] == 200
        wait_status(conn, pause_id, Status.COMPLETED)
        assert REPLAY_WINDOW - 10 <= conn.ttl(store.keys.seen_key(signature)) <= REPLAY_WINDOW
        # Settled for longer than a retention sweep takes to come round (it tidies the run's end).
        decided = settled(lambda: _snapshot(conn), interval=2 * retention.SWEEP_INTERVAL)
        answered, trail = len(slack.responses()), store.audit.audit_trail(conn, pause_id)

        for url in (services.bot_url, replica_url):
            status, text = post_signed(url, "x", body, FORM, headers=headers)
            assert (status, json.loads(text)) == (401, {"error": "replayed request"})
        time.sleep(0.5)  # a replay that got through would answer and audit by now
        assert _snapshot(conn) == decided
        assert len(slack.responses()) == answered
        assert store.audit.audit_trail(conn, pause_id) == trail
        assert len(tool_runs(env, "delete_path")) == 1

        # Slack retries with a new timestamp and a new signature: that is not a replay.
        retry_at = int(headers["X-Slack-Request-Timestamp"]) - 1
        assert post_signed(replica_url, SIGNING_SECRET, body, FORM, timestamp=retry_at)[0] == 200
        told = slack.wait_for(lambda: slack.responses()[answered:])
        assert "already approved" in told[0]["text"]
        assert len(tool_runs(env, "delete_path")) == 1
    finally:
        replica.stop()


@pytest.mark.service_env(APPROVERS="UALICE")
def test_a_forged_button_value_cannot_decide_an_approval_the_clicker_may_not(
    services, slack, env, conn
):
    """Alice may decide card A; clicks on A's card whose value names B (SOPS only), and modal
    submissions naming B, are refused privately, recorded in B's audit trail, and change B
    in nothing."""
    slack.usergroups = {"SOPS": ["UOPS"]}
    a = _pause("delete_path", {"path": "build"})
    b = _pause("restart_service", {"name": "db"})
    card_a, card_b = card_of(slack, a), card_of(slack, b)
    # The worker records the card's ts just after Slack answered: snapshot B once it has.
    wait_until(lambda: conn.hexists(store.keys.approval_key(b), "card_ts"), 10, "B's card ts saved")
    record_b = conn.hgetall(store.keys.approval_key(b))

    for action in ("approve", "reject", "edit", "respond"):
        status, _ = click(slack, services.bot_url, action, b, "UALICE", card_a.ts)
        assert status == 200
    refusals = slack.wait_for(lambda: len(slack.responses()) >= 4 and slack.responses())
    assert len(refusals) == 4
    for refusal in refusals:
        assert refusal["response_type"] == "ephemeral" and refusal["replace_original"] is False
        assert "not one of the approvers" in refusal["text"]
    assert slack.views() == []  # no modal opened for B

    assert submit_reject(services.bot_url, b, "forged", user="UALICE")[0] == 200
    assert submit_edit(services.bot_url, b, {"name": "web"}, user="UALICE")[0] == 200
    assert submit_respond(services.bot_url, b, "forged", user="UALICE")[0] == 200
    ephemerals = slack.wait_for(
        lambda: len(slack.ephemerals("UALICE")) >= 3 and slack.ephemerals("UALICE")
    )
    assert all("not one of the approvers" in e["text"] for e in ephemerals)

    assert conn.hgetall(store.keys.approval_key(b)) == record_b
    refused = [e for e in store.audit.audit_trail(conn, b) if e["event"] == "refused"]
    assert [e["actor"] for e in refused] == ["UALICE"] * 7
    assert all("not one of the approvers" in e["reason"] for e in refused)
    assert store.records.load(conn, a).status is Status.PENDING
    assert [e["event"] for e in store.audit.audit_trail(conn, a)].count("refused") == 0
    assert tool_runs(env) == []

    click(slack, services.bot_url, "approve", b, "UOPS", card_b.ts)
    assert wait_status(conn, b, Status.COMPLETED).decision.actor == "UOPS"
    click(slack, services.bot_url, "approve", a, "UALICE", card_a.ts)
    wait_status(conn, a, Status.COMPLETED)
    assert [r["tool"] for r in tool_runs(env)] == ["restart_service", "delete_path"]
