"""Stale approvals end to end: a gate's ``fingerprint`` names the state a decision depends on;
the worker checks it again just before the tool runs, and never runs the tool on a changed one."""

from __future__ import annotations

import os

import pytest

from approvals import gate, requires_approval, run_agent, store
from approvals.errors import GateError
from approvals.models import Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import list_files, migrate, purge
from tests.conftest import wait_until
from tests.e2e import (
    action_blocks,
    approve_on_card,
    card_of,
    card_showing,
    model_calls,
    tool_results_seen,
    tool_runs,
    wait_status,
)

MIGRATE = script(calls(("migrate", {"name": "users"})), say("Finished: {results}"))
NOTICE = "Changed since it was approved"


def _set_schema(env: dict[str, str], head: str) -> None:
    with open(env["TOOL_LEDGER"] + ".schema", "w", encoding="utf-8") as f:
        f.write(head)


def _pause(prompt: str = MIGRATE) -> str:
    outcome = run_agent("scripted", prompt, tools=[list_files, migrate, purge])
    assert outcome.status == "paused" and outcome.pause_id
    return outcome.pause_id


def _stale_again(conn, approval_id: str, times: int):
    """The approval once it waits again after its ``times``-th stale check."""

    def back() -> object:
        approval = store.records.load(conn, approval_id)
        return approval if approval.status is Status.PENDING and approval.stale == times else None

    return wait_until(back, 30, f"approval {approval_id} to wait again ({times})")


def _events(conn, approval_id: str) -> list[dict[str, str]]:
    return store.audit.audit_trail(conn, approval_id)


def test_a_state_changed_after_approval_is_asked_again_and_runs_once_on_the_new_state(
    services, slack, env, conn
):
    """The schema moves between the approval and the run: the tool does not run, the card asks
    again with the notice and its buttons, the audit says ``stale``; the second approval (on
    the new state) runs it exactly once."""
    _set_schema(env, "41")
    pause_id = _pause()
    assert store.records.load(conn, pause_id).fingerprint == "head:41"
    card = card_of(slack, pause_id)

    _set_schema(env, "42")  # another migration landed while the card waited
    approve_on_card(slack, services.bot_url, pause_id)
    waiting = _stale_again(conn, pause_id, 1)

    assert tool_runs(env, "migrate") == []
    assert waiting.decision is None and waiting.receipt is None and not waiting.votes
    assert waiting.fingerprint == "head:42"  # the state people now decide on
    stale = [e for e in _events(conn, pause_id) if e["event"] == "stale"]
    assert len(stale) == 1
    assert stale[0]["approved"] == "head:41" and stale[0]["found"] == "head:42"
    shown = card_showing(slack, card.ts, NOTICE)
    assert action_blocks(shown), "the card offers its buttons again"
    assert pause_id in [a.id for a in store.pending.pending(conn)]  # listed as waiting again

    approve_on_card(slack, services.bot_url, pause_id)
    done = wait_status(conn, pause_id, Status.COMPLETED)
    assert [r["arguments"] for r in tool_runs(env, "migrate")] == [{"name": "users"}]
    assert done.result is not None and done.result.tool_output == "migrated users"


@pytest.mark.service_env(APPROVALS_STALE_RETRIES="1")
def test_once_the_retries_are_spent_the_model_is_told_and_replans(services, slack, env, conn):
    """Asked again ``APPROVALS_STALE_RETRIES`` times, and the state moved each time: the tool
    never runs, and the model receives ``Cancelled: the state changed after approval``."""
    _set_schema(env, "1")
    pause_id = _pause()
    _set_schema(env, "2")
    approve_on_card(slack, services.bot_url, pause_id)
    _stale_again(conn, pause_id, 1)

    _set_schema(env, "3")
    approve_on_card(slack, services.bot_url, pause_id)
    done = wait_status(conn, pause_id, Status.COMPLETED)

    assert tool_runs(env, "migrate") == []
    seen = tool_results_seen(model_calls(env)[-1])
    assert seen == [("migrate", "Cancelled: the state changed after approval")]
    assert done.result is not None and done.result.text is not None
    assert "Cancelled: the state changed after approval" in done.result.text
    stale = [e["event"] for e in _events(conn, pause_id) if e["event"].startswith("stale")]
    assert stale == ["stale", "stale_cancelled"]


def test_a_fingerprint_that_cannot_be_computed_pauses_nothing(env, conn):
    """At the pause, a fingerprint that raises is a clear GateError: no approval, no card job,
    nothing a worker could later run on a state nobody could name."""
    prompt = script(calls(("purge", {"name": "sessions"})), say("done"))
    with pytest.raises(GateError, match="unreachable_state failed: ConnectionError: cannot reach"):
        run_agent("scripted", prompt, tools=[purge])
    assert store.pending.pending_count(conn) == 0
    assert tool_runs(env) == []
    assert not [k for k in conn.keys("approvals:approval:*")]


def test_a_fingerprint_a_worker_could_not_import_is_refused_before_the_model_runs(env):
    """A fingerprint outside APPROVALS_TOOL_MODULES is refused before the first model call."""
    gated = gate(list_files, fingerprint=os.getcwd)
    prompt = script(calls(("list_files", {"path": "."})), say("done"))
    with pytest.raises(GateError, match="not in APPROVALS_TOOL_MODULES"):
        run_agent("scripted", prompt, tools=[gated])
    assert model_calls(env) == []


def test_a_lambda_is_refused_where_the_gate_is_made():
    """A worker imports the fingerprint again: a lambda is refused at decoration."""
    with pytest.raises(TypeError, match="module-level function"):
        requires_approval(fingerprint=lambda path: path)
