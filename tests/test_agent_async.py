"""``run_agent_async``: llm's async models and coroutine tools, through the same loop.

The scripted model is registered with an async twin; its ledger says which API played each
turn, so these tests see that the worker resumed on llm's async API, in its own process.
"""

from __future__ import annotations

import asyncio
import os
import threading

from approvals import run_agent_async, store
from approvals.models import DecisionKind, Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, fetch_page, list_files, publish_post
from tests.conftest import wait_until
from tests.e2e import (
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


def _pause(prompt: str = PUBLISH, **kw):
    outcome = asyncio.run(run_agent_async("scripted", prompt, tools=TOOLS, **kw))
    assert outcome.status == "paused" and outcome.pause_id
    return outcome


def test_an_async_run_pauses_without_running_the_gated_coroutine(env, conn):
    """The coroutine sibling ran (once, here); the gated one did not; one model call."""
    outcome = _pause()
    assert [r["tool"] for r in tool_runs(env)] == ["fetch_page"]
    assert [c["api"] for c in model_calls(env)] == ["async"]
    approval = store.load(conn, outcome.pause_id)
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
    assert store.load(conn, first.pause_id).tool_name == "delete_path"
    click(
        slack,
        services.bot_url,
        "approve",
        first.pause_id,
        card_ts=card_of(slack, first.pause_id).ts,
    )
    # The resumed async run pauses again, on the coroutine tool, in the same run.
    second_id = wait_status(conn, first.pause_id, Status.PAUSED).result.next_approval_id
    second = store.load(conn, second_id)
    assert second.asynchronous and second.run_id == first.run_id
    click(slack, services.bot_url, "approve", second_id, card_ts=card_of(slack, second_id).ts)
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
        waiting = wait_until(lambda: store.pending(conn) or None, 30, "a pause")
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

    from approvals import agent, review
    from approvals.config import Settings
    from approvals.errors import ToolAlreadyStarted

    settings = Settings.from_env()
    outcome = _pause()
    decided = review.decide(conn, settings, outcome.pause_id, DecisionKind.APPROVE, "UALICE")
    assert store.mark_tool_started(conn, outcome.pause_id)  # an attempt that died in the tool
    with pytest.raises(ToolAlreadyStarted):
        agent.resume(conn, settings, store.load(conn, decided.id))
    assert tool_runs(env, "publish_post") == []
    assert [c["api"] for c in model_calls(env)] == ["async"]  # and no model call either
