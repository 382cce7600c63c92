"""``run_agent_async``: llm's async models and coroutine tools, through the same loop.

The scripted model is registered with an async twin; its ledger says which API played each
turn, so these tests see that the worker resumed on llm's async API, in its own process.
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from approvals import run_agent_async, store, wait
from approvals.models import DecisionKind, Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import (
    delete_path,
    drop_index,
    fetch_page,
    list_files,
    publish_post,
    refund_card,
    renew_cert,
)
from tests.conftest import wait_until
from tests.e2e import (
    SHORT_LEASE,
    approve_on_card,
    card_of,
    click,
    model_calls,
    submit_edit,
    submit_reject,
    tool_results_seen,
    tool_runs,
    wait_status,
)

TOOLS = [fetch_page, publish_post, list_files, delete_path]
PUBLISH = script(
    calls(("fetch_page", {"url": "https://example.com/draft"}), ("publish_post", {"slug": "q4"})),
    say("Done: {results}"),
)


def _pause(prompt: str = PUBLISH, tools=TOOLS, **kw):
    outcome = asyncio.run(run_agent_async("scripted", prompt, tools=tools, **kw))
    assert outcome.status == "paused" and outcome.pause_id
    return outcome


def test_an_async_run_pauses_without_running_the_gated_coroutine(env, conn):
    """The coroutine sibling ran (once, here); the gated one did not; one model call."""
    outcome = _pause()
    assert [r["tool"] for r in tool_runs(env)] == ["fetch_page"]
    assert [c["api"] for c in model_calls(env)] == ["async"]
    approval = store.records.load(conn, outcome.pause_id)
    assert approval.asynchronous and approval.tool_name == "publish_post"
    assert approval.arguments == {"slug": "q4"}
    assert [s.name for s in approval.siblings] == ["fetch_page"]


def test_approve_resumes_the_async_run_in_the_worker_on_the_async_api(services, slack, env, conn):
    outcome = _pause()
    card = card_of(slack, outcome.pause_id)
    status, _ = click(slack, services.bot_url, "approve", outcome.pause_id, card_ts=card.ts)
    assert status == 200

    done = wait_status(conn, outcome.pause_id, Status.COMPLETED)
    assert done.decision is not None and done.decision.kind is DecisionKind.APPROVE
    (published,) = tool_runs(env, "publish_post")
    assert published["pid"] != os.getpid()  # in the worker
    assert published["arguments"]["key"] == outcome.pause_id  # idempotency_key() in a coroutine
    assert len(tool_runs(env, "fetch_page")) == 1  # the finished sibling did not run again

    model = model_calls(env)
    assert [c["api"] for c in model] == ["async", "async"]  # exactly an uninterrupted run's
    assert model[1]["pid"] != os.getpid()
    seen = dict(tool_results_seen(model[1]))
    assert seen == {
        "fetch_page": "<html>https://example.com/draft</html>",
        "publish_post": "published q4",
    }
    assert done.result is not None and "published q4" in (done.result.text or "")


def test_reject_tells_the_async_model_and_runs_nothing(services, slack, env, conn):
    outcome = _pause()
    card_of(slack, outcome.pause_id)
    status, _ = submit_reject(services.bot_url, outcome.pause_id, "not before the launch")
    assert status == 200
    wait_status(conn, outcome.pause_id, Status.COMPLETED)
    assert tool_runs(env, "publish_post") == []
    seen = dict(tool_results_seen(model_calls(env)[-1]))
    assert seen["publish_post"].startswith("Cancelled: rejected by")
    assert "not before the launch" in seen["publish_post"]


def test_an_edit_runs_the_async_tool_with_the_edited_arguments(services, slack, env, conn):
    outcome = _pause()
    card_of(slack, outcome.pause_id)
    status, _ = submit_edit(services.bot_url, outcome.pause_id, {"slug": "q4-final"})
    assert status == 200
    wait_status(conn, outcome.pause_id, Status.COMPLETED)
    (published,) = tool_runs(env, "publish_post")
    assert published["arguments"]["slug"] == "q4-final"
    seen = dict(tool_results_seen(model_calls(env)[-1]))
    assert (
        "edited the arguments" in seen["publish_post"]
        and "published q4-final" in seen["publish_post"]
    )


def test_a_sync_gated_tool_in_an_async_chain_pauses_and_resumes_too(services, slack, env, conn):
    """Sync tools in an async chain: llm calls them inline; the gate works the same."""
    prompt = script(
        calls(("list_files", {"path": "build"}), ("delete_path", {"path": "build/app.o"})),
        calls(("publish_post", {"slug": "after"})),
        say("All: {results}"),
    )
    first = _pause(prompt)
    assert store.records.load(conn, first.pause_id).tool_name == "delete_path"
    approve_on_card(slack, services.bot_url, first.pause_id)
    # The resumed async run pauses again, on the coroutine tool, in the same run.
    second_id = wait_status(conn, first.pause_id, Status.PAUSED).result.next_approval_id
    second = store.records.load(conn, second_id)
    assert second.asynchronous and second.run_id == first.run_id
    approve_on_card(slack, services.bot_url, second_id)
    wait_status(conn, second_id, Status.COMPLETED)
    assert [r["tool"] for r in tool_runs(env)] == [
        "list_files",
        "delete_path",
        "publish_post",
    ]
    assert [c["api"] for c in model_calls(env)] == ["async"] * 3


def test_wait_true_returns_the_final_outcome_of_an_async_run(services, slack, env, conn):
    """``await run_agent_async(..., wait=True)``: the event loop stays free while it waits."""

    async def main() -> tuple[object, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        beat = asyncio.create_task(ticker())
        outcome = await run_agent_async("scripted", PUBLISH, tools=TOOLS, wait=True, timeout=60)
        beat.cancel()
        return outcome, ticks

    def approver() -> None:
        waiting = wait_until(lambda: store.pending.pending(conn) or None, 30, "a pause")
        approval_id = waiting[0].id
        card = card_of(slack, approval_id)
        click(slack, services.bot_url, "approve", approval_id, card_ts=card.ts)

    thread = threading.Thread(target=approver, daemon=True)
    thread.start()
    outcome, ticks = asyncio.run(main())
    thread.join(30)
    assert outcome.status == "completed" and "published q4" in outcome.text
    assert ticks > 0  # the loop ran other tasks during the wait


def test_an_async_resume_never_starts_a_tool_an_earlier_attempt_started(env, conn):
    """The at-most-once mark holds on llm's async API: a second attempt refuses to run it."""
    import pytest

    from approvals.calls import agent
    from approvals.config import Settings
    from approvals.decisions import review
    from approvals.errors import ToolAlreadyStarted

    settings = Settings.from_env()
    outcome = _pause()
    decided = review.decide(conn, settings, outcome.pause_id, DecisionKind.APPROVE, "UALICE")
    assert store.records.mark_tool_started(
        conn, outcome.pause_id
    )  # an attempt that died in the tool
    with pytest.raises(ToolAlreadyStarted):
        agent.resume(conn, settings, store.records.load(conn, decided.id))
    assert tool_runs(env, "publish_post") == []
    assert [c["api"] for c in model_calls(env)] == ["async"]  # and no model call either


# --- the guarantees, proven for async runs the way tests/test_faults.py and
# tests/calls/test_outcomes.py prove them for sync ones -----------------------------------------


@pytest.mark.service_env(**SHORT_LEASE)
def test_a_worker_killed_inside_a_gated_coroutine_never_runs_it_twice(
    services, slack, env, conn, tmp_path
):
    """SIGKILL mid-coroutine: not rerun by anyone, the card says interrupted, Retry runs it
    once more on llm's async API, with the same idempotency key."""
    from pathlib import Path

    from tests.e2e import action_blocks, card_showing, kill_worker, replace_worker
    from tests.test_faults import click_retry

    prompt = script(calls(("refund_card", {"amount": 7})), say("done: {results}"))
    outcome = _pause(prompt, tools=[refund_card])
    card = card_of(slack, outcome.pause_id)
    hold = Path(env["HOLD_FILE"])
    hold.touch()
    click(slack, services.bot_url, "approve", outcome.pause_id, card_ts=card.ts)
    (started,) = wait_until(lambda: tool_runs(env, "refund_card"), 20, "the coroutine to start")

    kill_worker(services, started["pid"])  # inside the coroutine
    hold.unlink()
    replace_worker(services, env, tmp_path / "worker2.log")

    interrupted = wait_status(conn, outcome.pause_id, Status.INTERRUPTED, timeout=60)
    assert interrupted.tool_started_at is not None and interrupted.tool_finished_at is None
    (retry_block,) = action_blocks(card_showing(slack, card.ts, "Interrupted"))
    assert [e["action_id"] for e in retry_block["elements"]] == ["approval_retry"]
    assert len(tool_runs(env, "refund_card")) == 1  # not run again by anyone
    assert tool_runs(env, "refund_card_done") == []

    assert click_retry(slack, services.bot_url, outcome.pause_id, card.ts)[0] == 200
    done = wait_status(conn, outcome.pause_id, Status.COMPLETED, timeout=30)
    assert done.result is not None and "refunded 7" in (done.result.text or "")
    starts = tool_runs(env, "refund_card")
    assert len(starts) == 2 and {r["arguments"]["key"] for r in starts} == {outcome.pause_id}
    assert [c["api"] for c in model_calls(env)] == ["async", "async"]


def test_a_click_and_the_cli_at_once_resume_an_async_run_once(services, slack, env, conn):
    """`approvals approve` and an Approve click at the same moment: one decision, one
    resume, the coroutine runs once."""
    from click.testing import CliRunner

    from approvals.cli.main import cli
    from tests.e2e import at_once

    outcome = _pause()
    card = card_of(slack, outcome.pause_id)
    cli_exit, _ = at_once(
        lambda: CliRunner().invoke(cli, ["approve", outcome.pause_id]).exit_code,
        lambda: click(slack, services.bot_url, "approve", outcome.pause_id, "UBOB", card.ts),
    )
    done = wait_status(conn, outcome.pause_id, Status.COMPLETED)
    decided = [
        e for e in store.audit.audit_trail(conn, outcome.pause_id) if e["event"] == "approved"
    ]
    assert len(decided) == 1 and done.decision.actor == decided[0]["actor"]
    assert cli_exit == (0 if done.decision.actor.startswith("cli:") else 1)
    assert len(tool_runs(env, "publish_post")) == 1
    assert [c["api"] for c in model_calls(env)] == ["async", "async"]


def test_an_async_approval_that_expires_tells_the_model_and_the_run_goes_on(
    services, slack, env, conn
):
    """Nobody decides: the expiry is the tool result the async model reads; it answers."""
    prompt = script(calls(("renew_cert", {"domain": "example.com"})), say("went on: {results}"))
    outcome = _pause(prompt, tools=[renew_cert])
    final = wait(outcome.pause_id, timeout=60)
    assert final.status == "completed" and "expired" in final.text
    assert [d.kind for d in final.decisions] == [DecisionKind.EXPIRE]
    assert tool_runs(env, "renew_cert") == []
    assert [c["api"] for c in model_calls(env)] == ["async", "async"]


def test_an_async_run_stopped_by_a_rejection_or_an_expiry_ends_there(services, slack, env, conn):
    """on_reject="stop" on a coroutine tool: a rejection ends the run (who, why), an expiry
    too (by the system); neither runs the tool nor asks the model again."""
    prompt = script(calls(("drop_index", {"name": "orders_idx"})), say("dropped"))
    rejected = _pause(prompt, tools=[drop_index])
    card_of(slack, rejected.pause_id)
    assert submit_reject(services.bot_url, rejected.pause_id, "the index is in use")[0] == 200
    stopped = wait(rejected.pause_id, timeout=60)
    assert stopped.status == "stopped" and stopped.reason == "the index is in use"
    assert stopped.stopped_by in ("UALICE", "ualice")

    expired = wait(_pause(prompt, tools=[drop_index]).pause_id, timeout=60)
    assert expired.status == "stopped" and expired.stopped_by == "system"
    assert "expired" in expired.reason
    assert tool_runs(env, "drop_index") == []
    assert [c["api"] for c in model_calls(env)] == ["async", "async"]  # the two first turns


def test_wait_follows_an_async_run_through_two_pauses_and_on_finish_is_called_once(
    services, slack, env, conn
):
    """Two pauses of one async run: wait() returns its final outcome, on_finish gets it once."""
    prompt = script(
        calls(("publish_post", {"slug": "one"})),
        calls(("publish_post", {"slug": "two"})),
        say("Both: {results}"),
    )
    first = _pause(prompt, on_finish="tests.agents.continuations:note_outcome")
    found: list = []
    waiter = threading.Thread(target=lambda: found.append(wait(first.pause_id, timeout=60)))
    waiter.start()
    approve_on_card(slack, services.bot_url, first.pause_id)
    second = wait_status(conn, first.pause_id, Status.PAUSED).result.next_approval_id
    assert waiter.is_alive()  # paused again: not the end
    approve_on_card(slack, services.bot_url, second)
    waiter.join(60)
    (outcome,) = found
    assert outcome.status == "completed" and outcome.run_id == first.run_id
    assert [c.ran_with for c in outcome.calls] == [{"slug": "one"}, {"slug": "two"}]
    assert [c.output for c in outcome.calls] == ["published one", "published two"]
    (call,) = wait_until(lambda: tool_runs(env, "on_finish"), 30, "the on_finish call")
    assert call["status"] == "completed" and call["key"] == first.run_id
    wait_until(lambda: store.runs.outcome_flag_set(conn, first.run_id), 10, "the call noted")
    assert len(tool_runs(env, "on_finish")) == 1
