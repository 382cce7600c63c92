"""``log=True`` / ``APPROVALS_LLM_LOG``: the run is one conversation in llm's log database.

The agent writes the turns up to the pause, the worker the turns after the decision; both
read the same ``LLM_USER_PATH`` here, and the tests read the log back with llm's own
``llm logs`` command, as a person would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from approvals import run_agent
from approvals.models import Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, list_files, send_email
from tests.e2e import card_of, click, submit_reject, wait_status

CLEANUP = script(
    calls(("list_files", {"path": "build"}), ("delete_path", {"path": "build/app.o"})),
    say("Cleaned: {results}"),
)


def llm_logs(env: dict[str, str], *args: str) -> list[dict]:
    """``llm logs ... --json`` in the tests' llm user dir."""
    llm = Path(sys.executable).with_name("llm")
    done = subprocess.run(
        [str(llm), "logs", *args, "--json", "-n", "0"],
        env={**os.environ, "LLM_USER_PATH": env["LLM_USER_PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def _tool_results(row: dict) -> dict[str, str]:
    return {r["name"]: r["output"] for r in row.get("tool_results") or []}


def test_an_approved_run_is_one_conversation_from_the_pause_to_the_answer(
    services, slack, env, conn
):
    outcome = run_agent("scripted", CLEANUP, tools=[list_files, delete_path], log=True)
    assert outcome.status == "paused"
    # The agent logged the turn that asked for the gated call, under the run's id.
    (asked,) = llm_logs(env, "--cid", outcome.run_id)
    assert asked["conversation_id"] == outcome.run_id
    assert [c["name"] for c in asked["tool_calls"]] == ["list_files", "delete_path"]

    card = card_of(slack, outcome.pause_id)
    assert click(slack, services.bot_url, "approve", outcome.pause_id, card_ts=card.ts)[0] == 200
    wait_status(conn, outcome.pause_id, Status.COMPLETED)

    rows = llm_logs(env, "--cid", outcome.run_id)
    assert len(rows) == 2 and {r["conversation_id"] for r in rows} == {outcome.run_id}
    answer = rows[-1]
    # What the model saw: the sibling's result from the agent, the tool's from the worker.
    assert _tool_results(answer)["delete_path"] == "deleted build/app.o"
    assert "list_files" in _tool_results(answer)
    assert answer["response"].startswith("Cleaned:")
    # ``llm logs -c``: the latest conversation is this run.
    assert {r["conversation_id"] for r in llm_logs(env, "-c")} == {outcome.run_id}


def test_a_rejection_is_logged_as_the_tool_result_the_model_read(services, slack, env, conn):
    outcome = run_agent("scripted", CLEANUP, tools=[list_files, delete_path], log=True)
    card_of(slack, outcome.pause_id)
    assert submit_reject(services.bot_url, outcome.pause_id, "keep the objects")[0] == 200
    wait_status(conn, outcome.pause_id, Status.COMPLETED)
    answer = llm_logs(env, "--cid", outcome.run_id)[-1]
    refused = _tool_results(answer)["delete_path"]
    assert refused.startswith("Cancelled: rejected by") and "keep the objects" in refused


@pytest.mark.service_env(APPROVALS_LLM_LOG="0")
def test_without_logging_nothing_is_written(services, slack, env, conn):
    outcome = run_agent("scripted", CLEANUP, tools=[list_files, delete_path])
    card = card_of(slack, outcome.pause_id)
    click(slack, services.bot_url, "approve", outcome.pause_id, card_ts=card.ts)
    wait_status(conn, outcome.pause_id, Status.COMPLETED)
    assert not (Path(env["LLM_USER_PATH"]) / "logs.db").exists()


def test_an_async_run_is_logged_the_same_way(services, slack, env, conn):
    import asyncio

    from approvals import run_agent_async

    outcome = asyncio.run(
        run_agent_async("scripted", CLEANUP, tools=[list_files, delete_path], log=True)
    )
    card = card_of(slack, outcome.pause_id)
    assert click(slack, services.bot_url, "approve", outcome.pause_id, card_ts=card.ts)[0] == 200
    wait_status(conn, outcome.pause_id, Status.COMPLETED)
    rows = llm_logs(env, "--cid", outcome.run_id)
    assert len(rows) == 2
    assert _tool_results(rows[-1])["delete_path"] == "deleted build/app.o"


def test_the_logged_run_reads_back_through_llms_own_api_as_one_conversation(
    services, slack, env, conn
):
    """Read with llm's own API (``llm.cli.load_conversation``, what ``llm -c --cid`` continues
    from, and ``llm.logs.LogStore``), a run of two pauses is one conversation: at the pause
    llm sees a conversation waiting on the gated call; at the end, the prompt, each call, the
    approval's tool output and the rejection's, and the answer, in order."""
    import sqlite_utils
    from llm.cli import load_conversation
    from llm.logs import LogStore

    prompt = script(
        calls(("list_files", {"path": "build"}), ("delete_path", {"path": "build/app.o"})),
        calls(("send_email", {"to": "ops@example.com", "subject": "cleaned"})),
        say("Finished: {results}"),
    )
    outcome = run_agent("scripted", prompt, tools=[list_files, delete_path, send_email], log=True)
    database = Path(env["LLM_USER_PATH"]) / "logs.db"
    with sqlite_utils.Database(database) as db:
        logs = LogStore(db)
        waiting = logs.pending_tool_calls(logs.thread_tip(outcome.run_id))
        # The pause, as llm sees it: the turn's calls wait for results (the free sibling's
        # result, already in hand, is logged with the gated call's, in the next turn).
        assert [c.name for c in waiting] == ["list_files", "delete_path"]

    card = card_of(slack, outcome.pause_id)
    assert click(slack, services.bot_url, "approve", outcome.pause_id, card_ts=card.ts)[0] == 200
    second = wait_status(conn, outcome.pause_id, Status.PAUSED).result.next_approval_id
    card_of(slack, second)
    assert submit_reject(services.bot_url, second, "not on a Friday")[0] == 200
    final = wait_status(conn, second, Status.COMPLETED)

    conversation = load_conversation(outcome.run_id, database=str(database))
    assert conversation is not None and conversation.id == outcome.run_id
    assert conversation.model.model_id == "scripted"
    story = []
    for message in conversation.loaded_messages or []:
        for part in message.to_dict()["parts"]:
            if part["type"] == "tool_call":
                story.append((message.role, "call", part["name"]))
            elif part["type"] == "tool_result":
                story.append((message.role, part["name"], part["output"]))
            elif part["type"] == "text":
                story.append((message.role, "text", part["text"]))
    assert story[0] == ("user", "text", prompt)
    assert [name for _, kind, name in story if kind == "call"] == [
        "list_files",
        "delete_path",
        "send_email",
    ]
    results = {kind: output for role, kind, output in story if role == "tool"}
    assert results["delete_path"] == "deleted build/app.o"
    assert results["send_email"].startswith("Cancelled: rejected by")
    assert "not on a Friday" in results["send_email"]
    assert story[-1] == ("assistant", "text", final.result.text)
    with sqlite_utils.Database(database) as db:
        logs = LogStore(db)
        assert logs.pending_tool_calls(logs.thread_tip(outcome.run_id)) == []
        assert logs.verify() == []  # every logged message still hashes to what was stored
