"""Toolboxes and tools one cannot decorate, through the whole loop: a toolbox of our own with a
gated method, the real ``SQLite`` toolbox of the ``llm-tools-sqlite`` plugin and the real
``Filesystem`` toolbox of ``llm-tools-edit`` (whose writes change files) gated with
``approvals.calls.gate``, a plugin's tool from ``llm.get_tools()``, and a third-party function gated
from outside its module."""

from __future__ import annotations

import json
import os
import sqlite3

import llm
import pytest

from approvals import gate, run_agent, store
from approvals.models import Status
from tests.agents.gated import archive_bucket
from tests.agents.scripted import calls, say, script
from tests.agents.toolboxes import Notes
from tests.e2e import (
    approve_on_card,
    card_of,
    model_calls,
    submit_edit,
    submit_reject,
    tool_results_seen,
    tool_runs,
    wait_status,
)

PLUGIN_MODULES = "tests.agents,llm_tools_sqlite"


def _notes(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "old.txt").write_text("stale")
    (root / "keep.txt").write_text("keep")
    return Notes(str(root), owner="ops")


def test_a_gated_toolbox_method_runs_in_the_worker_on_a_toolbox_built_from_its_config(
    services, slack, env, conn, tmp_path
):
    notes = _notes(tmp_path)
    prompt = script(
        calls(("Notes_list_notes", {}), ("Notes_delete_note", {"name": "old.txt"})),
        say("Left: {results}"),
    )
    outcome = run_agent("scripted", prompt, tools=[notes])
    assert outcome.status == "paused"
    approval = store.records.load(conn, outcome.pause_id)
    assert approval.tool_name == "Notes_delete_note" and approval.summary == "Delete note old.txt"
    ref = approval.tool
    assert ref.path == "tests.agents.toolboxes:Notes" and ref.method == "delete_note"
    assert ref.config == {"root": notes.root, "owner": "ops"}  # what llm recorded, as JSON
    assert (tmp_path / "notes" / "old.txt").exists()  # nothing deleted before the click

    approve_on_card(slack, services.bot_url, outcome.pause_id)
    wait_status(conn, outcome.pause_id, Status.COMPLETED)
    (deleted,) = tool_runs(env, "Notes.delete_note")
    assert deleted["pid"] != os.getpid()  # in the worker, on a toolbox it built
    assert deleted["arguments"]["root"] == notes.root and deleted["arguments"]["owner"] == "ops"
    assert deleted["arguments"]["key"] == outcome.pause_id
    assert not (tmp_path / "notes" / "old.txt").exists()
    assert len(tool_runs(env, "Notes.list_notes")) == 1  # the free sibling ran once, here
    seen = dict(tool_results_seen(model_calls(env)[-1]))
    assert seen["Notes_delete_note"] == "deleted old.txt"


def test_rejecting_a_toolbox_call_leaves_the_file_and_tells_the_model(
    services, slack, env, conn, tmp_path
):
    notes = _notes(tmp_path)
    prompt = script(calls(("Notes_delete_note", {"name": "keep.txt"})), say("{results}"))
    outcome = run_agent("scripted", prompt, tools=[notes])
    card_of(slack, outcome.pause_id)
    assert submit_reject(services.bot_url, outcome.pause_id, "we keep that one")[0] == 200
    wait_status(conn, outcome.pause_id, Status.COMPLETED)
    assert (tmp_path / "notes" / "keep.txt").exists()
    assert tool_runs(env, "Notes.delete_note") == []
    seen = dict(tool_results_seen(model_calls(env)[-1]))
    assert seen["Notes_delete_note"].startswith("Cancelled: rejected by")


def _database(tmp_path) -> str:
    path = str(tmp_path / "shop.db")
    db = sqlite3.connect(path)
    db.execute("create table orders (id integer, total integer)")
    db.executemany("insert into orders values (?, ?)", [(1, 30), (2, 12)])
    db.commit()
    db.close()
    return path


def test_a_plugin_toolbox_outside_the_allow_list_is_refused_before_the_run(env, conn, tmp_path):
    """``SQLite`` is defined in ``llm_tools_sqlite``, which APPROVALS_TOOL_MODULES does not
    name here: run_agent refuses it before any model call, and nothing is stored."""
    from approvals import GateError

    toolbox = gate(llm.get_tools()["SQLite"](_database(tmp_path)), methods=["query"])
    prompt = script(calls(("SQLite_query", {"sql": "select 1"})), say("{results}"))
    with pytest.raises(GateError, match=r"llm_tools_sqlite.*APPROVALS_TOOL_MODULES"):
        run_agent("scripted", prompt, tools=[toolbox])
    assert model_calls(env) == [] and store.pending.pending(conn) == []


@pytest.mark.service_env(APPROVALS_TOOL_MODULES=PLUGIN_MODULES)
def test_the_sqlite_plugin_toolbox_gated_with_gate_waits_only_for_the_chosen_method(
    services, slack, env, conn, tmp_path, monkeypatch
):
    """``gate(SQLite(path), methods=["query"])``: ``schema`` stays free, ``query`` waits; the
    worker builds ``SQLite(path)`` again from llm's record and puts the same gate back."""
    monkeypatch.setenv("APPROVALS_TOOL_MODULES", PLUGIN_MODULES)
    sqlite_toolbox = llm.get_tools()["SQLite"]  # the plugin's class, as llm lists it
    toolbox = gate(sqlite_toolbox(_database(tmp_path)), methods=["query"], summary="SQL: {sql}")
    prompt = script(
        calls(
            ("SQLite_schema", {}), ("SQLite_query", {"sql": "select sum(total) as s from orders"})
        ),
        calls(("SQLite_query", {"sql": "select count(*) as n from orders"})),
        say("{results}"),
    )
    outcome = run_agent("scripted", prompt, tools=[toolbox])
    assert outcome.status == "paused"
    first = store.records.load(conn, outcome.pause_id)
    assert first.tool_name == "SQLite_query" and first.summary.startswith("SQL: select sum")
    assert first.tool.gate is not None and first.tool.path == "llm_tools_sqlite:SQLite"
    assert [s.name for s in first.siblings] == ["SQLite_schema"]  # ran at once, not gated

    approve_on_card(slack, services.bot_url, outcome.pause_id)
    # The rebuilt toolbox is gated again: the next query pauses in the worker.
    second_id = wait_status(conn, outcome.pause_id, Status.PAUSED).result.next_approval_id
    second = store.records.load(conn, second_id)
    assert second.tool_name == "SQLite_query" and second.arguments == {
        "sql": "select count(*) as n from orders"
    }
    approve_on_card(slack, services.bot_url, second_id)
    wait_status(conn, second_id, Status.COMPLETED)
    seen = tool_results_seen(model_calls(env)[-1])
    queries = [json.loads(output) for name, output in seen if name == "SQLite_query"]
    assert queries == [[{"s": 42}], [{"n": 2}]]


def test_a_third_party_function_gated_from_outside_is_found_again_by_its_own_path(
    services, slack, env, conn
):
    prompt = script(calls(("archive_bucket", {"bucket": "logs", "days": 7})), say("{results}"))
    outcome = run_agent("scripted", prompt, tools=[archive_bucket])
    approval = store.records.load(conn, outcome.pause_id)
    assert approval.tool.path == "tests.agents.vendor:archive_bucket"  # the original
    assert approval.summary == "Archive logs" and approval.editable == ["days"]
    assert tool_runs(env) == []

    card_of(slack, outcome.pause_id)
    assert submit_edit(services.bot_url, outcome.pause_id, {"days": "90"})[0] == 200
    wait_status(conn, outcome.pause_id, Status.COMPLETED)
    (ran,) = tool_runs(env, "archive_bucket")
    assert ran["arguments"] == {"bucket": "logs", "days": 90} and ran["pid"] != os.getpid()


@pytest.mark.service_env(APPROVALS_TOOL_MODULES="tests.agents,llm.tools")
def test_a_plugin_tool_from_llm_get_tools_gated_with_gate_runs_in_the_worker_once_approved(
    services, slack, env, conn, monkeypatch
):
    """``gate(llm.get_tools()["llm_time"])``: the plugin's tool waits for the click; the
    worker imports the original by its own dotted path, gates it again and runs it."""
    monkeypatch.setenv("APPROVALS_TOOL_MODULES", "tests.agents,llm.tools")
    clock = gate(llm.get_tools()["llm_time"], summary="Read the clock")
    outcome = run_agent(
        "scripted", script(calls(("llm_time", {})), say("{results}")), tools=[clock]
    )
    assert outcome.status == "paused"
    approval = store.records.load(conn, outcome.pause_id)
    assert approval.tool_name == "llm_time" and approval.summary == "Read the clock"
    assert approval.tool.path == "llm.tools:llm_time" and approval.tool.gate is not None
    assert [c["api"] for c in model_calls(env)] == ["sync"]

    approve_on_card(slack, services.bot_url, outcome.pause_id)
    wait_status(conn, outcome.pause_id, Status.COMPLETED)
    resumed = model_calls(env)[-1]
    assert resumed["pid"] != os.getpid()  # the worker ran the tool and the next turn
    assert "utc_time" in dict(tool_results_seen(resumed))["llm_time"]


EDIT_MODULES = "tests.agents,llm_tools_edit"


@pytest.mark.service_env(APPROVALS_TOOL_MODULES=EDIT_MODULES)
def test_the_edit_plugin_toolbox_gated_with_gate_waits_for_the_write_and_leaves_the_read_free(
    services, slack, env, conn, tmp_path, monkeypatch
):
    """``gate(Filesystem(root), methods=[the writes])`` on llm-tools-edit's real toolbox: the
    read runs at once, the write waits and changes nothing until approved; the worker builds
    ``Filesystem(root)`` again from llm's record and the write happens there, once."""
    monkeypatch.setenv("APPROVALS_TOOL_MODULES", EDIT_MODULES)
    root = tmp_path / "site"
    root.mkdir()
    config = root / "config.toml"
    config.write_text("debug = true\n")
    filesystem = llm.get_tools()["Filesystem"](str(root))  # the plugin's class, as llm lists it
    writes = ["str_replace", "create", "insert"]
    files = gate(filesystem, methods=writes, summary="Edit {path}")
    change = {"path": "config.toml", "old_str": "debug = true", "new_str": "debug = false"}
    prompt = script(
        calls(("Filesystem_view", {"path": "config.toml"}), ("Filesystem_str_replace", change)),
        say("{results}"),
    )
    outcome = run_agent("scripted", prompt, tools=[files])
    assert outcome.status == "paused"
    approval = store.records.load(conn, outcome.pause_id)
    assert approval.tool_name == "Filesystem_str_replace" and approval.summary == "Edit config.toml"
    assert approval.tool.path == "llm_tools_edit._filesystem:Filesystem"
    assert approval.tool.config == {"path": str(root), "max_lines": None, "max_chars": None}
    assert [s.name for s in approval.siblings] == ["Filesystem_view"]  # the read ran, free
    assert config.read_text() == "debug = true\n"  # nothing written before the click

    approve_on_card(slack, services.bot_url, outcome.pause_id)
    wait_status(conn, outcome.pause_id, Status.COMPLETED)
    assert config.read_text() == "debug = false\n"
    resumed = model_calls(env)[-1]
    assert resumed["pid"] != os.getpid()
    seen = dict(tool_results_seen(resumed))
    assert seen["Filesystem_str_replace"] == "OK: replacement applied."
    assert "debug = true" in seen["Filesystem_view"]  # what the read saw, before the write
