"""What the forking worker builds before it forks, so that every work-horse inherits it."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis

import worker.jobs
from approvals import plugins, queue, run_agent
from approvals.tools import describe_tool
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, list_files
from tests.e2e import card_of, click, reply_containing, tool_runs
from tests.processes import (
    Process,
    bot_url,
    start_bot,
    start_worker,
    wait_for_workers,
    wait_until,
)


@pytest.fixture
def fresh_worker_state(env):
    """The job module's settings and clients are per process; a test changes REDIS_URL."""
    for cached in (worker.jobs._settings, worker.jobs._conn, worker.jobs._client):
        cached.cache_clear()
    yield
    for cached in (worker.jobs._settings, worker.jobs._conn, worker.jobs._client):
        cached.cache_clear()


def test_a_resume_has_its_tools_described_and_model_resolved_before_the_fork(
    fresh_worker_state, conn
):
    prompt = script(
        calls(("list_files", {"path": "b"}), ("delete_path", {"path": "b/x"})), say("ok")
    )
    pause_id = run_agent("scripted", prompt, tools=[list_files, delete_path]).pause_id
    describe_tool.cache_clear()
    plugins._models.clear()

    worker.jobs.ready(queue.RESUME, [pause_id])

    assert describe_tool.cache_info().currsize == 2  # list_files and the gated delete_path
    assert "scripted" in plugins._models


def test_other_jobs_and_unknown_approvals_are_left_to_the_job(fresh_worker_state, conn):
    describe_tool.cache_clear()
    worker.jobs.ready(queue.POST_CARD, ["whatever"])
    worker.jobs.ready(queue.RESUME, ["no-such-approval"])
    worker.jobs.ready(queue.RESUME, [])
    assert describe_tool.cache_info().currsize == 0


def test_cards_are_posted_in_the_worker_and_tools_run_in_a_work_horse(slack, env, tmp_path):
    """The forking worker forks for a resume (agent code), not for its own Slack jobs."""
    worker_process = start_worker(
        {**env, "APPROVALS_LOG_FORMAT": "json"}, tmp_path / "worker.log", "fw"
    )
    bot = start_bot(env, tmp_path / "bot.log")
    try:
        wait_for_workers(env, [worker_process], 1)
        prompt = script(calls(("delete_path", {"path": "b/x"})), say("done"))
        pause_id = run_agent("scripted", prompt, tools=[delete_path]).pause_id
        card = card_of(slack, pause_id)
        click(slack, bot_url(bot), "approve", pause_id, card_ts=card.ts)
        (ran,) = wait_until(lambda: tool_runs(env, "delete_path"), 20, "the tool to run")
        reply_containing(slack, card.ts, "done")

        posted = wait_until(
            lambda: [
                line
                for line in _json_lines(worker_process.output())
                if line["message"].startswith("card posted") and line.get("approval_id") == pause_id
            ],
            10,
            "the card's log line",
        )
        worker_pid = worker_process.popen.pid
        assert [line["pid"] for line in posted] == [worker_pid]
        assert ran["pid"] != worker_pid
    finally:
        bot.stop()
        worker_process.stop()


def _json_lines(text: str) -> list[dict]:
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue  # not every line a process prints is a log record
    return lines


def _horses(pid: int) -> set[int]:
    """The live work-horses of worker ``pid``: children in a process group of their own, as
    RQ puts a horse (RQ's scheduler is a child too, in the worker's group)."""
    return {child for child in _children(pid) if _group(child) == child}


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _children(pid: int) -> set[int]:
    """The live child processes of ``pid`` (zombies, already dead, are left out)."""
    found = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
            found |= {int(child) for child in f.read().split()}
    return {child for child in found if _state(child) not in ("Z", "X", None)}


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def _approve_and_run(
    slack,
    url: str,
    env: dict[str, str],
    worker: str,
    path: str,
    before_click: Callable[[set[int]], object] = lambda waiting: None,
) -> tuple[dict, set[int]]:
    """Pause, approve once the worker is idle; returns the tool's run and the work-horses
    that were waiting at the click (``before_click`` is given them first)."""
    prompt = script(calls(("delete_path", {"path": path})), say("done"))
    pause_id = run_agent("scripted", prompt, tools=[delete_path]).pause_id
    card = card_of(slack, pause_id)
    conn = redis.Redis.from_url(env["REDIS_URL"])
    try:
        wait_until(lambda: conn.hget(f"rq:worker:{worker}", "state") == b"idle", 20, "idle")
    finally:
        conn.close()
    waiting = _horses(_worker_pid(env, worker))
    before_click(waiting)
    click(slack, url, "approve", pause_id, card_ts=card.ts)
    runs = wait_until(
        lambda: [r for r in tool_runs(env, "delete_path") if r["arguments"]["path"] == path],
        20,
        "the tool to run",
    )
    reply_containing(slack, card.ts, "done")
    return runs[0], waiting


def _worker_pid(env: dict[str, str], worker: str) -> int:
    conn = redis.Redis.from_url(env["REDIS_URL"])
    try:
        return int(conn.hget(f"rq:worker:{worker}", "pid") or 0)
    finally:
        conn.close()


@contextmanager
def _worker_and_bot(env: dict[str, str], tmp_path, name: str) -> Iterator[tuple[Process, str]]:
    """A forking worker named ``name`` and a bot, running; yields the worker and the bot's URL."""
    worker_process = start_worker(env, tmp_path / "worker.log", name)
    bot = start_bot(env, tmp_path / "bot.log")
    try:
        wait_for_workers(env, [worker_process], 1)
        yield worker_process, bot_url(bot)
    finally:
        bot.stop()
        worker_process.stop()


def test_a_resume_runs_in_a_spare_horse_forked_before_the_click(slack, env, tmp_path):
    with _worker_and_bot(env, tmp_path, "spare") as (worker_process, url):
        first, waiting = _approve_and_run(slack, url, env, "spare", "/tmp/spare-1")
        assert {first["pid"]} == waiting  # the spare was there before the click
        second, waiting_next = _approve_and_run(slack, url, env, "spare", "/tmp/spare-2")
        assert {second["pid"]} == waiting_next
        assert first["pid"] != second["pid"]  # each resume has a horse of its own

        spares = wait_until(lambda: _horses(worker_process.popen.pid), 20, "another spare")
        worker_process.stop()
        assert all(_state(child) is None for child in spares)  # gone with its worker


def test_a_resume_still_runs_when_the_spare_horse_died(slack, env, tmp_path):
    with _worker_and_bot(env, tmp_path, "dead-spare") as (worker_process, url):

        def kill(waiting: set[int]) -> None:
            assert len(waiting) == 1
            for spare in waiting:
                os.kill(spare, signal.SIGKILL)

        ran, killed = _approve_and_run(slack, url, env, "dead-spare", "/tmp/no-spare", kill)

        assert ran["pid"] not in (*killed, worker_process.popen.pid)  # a horse forked for it
        assert len(tool_runs(env, "delete_path")) == 1
