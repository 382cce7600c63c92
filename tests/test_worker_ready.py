"""What the forking worker builds before it forks, so that every work-horse inherits it."""

from __future__ import annotations

import pytest

import worker.jobs
from approvals import plugins, queue, run_agent
from approvals.tools import describe_tool
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, list_files


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
