"""One RQ job per approval: each resume job resumes its own approval, and only that one."""

from __future__ import annotations

import subprocess

import pytest
import redis
from rq import Queue
from rq.registry import FinishedJobRegistry, StartedJobRegistry

from approvals import run_agent
from approvals.config import Settings
from approvals.models import DecisionKind, Status
from approvals.review import decide
from approvals.store import load
from tests.agents import tools
from tests.agents.scripted import calls, say, script
from tests.e2e import CHANNEL, block_text, card_showing, tool_runs
from tests.processes import ROOT, approvals_command

COMPLETED = ":checkered_flag: Completed"


def _pause(target: str) -> str:
    prompt = script(calls(("delete_path", {"path": target})), say(f"done with {target}"))
    outcome = run_agent("scripted", prompt, tools=[tools.delete_path])
    assert outcome.pause_id
    return outcome.pause_id


def _drain(env: dict[str, str], **extra: str) -> None:
    """Run one burst worker until the queue is empty."""
    subprocess.run(
        approvals_command("worker", "--burst"),
        env={**env, **extra},
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=True,
    )


@pytest.mark.parametrize("worker_class", ["Worker", "SimpleWorker"])
def test_queued_resumes_each_run_in_their_own_job(slack, env, conn, worker_class):
    """Approvals decided while no worker runs: one worker then resumes each in its own RQ job;
    every tool runs once and every card shows its result once."""
    ids = [_pause(f"/tmp/queued-{i}") for i in range(3)]
    _drain(env, APPROVALS_WORKER_CLASS=worker_class)  # posts the cards
    for approval_id in ids:
        decide(conn, Settings.from_env(), approval_id, DecisionKind.APPROVE, "UALICE")

    _drain(env, APPROVALS_WORKER_CLASS=worker_class)

    rq_queue = Queue(Settings.from_env().queue, connection=conn)
    finished = set(FinishedJobRegistry(queue=rq_queue).get_job_ids())
    assert {f"resume-{a}" for a in ids} <= finished
    assert StartedJobRegistry(queue=rq_queue).get_job_ids() == []  # none left "started"
    runs = tool_runs(env, "delete_path")
    assert sorted(r["arguments"]["path"] for r in runs) == [f"/tmp/queued-{i}" for i in range(3)]
    if worker_class == "Worker":
        assert len({r["pid"] for r in runs}) == 3  # a work-horse of its own for each
    for approval_id in ids:
        _shows_its_result_once(slack, conn, approval_id)


def _shows_its_result_once(slack, conn: redis.Redis, approval_id: str) -> None:
    approval = load(conn, approval_id)
    assert approval.status is Status.COMPLETED
    assert approval.card_ts is not None
    card_showing(slack, approval.card_ts, COMPLETED)
    replies = [m for m in slack.thread(CHANNEL, approval.card_ts) if "done with" in block_text(m)]
    assert len(replies) == 1, approval_id
