"""One RQ job per approval: each resume job resumes its own approval, and only that one."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.registry import FinishedJobRegistry, StartedJobRegistry

from approvals import run_agent, store
from approvals.config import Settings
from approvals.decisions.review import decide
from approvals.models import DecisionKind, Status
from approvals.store.records import load
from tests.agents import tools
from tests.agents.scripted import calls, say, script
from tests.e2e import (
    CHANNEL,
    SHORT_LEASE,
    block_text,
    card_showing,
    pause,
    reply_containing,
    tool_runs,
)
from tests.processes import ROOT, approvals_command, start_worker, wait_for_workers, wait_until

COMPLETED = ":checkered_flag: Completed"


def _pause(target: str) -> str:
    return pause("delete_path", {"path": target}, answer=f"done with {target}")


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
    reply_containing(slack, approval.card_ts, "done with")  # posted just after the redraw
    replies = [m for m in slack.thread(CHANNEL, approval.card_ts) if "done with" in block_text(m)]
    assert len(replies) == 1, approval_id


def test_a_run_longer_than_its_lease_keeps_it_and_runs_once(slack, env, conn, tmp_path):
    """The resume renews its lease while the tool runs: past the first lease's end, recovery
    (every maintenance interval) leaves it alone, and it completes with the tool run once."""
    prompt = script(calls(("charge_card", {"amount": 3})), say("done with the charge"))
    pause_id = run_agent("scripted", prompt, tools=[tools.charge_card]).pause_id
    assert pause_id
    hold = Path(env["HOLD_FILE"])
    hold.touch()
    lease = int(SHORT_LEASE["APPROVALS_LEASE"])
    worker_env = {**env, **SHORT_LEASE}
    worker = start_worker(worker_env, tmp_path / "worker.log", f"lease-{time.time_ns()}")
    try:
        wait_for_workers(worker_env, [worker], 1)
        decide(conn, Settings.from_env(), pause_id, DecisionKind.APPROVE, "UALICE")
        wait_until(lambda: tool_runs(env, "charge_card"), 20, "the tool to start")
        started = time.time()

        def renewed_past_the_first_lease() -> bool:
            held = conn.get(store.keys.lease_key(pause_id))
            return held is not None and float(held) > started + lease

        wait_until(renewed_past_the_first_lease, lease * 2, "the lease renewed")
        assert load(conn, pause_id).status is Status.RUNNING
        hold.unlink()
        _shows_its_result_once_when_done(slack, conn, pause_id)
    finally:
        hold.unlink(missing_ok=True)
        worker.stop()
    assert len(tool_runs(env, "charge_card")) == 1
    events = [e["event"] for e in store.audit.audit_trail(conn, pause_id)]
    assert "interrupted" not in events and "requeued" not in events


def _shows_its_result_once_when_done(slack, conn: redis.Redis, approval_id: str) -> None:
    wait_until(lambda: load(conn, approval_id).status is Status.COMPLETED, 30, "the run to end")
    _shows_its_result_once(slack, conn, approval_id)
