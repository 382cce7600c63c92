"""Where a job runs under each of RQ's worker classes (``APPROVALS_WORKER_CLASS``)."""

from __future__ import annotations

import json
import subprocess
import sys

from approvals import run_agent
from approvals.config import Settings
from approvals.decisions.review import decide
from approvals.models import DecisionKind, Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.e2e import card_of, reply_containing, tool_runs, wait_status
from tests.processes import start_worker, wait_for_workers


def _approve_and_run(slack, conn, env: dict[str, str], path: str) -> dict:
    """Pause, approve (as the CLI does), and return the gated tool's run once it is shown."""
    prompt = script(calls(("delete_path", {"path": path})), say(f"done with {path}"))
    pause_id = run_agent("scripted", prompt, tools=[delete_path]).pause_id
    assert pause_id
    card = card_of(slack, pause_id)
    decide(conn, Settings.from_env(), pause_id, DecisionKind.APPROVE, "UALICE")
    wait_status(conn, pause_id, Status.COMPLETED)
    reply_containing(slack, card.ts, f"done with {path}")
    (run,) = [r for r in tool_runs(env, "delete_path") if r["arguments"]["path"] == path]
    return run


def test_the_forking_worker_runs_each_resume_in_a_work_horse_of_its_own(slack, env, conn, tmp_path):
    """``Worker``: the tool runs outside the worker, and two resumes never share a process."""
    worker = start_worker(env, tmp_path / "worker.log", "forking")
    try:
        wait_for_workers(env, [worker], 1)
        first = _approve_and_run(slack, conn, env, "/tmp/horse-1")
        second = _approve_and_run(slack, conn, env, "/tmp/horse-2")
        worker_pid = worker.popen.pid
        assert worker_pid not in (first["pid"], second["pid"])
        assert first["pid"] != second["pid"]
        assert len(tool_runs(env, "delete_path")) == 2
    finally:
        worker.stop()


def test_the_simple_worker_runs_every_job_in_its_own_process(slack, env, conn, tmp_path):
    """``SimpleWorker``: no fork; the tool runs in the worker process, and the card was
    posted from it too."""
    worker = start_worker(
        {**env, "APPROVALS_WORKER_CLASS": "SimpleWorker", "APPROVALS_LOG_FORMAT": "json"},
        tmp_path / "worker.log",
        "simple",
    )
    try:
        wait_for_workers(env, [worker], 1)
        ran = _approve_and_run(slack, conn, env, "/tmp/in-process")
        assert ran["pid"] == worker.popen.pid
        posted = [
            line
            for line in _json_lines(worker.output())
            if line["message"].startswith("card posted")
        ]
        assert [line["pid"] for line in posted] == [worker.popen.pid]
    finally:
        worker.stop()


def _json_lines(text: str) -> list[dict]:
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue  # not every line a process prints is a log record
    return lines


def test_a_worker_without_an_archive_or_rules_does_not_load_their_libraries():
    """The forking worker copies its memory into a work-horse per job: SQLAlchemy, Alembic and
    cel (with its command line) are loaded only by the workers configured to need them."""
    probe = (
        "import sys, approvals.cli.main, worker.main; "
        "print(sorted(m for m in ('sqlalchemy', 'alembic', 'cel', 'typer') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
