"""B5: decided approvals resumed and completed per second, beside a floor job that asks Redis
and Slack for what a resume asks, with none of our code (and RQ's no-op job, for context).

What a resume asks is measured first (``resume_profile``): one decided approval is resumed in
this process, counting every Redis round trip it makes (a command, or a pipeline, sent and
answered) and every Slack call the stand-in receives. The floor job (``bench.jobs.floor``)
then makes that many Redis round trips and the same Slack calls, with the same bodies.

Every worker is first held by a ``bench.jobs.hold`` job; the approvals are decided (or the
floor or no-op jobs enqueued) behind it; then all workers are released at one instant. For
no-op jobs the clock stops at the ``ended_at`` of the last one (RQ's own timestamp); for
approvals and floor jobs, when the last of their Slack calls reaches the stand-in."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import redis
from rq import Queue

from approvals import store
from approvals.calls import resume
from approvals.decisions import review
from approvals.models import DecisionKind, Status
from approvals.slack.web import web_client
from bench.harness import USER, Phase, rq_time
from bench.loop import pause


@contextlib.contextmanager
def _round_trips() -> Iterator[list[int]]:
    """Count what this process sends Redis: one per command, one per pipeline (redis-py
    packs a pipeline into one send)."""
    sent = [0]
    original = redis.Connection.send_packed_command

    def counted(self: redis.Connection, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        original(self, command, check_health)  # type: ignore[no-untyped-call]

    redis.Connection.send_packed_command = counted  # type: ignore[method-assign,assignment]
    try:
        yield sent
    finally:
        redis.Connection.send_packed_command = original  # type: ignore[method-assign]


def _body(raw: bytes) -> dict[str, Any]:
    """A Slack call's arguments, from its JSON or form body."""
    try:
        found = json.loads(raw)
    except ValueError:
        return {k: v[0] for k, v in parse_qs(raw.decode()).items()}
    return found if isinstance(found, dict) else {}


def resume_profile(phase: Phase) -> dict[str, Any]:
    """What one resume asks of Redis (round trips) and of Slack (calls, with their bodies),
    from the second of two resumes here: the first pays for what a process does once (a
    worker's start-up does it before any job)."""
    _profile_one(phase)
    return _profile_one(phase)


def _profile_one(phase: Phase) -> dict[str, Any]:
    """An approval paused, its card posted, decided, and resumed here, counted, while the
    workers are held (its queued job then finds it done)."""
    approval_id = pause(phase, 2_000, "b5-profile")[0]
    phase.idle(timeout=120)
    key = phase.hold(len(phase.workers))
    review.decide(phase.conn, phase.settings, approval_id, DecisionKind.APPROVE, USER)
    client = web_client(phase.settings)
    conn = redis.Redis.from_url(phase.settings.redis_url)
    mark = phase.standin.mark()
    with _round_trips() as sent:
        resume.resume(conn, phase.settings, client, approval_id)
    calls = [
        [arrival.path.rsplit("/", 1)[-1], _body(arrival.body)]
        for arrival in phase.standin.since(mark)
    ]
    conn.close()
    phase.release(key, len(phase.workers))
    phase.idle(timeout=120)
    status = store.records.load(phase.conn, approval_id).status
    assert status is Status.COMPLETED, status
    return {"round_trips": sent[0], "calls": calls}


def floor_rate(phase: Phase, jobs: int, workers: int, profile: dict[str, Any]) -> dict[str, Any]:
    """Jobs/s of ``bench.jobs.floor`` (a resume's Redis round trips and Slack calls), the
    clock stopping when the last of their Slack calls reaches the stand-in."""
    key = phase.hold(workers)
    tag = uuid.uuid4().hex[:8]
    args = (profile["round_trips"], profile["calls"])
    phase.queue().enqueue_many(
        [
            Queue.prepare_data("bench.jobs.floor", args, job_id=f"floor-{tag}-{i}", result_ttl=0)
            for i in range(jobs)
        ]
    )
    mark = phase.standin.mark()
    before = phase.cpu()
    released = time.perf_counter()
    phase.release(key, workers)
    phase.idle(timeout=300, interval=0.1)
    calls = phase.standin.since(mark)
    assert len(calls) >= jobs * len(profile["calls"]), "floor jobs made fewer Slack calls"
    end = max((call.at for call in calls), default=time.perf_counter())
    return {"rate": jobs / (end - released), **_cpu_per_item(phase, before, jobs)}


def _last_end(phase: Phase, job_ids: list[str]) -> float:
    """The latest ``ended_at`` of these jobs."""
    pipe = phase.conn.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hget(f"rq:job:{job_id}", "ended_at")
    ends = [e for e in (rq_time(v) for v in pipe.execute()) if e is not None]
    assert len(ends) == len(job_ids), f"{len(job_ids) - len(ends)} jobs have no ended_at"
    return max(ends)


def _cpu_per_item(phase: Phase, before: tuple[float, float], items: int) -> dict[str, float]:
    """CPU ms per job or approval since ``before``: the workers', and the bench process's."""
    workers, bench = phase.cpu()
    return {
        "workers_cpu_ms": round((workers - before[0]) * 1000 / items, 2),
        "bench_cpu_ms": round((bench - before[1]) * 1000 / items, 2),
    }


def noop_rate(phase: Phase, jobs: int, workers: int) -> dict[str, Any]:
    """Jobs/s of ``bench.jobs.noop`` on these workers, and the CPU they took per job."""
    key = phase.hold(workers)
    tag = uuid.uuid4().hex[:8]
    job_ids = [f"noop-{tag}-{i}" for i in range(jobs)]
    phase.queue().enqueue_many(
        [Queue.prepare_data("bench.jobs.noop", job_id=j, result_ttl=600) for j in job_ids]
    )
    before = phase.cpu()
    released = phase.release(key, workers)
    phase.idle(timeout=300, interval=0.1)
    rate = jobs / (_last_end(phase, job_ids) - released)
    return {"rate": rate, **_cpu_per_item(phase, before, jobs)}


def approval_rate(phase: Phase, approvals: int, workers: int) -> dict[str, Any]:
    """Approvals/s: paused (cards posted), decided while the workers are held, then released.

    The clock stops when the last of their Slack calls (card redraws, thread replies)
    reaches the stand-in: an approval counts once its result is shown.
    """
    ids = [pause(phase, 2_000, f"b5-{i}")[0] for i in range(approvals)]
    phase.idle(timeout=600)
    key = phase.hold(workers)
    for approval_id in ids:
        review.decide(phase.conn, phase.settings, approval_id, DecisionKind.APPROVE, USER)
    mark = phase.standin.mark()
    before = phase.cpu()
    released = time.perf_counter()
    phase.release(key, workers)

    phase.idle(timeout=600, interval=0.1)
    cpu = _cpu_per_item(phase, before, approvals)
    completed = sum(store.records.load(phase.conn, a).status is Status.COMPLETED for a in ids)
    assert completed == approvals, f"{approvals - completed} approvals did not complete"
    calls = phase.standin.since(mark)
    redrawn = sum("chat.update" in call.path for call in calls)
    assert redrawn >= approvals, f"only {redrawn} of {approvals} cards show their result"
    return {
        "rate": approvals / (max(call.at for call in calls) - released),
        "slack_calls": len(calls),
        **cpu,
    }
