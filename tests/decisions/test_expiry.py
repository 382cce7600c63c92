"""Expiry that fails safe: on time across restarts, warned before, refused after."""

from __future__ import annotations

import time

import pytest

from approvals import store
from approvals.models import DecisionKind, Status
from tests.agents import tools
from tests.e2e import (
    block_text,
    card_of,
    card_showing,
    click,
    model_calls,
    pause,
    reply_containing,
    tool_results_seen,
    tool_runs,
    wait_status,
)
from tests.processes import bot_url, start_bot, start_worker, stop_all, wait_for_workers


def _pause(tool: str, arguments: dict | None = None) -> str:
    tools_ = [tools.rotate_key, tools.drop_table, tools.purge_cache]
    return pause(tool, arguments or {"name": "k1"}, tools=tools_, answer="after expiry: {results}")


def test_expiry_fires_on_time_after_bot_and_worker_restart(services, slack, env, conn, tmp_path):
    """The expiry lives in Redis: with every process restarted, it still fires and resumes."""
    pause_id = _pause("purge_cache", {"region": "eu"})
    approval = store.records.load(conn, pause_id)
    assert approval.expires_at == pytest.approx(approval.created_at + 15, abs=0.01)
    card = card_of(slack, pause_id)
    assert "Expires" in block_text(card)

    stop_all([services.bot, *services.workers])
    assert time.time() < approval.expires_at - 2, "the restart must happen before the deadline"
    restarted = dict(env)
    services.workers = [start_worker(restarted, tmp_path / "worker2.log", f"w2-{time.time_ns()}")]
    services.bot = start_bot(restarted, tmp_path / "bot2.log")
    services.bot_url = bot_url(services.bot)
    wait_for_workers(restarted, services.workers, 1)

    expired = wait_status(conn, pause_id, Status.EXPIRED, Status.RUNNING, Status.COMPLETED)
    assert expired.decision.kind is DecisionKind.EXPIRE
    assert expired.decision.at >= approval.expires_at - 0.05
    assert expired.decision.at - approval.expires_at < 5  # on time, within RQ's scheduling
    done = wait_status(conn, pause_id, Status.COMPLETED)
    assert tool_runs(env, "purge_cache") == []
    assert tool_results_seen(model_calls(env)[-1]) == [
        (
            "purge_cache",
            "Cancelled: the approval expired without a decision; the tool was not executed",
        )
    ]
    assert "after expiry" in done.result.text
    assert "expired" in block_text(card_showing(slack, card.ts, "Completed"))

    click(slack, services.bot_url, "approve", pause_id, card_ts=card.ts)
    late = slack.wait_for(lambda: slack.responses())[0]
    assert "expired before anyone decided" in late["text"]
    assert tool_runs(env, "purge_cache") == []


def test_a_warning_is_posted_in_the_thread_before_expiry(services, slack, env, conn, monkeypatch):
    """APPROVALS_WARN_BEFORE=0.5: halfway through the window the thread is warned, once."""
    monkeypatch.setenv("APPROVALS_WARN_BEFORE", "0.5")
    pause_id = _pause("rotate_key")
    card = card_of(slack, pause_id)
    warning = reply_containing(slack, card.ts, "Nobody has decided yet")
    approval = store.records.load(conn, pause_id)
    assert approval.status is Status.PENDING  # warned before, not at, the deadline
    assert f"<!date^{int(approval.expires_at)}^" in block_text(warning)
    wait_status(conn, pause_id, Status.COMPLETED, timeout=20)
    events = [e["event"] for e in store.audit.audit_trail(conn, pause_id)]
    assert events.count("expiry_warned") == 1
    assert events.index("expiry_warned") < events.index("expired")


def test_a_decision_before_the_deadline_wins_over_expiry(services, slack, env, conn):
    """Approved in time: the expiry job finds nothing to do and the tool ran once."""
    pause_id = _pause("rotate_key")
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "approve", pause_id, card_ts=card.ts)
    wait_status(conn, pause_id, Status.COMPLETED)
    deadline = store.records.load(conn, pause_id).expires_at
    from tests.processes import wait_until

    wait_until(lambda: time.time() > deadline + 2, 10, "the deadline to pass")
    assert store.records.load(conn, pause_id).status is Status.COMPLETED
    assert len(tool_runs(env, "rotate_key")) == 1
    assert not [e for e in store.audit.audit_trail(conn, pause_id) if e["event"] == "expired"]


def test_expiry_with_on_reject_stop_ends_the_run(services, slack, env, conn):
    """on_reject="stop": at expiry the run ends; no model call, the card says so."""
    pause_id = _pause("drop_table")
    card = card_of(slack, pause_id)
    wait_status(conn, pause_id, Status.EXPIRED, timeout=20)
    assert "stopped" in block_text(card_showing(slack, card.ts, "stopped"))
    assert len(model_calls(env)) == 1
    assert tool_runs(env, "drop_table") == []
    assert "Expired" in block_text(reply_containing(slack, card.ts, "Expired"))
