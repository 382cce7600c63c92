"""The whole loop, end to end: agent pauses → card → click → worker resumes → thread."""

from __future__ import annotations

import json
import os

from approvals import run_agent, store
from approvals.models import DecisionKind, Status
from approvals.slack.limits import SIBLING_PREVIEW
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, list_files, read_file
from tests.e2e import (
    action_blocks,
    block_text,
    card_of,
    card_showing,
    click,
    model_calls,
    reply_containing,
    tool_results_seen,
    tool_runs,
    wait_status,
)

CLEANUP = script(
    calls(("list_files", {"path": "build"}), ("delete_path", {"path": "build/app.o"})),
    say("Done. Results: {results}"),
)


def test_approve_runs_the_gated_tool_once_and_finishes_the_chain(services, slack, env, conn):
    """Approve: the tool runs once, in the worker, as proposed; the answer lands in the thread."""
    outcome = run_agent("scripted", CLEANUP, tools=[list_files, delete_path], agent="cleanup-bot")

    assert outcome.status == "paused" and outcome.pause_id
    assert [r["tool"] for r in tool_runs(env)] == ["list_files"]
    assert len(model_calls(env)) == 1

    card = card_of(slack, outcome.pause_id)
    text = block_text(card)
    assert "delete_path" in text and "build/app.o" in text and "cleanup-bot" in text
    assert "list_files" in text  # the sibling that already ran, in short
    assert len(action_blocks(card)) == 1

    status, _ = click(slack, services.bot_url, "approve", outcome.pause_id, card_ts=card.ts)
    assert status == 200

    approval = wait_status(conn, outcome.pause_id, Status.COMPLETED)
    assert approval.decision is not None and approval.decision.kind is DecisionKind.APPROVE
    assert approval.decision.actor == "UALICE"

    deletes = tool_runs(env, "delete_path")
    assert len(deletes) == 1
    assert deletes[0]["arguments"] == {"path": "build/app.o", "recursive": False}
    assert deletes[0]["pid"] != os.getpid()  # it ran in the worker, not in the agent
    assert len(tool_runs(env, "list_files")) == 1  # the sibling did not run again

    model = model_calls(env)
    assert len(model) == 2  # exactly the calls of an uninterrupted run
    seen = tool_results_seen(model[1])
    assert ("delete_path", "deleted build/app.o") in seen
    assert [name for name, _ in seen].count("list_files") == 1

    reply = reply_containing(slack, card.ts, "Results")
    assert "deleted build/app.o" in block_text(reply)
    updated = card_showing(slack, card.ts, "Completed")
    assert action_blocks(updated) == []
    assert "<@UALICE>" in block_text(updated)


def test_a_sibling_result_is_kept_whole_in_the_history_and_in_short_on_the_record(env, conn):
    """The card needs a preview of what already ran; the resume needs all of it."""
    path = "p" * 1000
    prompt = script(calls(("read_file", {"path": path}), ("delete_path", {"path": "x"})), say("ok"))
    outcome = run_agent("scripted", prompt, tools=[read_file, delete_path])

    approval = store.records.load(conn, outcome.pause_id)
    (sibling,) = approval.siblings
    assert sibling.output == f"contents of {path}"[: SIBLING_PREVIEW + 1]
    history = json.dumps(store.records.load_history(conn, outcome.pause_id))
    assert f"contents of {path}" in history
