"""What the forking worker builds before it forks, so that every work-horse inherits it."""

from __future__ import annotations

import json

import pytest

import worker.jobs
from approvals import plugins, queue, run_agent
from approvals.tools import describe_tool
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, list_files
from tests.e2e import card_of, click, reply_containing, tool_runs
from tests.processes import bot_url, start_bot, start_worker, wait_for_workers, wait_until


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
