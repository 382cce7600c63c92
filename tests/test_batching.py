"""A resume job goes on with the resumes queued right behind it (both worker classes).

Approvals are decided while no worker runs, so their jobs wait in the queue; then one
``approvals worker --burst`` drains it. What a user sees is the same as one job per approval:
every tool runs once, every card shows its result. What changes is how many RQ jobs ran.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.registry import StartedJobRegistry

from approvals import queue, run_agent
from approvals.config import Settings
from approvals.models import DecisionKind, Status
from approvals.review import decide
from approvals.store import load
from tests.agents import tools
from tests.agents.scripted import calls, say, script
from tests.e2e import CHANNEL, block_text, card_showing, tool_runs
from tests.processes import ROOT, approvals_command, start_worker, wait_until

COMPLETED = ":checkered_flag: Completed"


def _pause(target: str) -> str:
    prompt = script(calls(("delete_path", {"path": target})), say(f"done with {target}"))
    outcome = run_agent("scripted", prompt, tools=[tools.delete_path])
    assert outcome.pause_id
    return outcome.pause_id


def _approve(conn: redis.Redis, approval_id: str) -> None:
    decide(conn, Settings.from_env(), approval_id, DecisionKind.APPROVE, "UALICE")


def _drain(env: dict[str, str], **extra: str) -> str:
    """Run one burst worker until the queue is empty; returns its output."""
    done = subprocess.run(
        approvals_command("worker", "--burst"),
        env={**env, **extra},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout + done.stderr


def _resume_jobs_kept(conn: redis.Redis, ids: list[str]) -> list[str]:
    """The approvals whose own resume job ran (RQ keeps a finished job's hash)."""
    return [a for a in ids if conn.exists(f"rq:job:resume-{a}")]


def _each_shows_its_result(slack, conn: redis.Redis, ids: list[str]) -> None:
    for approval_id in ids:
        approval = load(conn, approval_id)
        assert approval.status is Status.COMPLETED
        assert approval.card_ts is not None
        card_showing(slack, approval.card_ts, COMPLETED)
        thread = slack.thread(CHANNEL, approval.card_ts)
        replies = [m for m in thread if "done with" in block_text(m)]
        assert len(replies) == 1, approval_id


def test_one_simple_worker_job_resumes_the_approvals_queued_behind_it(slack, env, conn):
    ids = [_pause(f"/tmp/batch-{i}") for i in range(5)]
    for approval_id in ids:
        _approve(conn, approval_id)

    output = _drain(env, APPROVALS_WORKER_CLASS="SimpleWorker")

    # One job ran the five resumes; the other four jobs were taken out of the queue.
    assert _resume_jobs_kept(conn, ids) == ids[:1]
    assert output.count(": worker.jobs.resume_approval(") == 1  # RQ logs each job it starts
    runs = tool_runs(env, "delete_path")
    assert sorted(r["arguments"]["path"] for r in runs) == [f"/tmp/batch-{i}" for i in range(5)]
    _each_shows_its_result(slack, conn, ids)
    assert conn.llen(queue.get_queue(conn, Settings.from_env()).key) == 0


def test_a_resume_job_takes_nothing_out_of_turn(slack, env, conn):
    """A card queued between two resumes is posted before the second resume runs."""
    first, second = _pause("/tmp/turn-1"), _pause("/tmp/turn-2")
    _approve(conn, first)
    between = _pause("/tmp/turn-between")  # its card job is queued after first's resume
    _approve(conn, second)

    _drain(env, APPROVALS_WORKER_CLASS="SimpleWorker")

    assert _resume_jobs_kept(conn, [first, second]) == [first, second]
    between_card = load(conn, between).card_ts
    second_card = load(conn, second).card_ts
    assert between_card is not None and second_card is not None
    (result,) = [m for m in slack.thread(CHANNEL, second_card) if "done with" in block_text(m)]
    assert float(between_card) < float(result.ts)
    assert len(tool_runs(env, "delete_path")) == 2


def test_a_batch_of_one_gives_every_resume_its_own_job(slack, env, conn):
    ids = [_pause(f"/tmp/single-{i}") for i in range(3)]
    for approval_id in ids:
        _approve(conn, approval_id)

    _drain(env, APPROVALS_WORKER_CLASS="SimpleWorker", APPROVALS_RESUME_BATCH="1")

    assert _resume_jobs_kept(conn, ids) == ids
    assert len(tool_runs(env, "delete_path")) == 3


def _nothing_left_started(conn: redis.Redis) -> None:
    """Every job ended as RQ records it (a stale execution would stay "started" forever)."""
    rq_queue = Queue(Settings.from_env().queue, connection=conn)
    assert StartedJobRegistry(queue=rq_queue).get_job_ids() == []


def test_the_forking_worker_runs_a_batch_in_one_work_horse(slack, env, conn):
    """One job, one fork: the five resumes run in the same work-horse."""
    ids = [_pause(f"/tmp/horse-{i}") for i in range(5)]
    for approval_id in ids:
        _approve(conn, approval_id)

    output = _drain(env)  # the default worker class

    assert _resume_jobs_kept(conn, ids) == ids[:1]
    assert output.count(": worker.jobs.resume_approval(") == 1
    runs = tool_runs(env, "delete_path")
    assert sorted(r["arguments"]["path"] for r in runs) == [f"/tmp/horse-{i}" for i in range(5)]
    assert len({r["pid"] for r in runs}) == 1
    _each_shows_its_result(slack, conn, ids)
    _nothing_left_started(conn)


def test_a_batch_of_one_gives_every_resume_its_own_work_horse(slack, env, conn):
    ids = [_pause(f"/tmp/fork-{i}") for i in range(3)]
    for approval_id in ids:
        _approve(conn, approval_id)

    _drain(env, APPROVALS_RESUME_BATCH="1")  # the default worker class

    assert _resume_jobs_kept(conn, ids) == ids
    pids = [r["pid"] for r in tool_runs(env, "delete_path")]
    assert len(pids) == len(set(pids)) == 3
    # With jobs waiting, each next horse was forked while the one before ran.
    _nothing_left_started(conn)
    assert {conn.hget(f"rq:job:resume-{a}", "status") for a in ids} == {b"finished"}


def test_only_a_resume_at_the_head_of_the_queue_is_next(env, conn):
    settings = Settings.from_env()
    key = queue.get_queue(conn, settings).key
    assert queue.next_resume(conn, settings) is None  # empty queue
    conn.rpush(key, "card-abc", "resume-def")
    assert queue.next_resume(conn, settings) is None  # a card job comes first
    conn.delete(key)
    conn.rpush(key, "resume-0123456789abcdef-1700000000000000000")
    assert queue.next_resume(conn, settings) == (
        "resume-0123456789abcdef-1700000000000000000",
        "0123456789abcdef",
    )


@pytest.mark.parametrize("queued", [True, False])
def test_a_job_is_dropped_only_while_it_waits_in_the_queue(env, conn, queued):
    """One that a worker already took (it is no longer in the queue) stays that worker's."""
    settings = Settings.from_env()
    key = queue.get_queue(conn, settings).key
    conn.hset("rq:job:resume-feed", "status", "queued")
    if queued:
        conn.rpush(key, "resume-feed")

    assert queue.drop_queued(conn, settings, "resume-feed") is queued

    assert conn.llen(key) == 0
    assert bool(conn.exists("rq:job:resume-feed")) is not queued


def test_a_job_takes_no_more_resumes_once_its_first_second_is_over(slack, env, conn):
    """Past RESUME_BATCH_SECONDS the next resume is left to its own job, so a batch never
    stretches a job far beyond the timeout it was given."""
    prompt = script(calls(("charge_card", {"amount": 5})), say("done with the charge"))
    slow = run_agent("scripted", prompt, tools=[tools.charge_card]).pause_id
    quick = _pause("/tmp/after-slow")
    assert slow is not None
    _approve(conn, slow)
    _approve(conn, quick)
    hold = Path(env["HOLD_FILE"])
    hold.touch()  # the charge waits while this file exists

    worker = subprocess.Popen(
        approvals_command("worker", "--burst"),
        env={**env, "APPROVALS_WORKER_CLASS": "SimpleWorker"},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        (started,) = wait_until(lambda: tool_runs(env, "charge_card"), 30, "the charge to start")
        began = time.monotonic()
        # The window is about time, so wait it out: the charge holds its job meanwhile.
        wait_until(lambda: time.monotonic() - began > queue.RESUME_BATCH_SECONDS, 5, "1 s")
        hold.unlink()
        assert worker.wait(timeout=60) == 0
    finally:
        worker.kill()

    assert started["arguments"]["amount"] == 5
    assert _resume_jobs_kept(conn, [slow, quick]) == [slow, quick]
    _each_shows_its_result(slack, conn, [quick])


def test_a_work_horse_shows_each_result_before_it_takes_the_next_resume(slack, env, conn, tmp_path):
    """Slack is slow to redraw the first card: the horse waits for it before the second
    resume's tool starts, so a tool that kills the horse cannot take a stored, unshown result
    with it."""
    first = _pause("/tmp/shown-first")
    prompt = script(calls(("charge_card", {"amount": 7})), say("charged"))
    outcome = run_agent("scripted", prompt, tools=[tools.charge_card])
    assert outcome.pause_id
    second = outcome.pause_id
    _drain(env)  # posts both cards
    _approve(conn, first)
    _approve(conn, second)
    slack.delay_next("chat.update", 0.5)  # the first card's redraw
    hold = Path(env["HOLD_FILE"])
    hold.touch()
    worker = start_worker(env, tmp_path / "worker.log", f"shown-{time.time_ns()}")
    try:
        wait_until(lambda: tool_runs(env, "charge_card"), 30, "the second resume's tool")
        card_ts = load(conn, first).card_ts
        assert card_ts is not None
        assert COMPLETED in block_text(slack.message(CHANNEL, card_ts))
        hold.unlink()
        assert wait_until(lambda: load(conn, second).status is Status.COMPLETED, 30, "done")
        assert len({r["pid"] for r in tool_runs(env)}) == 1  # one horse ran both
    finally:
        hold.unlink(missing_ok=True)
        worker.stop()
