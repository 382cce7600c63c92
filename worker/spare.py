"""A work-horse forked before its job arrives, so a resume never waits for ``fork()``.

RQ's forking worker forks a horse when it has dequeued a job: the click waited for the
``fork()`` of a 70 MB Python process, then for the horse to open its own Redis connections
(bench B1: 14.6 ms from enqueue to the job starting, against 3.9 ms without a fork). A
spare horse is forked while the worker is idle, connects, and waits on a pipe; the worker
hands it the next resume by writing the job's ids into the pipe, and the spare rebuilds the
job from Redis as RQ's own ``SpawnWorker`` horse does, then runs it exactly as a horse
forked at that instant would. Everything else (monitoring, timeouts, killing it) is RQ's.

A spare is a snapshot of its worker: it is used only if the worker has loaded nothing new
since it was forked (``worker.jobs.inherited``); otherwise it is discarded and the job gets
a fresh fork, which inherits what was loaded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from dataclasses import dataclass

from rq import Queue, Worker
from rq.exceptions import NoSuchJobError
from rq.executions import Execution
from rq.job import Job

from worker import jobs

log = logging.getLogger(__name__)

#: A job's ids fit in one pipe write of at most this many bytes (atomic below PIPE_BUF).
_MESSAGE_LIMIT = 4096


@dataclass
class Spare:
    """A forked horse waiting for a job: its pid, the pipe's write end, what it inherited."""

    pid: int
    pipe: int
    inherited: object

    def hand(self, job: Job, queue: Queue, execution: Execution) -> bool:
        """Give the spare this job; False if it is gone (the caller forks instead)."""
        message = json.dumps({"job": job.id, "queue": queue.name, "execution": execution.id})
        data = message.encode()
        if not self._alive():  # reaped now: only its pipe is left to close
            self._close()
            return False
        if len(data) > _MESSAGE_LIMIT:
            self.discard()
            return False
        try:
            os.write(self.pipe, data)
        except OSError:  # it died between the check and the write
            self.discard()
            return False
        self._close()
        return True

    def discard(self) -> None:
        """Stop the spare (closing the pipe tells it to exit) and reap it."""
        if self.pipe < 0:
            return  # handed its job, or discarded already: no longer ours to stop
        self._close()
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)

    def _close(self) -> None:
        # Once: the number of a closed descriptor may be reused by anything else.
        with contextlib.suppress(OSError):
            os.close(self.pipe)
        self.pipe = -1

    def _alive(self) -> bool:
        """Whether it still runs; a dead one is reaped (so its pid is never signalled again)."""
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return pid == 0


def fork_spare(rq_worker: Worker, inherited: object) -> Spare | None:
    """Fork a spare horse for the worker's next job (None if the fork failed)."""
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        log.warning("could not fork a spare work-horse; forking per job", exc_info=True)
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:  # pragma: no cover - the child; its work is seen through the jobs it runs
        os.close(write_end)
        _child(rq_worker, read_end)
    os.close(read_end)
    return Spare(pid, write_end, inherited)


def _child(rq_worker: Worker, pipe: int) -> None:
    """The spare: connect now, wait for a job, run it as RQ's horse would, and exit.

    It never returns into the worker's code: whatever happens, it leaves with ``os._exit``.
    """
    code = 1
    try:
        os.setpgrp()  # as RQ's horse: the worker can kill its whole group
        rq_worker.setup_work_horse_signals()  # type: ignore[no-untyped-call]
        _prepare(rq_worker)
        message = _read(pipe)
        if not message:  # the worker discarded it, or exited
            code = 0
            return
        ids = json.loads(message)
        os.environ["RQ_WORKER_ID"] = rq_worker.name
        os.environ["RQ_JOB_ID"] = ids["job"]
        job, execution = _fetch(rq_worker, ids["job"], ids["execution"])
        queue = rq_worker.queue_class(
            ids["queue"],
            connection=rq_worker.connection,
            job_class=rq_worker.job_class,
            serializer=rq_worker.serializer,
            death_penalty_class=rq_worker.death_penalty_class,
        )
        execution._job = job
        # Only this job's: a spare forked while a horse ran inherits that job's execution,
        # and RQ's horse works on the first one it holds (it would leave this one registered).
        rq_worker.executions.clear()
        rq_worker.execution = execution
        rq_worker.main_work_horse(job, queue)  # exits the process itself
    except BaseException:
        log.exception("spare work-horse failed before its job ran")
    finally:
        os._exit(code)


def _fetch(rq_worker: Worker, job_id: str, execution_id: str) -> tuple[Job, Execution]:
    """The job and its execution, as ``Job.fetch`` and ``Execution.fetch`` build them, in
    one round trip instead of two."""
    job = rq_worker.job_class(
        job_id, connection=rq_worker.connection, serializer=rq_worker.serializer
    )
    execution = Execution(id=execution_id, job_id=job_id, connection=rq_worker.connection)
    pipe = rq_worker.connection.pipeline(transaction=False)
    pipe.hgetall(job.key)
    pipe.hgetall(execution.key)
    job_data, execution_data = pipe.execute()
    if not job_data or not execution_data:
        raise NoSuchJobError(f"job {job_id} or its execution {execution_id} is gone")
    job.restore(job_data)
    execution.restore(execution_data)
    return job, execution


def _prepare(rq_worker: Worker) -> None:
    """Open the horse's own Redis connections and start its threads while nothing waits.

    After a fork redis-py drops the parent's connections, so the first command of each
    client opens a new one: RQ's, and the one the jobs use.
    """
    with contextlib.suppress(Exception):  # a Redis hiccup: the job connects when it runs
        rq_worker.connection.ping()
        jobs.prepare_horse()


def _read(pipe: int) -> bytes:
    chunks = []
    while chunk := os.read(pipe, _MESSAGE_LIMIT):
        chunks.append(chunk)
    os.close(pipe)
    return b"".join(chunks)
