"""B5: decided approvals resumed and completed per second, beside RQ jobs that do nothing.

Every worker is first held by a ``bench.jobs.hold`` job; the approvals are decided (or the
no-op jobs enqueued) behind it; then all workers are released at one instant. For no-op jobs
the clock stops at the ``ended_at`` of the last one (RQ's own timestamp); for approvals, when
the last Slack call that shows a result (the card redrawn, the thread reply) reaches the
stand-in, whichever job made it."""

from __future__ import annotations

import time
import uuid
from typing import Any

from rq import Queue

from approvals import store
from approvals.decisions import review
from approvals.models import DecisionKind, Status
from bench.harness import USER, Phase, rq_time
from bench.loop import pause


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
