"""Stale approvals end to end: a gate's ``fingerprint`` names the state a decision depends on;
the worker checks it again just before the tool runs, and never runs the tool on a changed one."""

from __future__ import annotations

import os
import time

import pytest

from approvals import gate, requires_approval, run_agent, store
from approvals.calls import fingerprints
from approvals.errors import GateError
from approvals.models import Status
from approvals.slack.cards import APPROVE_ALL_ACTION
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, list_files, migrate, purge
from tests.conftest import CHANNEL, SIGNING_SECRET, wait_until
from tests.e2e import (
    action_blocks,
    approve_on_card,
    block_text,
    card_of,
    card_showing,
    model_calls,
    reply_containing,
    tool_results_seen,
    tool_runs,
    wait_status,
)
from tests.slack_requests import block_actions_payload, send_interaction

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
    # The card's preview is the one computed again, on the state people now decide on.
    assert "ALTER TABLE users at head:42" in block_text(shown)
    assert "at head:41" not in block_text(shown)
    told = block_text(reply_containing(slack, card.ts, "changed since it was approved"))
    assert "`head:41`, now `head:42`" in told
    assert "Preview now, on the new state:" in told and "ALTER TABLE users at head:42" in told
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


def test_a_call_of_a_turn_whose_state_changed_is_cancelled_and_the_rest_of_the_turn_runs(
    services, slack, env, conn
):
    """Calls sharing one card are not asked about one by one: the one whose state changed is
    cancelled (the model is told), the other runs once."""
    _set_schema(env, "7")
    prompt = script(
        calls(("migrate", {"name": "users"}), ("delete_path", {"path": "build"})),
        say("Done: {results}"),
    )
    outcome = run_agent("scripted", prompt, tools=[migrate, delete_path])
    lead = outcome.pause_id
    assert lead is not None and len(store.records.load(conn, lead).turn) == 2
    card = card_of(slack, lead)
    _set_schema(env, "8")
    payload = block_actions_payload(
        user_id="UALICE", action_id=APPROVE_ALL_ACTION, value=lead, channel_id=CHANNEL,
        message_ts=card.ts, response_url=slack.new_response_url(),
    )  # fmt: skip
    assert send_interaction(services.bot_url, SIGNING_SECRET, payload)[0] == 200
    wait_status(conn, lead, Status.COMPLETED)
    assert tool_runs(env, "migrate") == []
    assert [r["arguments"]["path"] for r in tool_runs(env, "delete_path")] == ["build"]
    seen = dict(tool_results_seen(model_calls(env)[-1]))
    assert seen["migrate"] == "Cancelled: the state changed after approval"
    assert seen["delete_path"] == "deleted build"
    assert "stale_cancelled" in [e["event"] for e in _events(conn, lead)]


# --- the fingerprint itself, computed as the gate and the worker compute it -------------------


def slow_state(name: str) -> str:
    """A fingerprint that hangs (a database that does not answer)."""
    time.sleep(2)
    return name


def odd_state(name: str) -> object:
    """A fingerprint that names nothing a person could compare."""
    return {"name": name} if name == "dict" else name * 300


@pytest.mark.parametrize(
    ("path", "name", "says"),
    [
        ("tests.calls.test_stale:slow_state", "x", "did not answer within 0.2 s"),
        ("tests.calls.test_stale:odd_state", "dict", "must return a non-empty string"),
        ("tests.calls.test_stale:odd_state", "xy", "returned 600 characters; at most 200"),
        ("tests.calls.test_stale:missing", "x", "cannot import fingerprint"),
        ("tests.calls.test_stale:time", "x", "leads through module time"),
        ("os:getcwd", "x", "not in APPROVALS_TOOL_MODULES"),
    ],
)
def test_a_fingerprint_that_cannot_name_the_state_is_a_clear_gate_error(path, name, says):
    """Hung, malformed, too long, missing, or outside the allowed modules: refused, saying why."""
    with pytest.raises(GateError, match=says):
        fingerprints.compute(path, {"name": name}, ("tests",), timeout=0.2)
