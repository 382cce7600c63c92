"""Enqueueing background work for the worker, by dotted path and with ids only.

``approvals`` never imports ``worker``: jobs are named here as strings, so the agent and the
bot can enqueue them without the worker's code, and each job carries only an approval id.
Jobs use RQ's JSON serializer: nothing is ever unpickled from Redis.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, cast

import redis
from rq import Queue, Retry
from rq.job import Job as RQJob
from rq.scheduler import SCHEDULER_KEY_TEMPLATE, RQScheduler
from rq.serializers import JSONSerializer

from approvals.config import Settings
from approvals.store import pacing

POST_CARD = "approvals.worker.jobs.post_card"
RESUME = "approvals.worker.jobs.resume_approval"
PUBLISH = "approvals.worker.jobs.publish_result"
ANNOUNCE = "approvals.worker.jobs.announce_decision"
INTERRUPTED = "approvals.worker.jobs.announce_interrupted"
EXPIRE = "approvals.worker.jobs.expire_approval"
WARN = "approvals.worker.jobs.warn_expiry"
FINISH = "approvals.worker.jobs.call_on_finish"
GRANT_LINE = "approvals.worker.jobs.announce_grant_use"
REMIND = "approvals.worker.jobs.remind_approvers"
ESCALATE = "approvals.worker.jobs.escalate_approval"

#: How long RQ keeps a finished job's result (the approval's own record is what matters).
RESULT_TTL = 3600
#: Slack may be briefly unreachable or throttling: retry posting with growing pauses.
_SLACK_RETRY = Retry(max=6, interval=[1, 2, 5, 10, 30, 60])
#: A resume whose attempt died or raised (its work-horse killed, Redis away): RQ runs it again,
#: and only what that attempt left undone happens (``approvals.worker.jobs.resume_approval``).
_RESUME_RETRY = Retry(max=3, interval=[1, 10, 60])
#: A continuation's own failure (its service briefly down): retried with growing pauses.
_FINISH_RETRY = Retry(max=8, interval=[1, 5, 15, 60, 300, 900, 1800, 3600])


#: Where the jobs lived before they moved under ``approvals.`` (the installed names ``worker``
#: and ``api`` collided with users' own modules). Jobs queued by an older version name their
#: function by the old path; ``Job`` runs them at the new one.
MOVED = {
    "worker.jobs.": "approvals.worker.jobs.",
    "worker.webhooks.": "approvals.worker.webhooks.",
}


class Job(RQJob):
    """RQ's job, which finds a job queued before the move (``MOVED``) at its new path, so an
    upgrade strands nothing already in Redis. Only those two prefixes are mapped: any other
    path is RQ's to refuse or import, as before."""

    @property
    def func_name(self) -> str | None:
        name: str | None = RQJob.func_name.fget(self)  # type: ignore[attr-defined]
        for old, new in MOVED.items():
            if name is not None and name.startswith(old):
                return new + name.removeprefix(old)
        return name

    @func_name.setter
    def func_name(self, value: str) -> None:
        RQJob.func_name.fset(self, value)  # type: ignore[attr-defined]


def get_queue(conn: redis.Redis, settings: Settings) -> Queue:
    return Queue(settings.queue, connection=conn, serializer=JSONSerializer, job_class=Job)


def enqueue_card(
    conn: redis.Redis, settings: Settings, approval_id: str, channel: str, pipeline: Any = None
) -> None:
    """Ask a worker to post the approval's card in ``channel``, after the cards of the
    channel's earlier pauses (in the same transaction when ``pipeline``)."""
    if pipeline is not None:
        pacing.enlist(pipeline, channel, approval_id)
    else:
        with conn.pipeline() as pipe:
            pacing.enlist(pipe, channel, approval_id)
            pipe.execute()
    get_queue(conn, settings).enqueue(
        POST_CARD,
        approval_id,
        job_id=f"card-{approval_id}",
        retry=_SLACK_RETRY,
        pipeline=pipeline,
        job_timeout=60,
        # The record keeps the card's ts; a kept result only weighed on every waiting approval.
        result_ttl=0,
    )


def enqueue_card_later(
    conn: redis.Redis, settings: Settings, approval_id: str, seconds: float
) -> None:
    """Ask a worker to post the approval's card in ``seconds``, when its channel's turn comes
    (RQ's scheduler holds the job meanwhile, not a worker)."""
    get_queue(conn, settings).enqueue_in(
        timedelta(seconds=seconds),
        POST_CARD,
        approval_id,
        job_id=f"card-{approval_id}-{time.time_ns()}",
        retry=_SLACK_RETRY,
        job_timeout=60,
        result_ttl=0,
    )


def resume_queued(conn: redis.Redis, approval_id: str) -> bool:
    """Whether the decision's resume job was written (RQ keeps it while queued, running,
    and for a while after)."""
    return bool(Job.exists(f"resume-{approval_id}", connection=conn))


def enqueue_resume(
    conn: redis.Redis,
    settings: Settings,
    approval_id: str,
    again: bool = False,
    pipeline: Any = None,
) -> None:
    """Ask a worker to resume a decided approval (``again``: a retry or a requeue)."""
    suffix = f"-{time.time_ns()}" if again else ""
    get_queue(conn, settings).enqueue(
        RESUME,
        approval_id,
        job_id=f"resume-{approval_id}{suffix}",
        job_timeout=settings.job_timeout,
        result_ttl=RESULT_TTL,
        retry=_RESUME_RETRY,
        pipeline=pipeline,
    )


def enqueue_publish(conn: redis.Redis, settings: Settings, approval_id: str) -> None:
    """Ask a worker to show a finished run's result on the card and in its thread."""
    get_queue(conn, settings).enqueue(
        PUBLISH, approval_id, job_id=f"publish-{approval_id}", retry=_SLACK_RETRY, job_timeout=60
    )


def enqueue_announce(conn: redis.Redis, settings: Settings, approval_id: str) -> None:
    """Ask a worker to show a decision made outside Slack (the CLI) on the card."""
    get_queue(conn, settings).enqueue(
        ANNOUNCE,
        approval_id,
        job_id=f"announce-{approval_id}-{time.time_ns()}",
        retry=_SLACK_RETRY,
        job_timeout=60,
        at_front=True,
    )


def enqueue_deadline(
    conn: redis.Redis, settings: Settings, function: str, job_id: str, approval_id: str
) -> None:
    """Ask a worker to act on a deadline that came due (``approvals.decisions.deadlines``);
    the job ignores an approval decided meanwhile."""
    get_queue(conn, settings).enqueue(
        function,
        approval_id,
        job_id=job_id,
        job_timeout=60,
        result_ttl=RESULT_TTL,
        at_front=True,
    )


def enqueue_grant_line(conn: redis.Redis, settings: Settings, approval_id: str) -> None:
    """Ask a worker to post the compact line that says a grant let a call through."""
    get_queue(conn, settings).enqueue(
        GRANT_LINE,
        approval_id,
        job_id=f"grant-line-{approval_id}",
        retry=_SLACK_RETRY,
        job_timeout=60,
        result_ttl=0,
    )


def enqueue_interrupted(conn: redis.Redis, settings: Settings, approval_id: str) -> None:
    """Ask a worker to show that a run was interrupted, with a Retry button."""
    get_queue(conn, settings).enqueue(
        INTERRUPTED,
        approval_id,
        job_id=f"interrupted-{approval_id}-{time.time_ns()}",
        retry=_SLACK_RETRY,
        job_timeout=60,
        at_front=True,
    )


def finish_queued(conn: redis.Redis, run_id: str) -> bool:
    """Whether the run's ``on_finish`` job was written (RQ keeps it queued, scheduled for a
    retry, failed, or for a while after it succeeded)."""
    return bool(Job.exists(f"finish-{run_id}", connection=conn))


def enqueue_finish(conn: redis.Redis, settings: Settings, run_id: str) -> None:
    """Ask a worker to call the run's ``on_finish`` with its outcome (retried on failure)."""
    get_queue(conn, settings).enqueue(
        FINISH,
        run_id,
        job_id=f"finish-{run_id}",
        retry=_FINISH_RETRY,
        job_timeout=settings.job_timeout,
        result_ttl=RESULT_TTL,
    )


def scheduler(conn: redis.Redis, settings: Settings) -> tuple[str, str | None, dict[str, str]]:
    """Which RQ scheduler holds the queue's scheduler lock: (the lock's key, the holder's
    name or None, what the holder says of itself: pid, hostname...).

    RQ 3.0 keeps the lock at ``rq:scheduler-lock:<queue>`` (``RQScheduler.get_locking_key``),
    holding the scheduler's name, with a TTL of about a minute that its heartbeat renews.
    """
    key = str(RQScheduler.get_locking_key(settings.queue))
    holder = cast(bytes | None, conn.get(key))
    if holder is None:
        return key, None, {}
    name = holder.decode(errors="replace")
    raw = cast(dict[bytes, bytes], conn.hgetall(SCHEDULER_KEY_TEMPLATE % name))
    meta = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}
    return key, name, meta
