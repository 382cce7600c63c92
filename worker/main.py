"""The worker entry point behind ``approvals worker``."""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import redis
from rq import Queue, SimpleWorker, Worker
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker import WorkerStatus

import worker.jobs  # imported here, once: forked work-horses inherit it
from approvals import deadlines, store
from approvals.config import Settings
from approvals.logs import configure_logging
from approvals.plugins import load_plugins, warm_models
from approvals.queue import ANNOUNCE, EXPIRE, INTERRUPTED, POST_CARD, PUBLISH, WARN, get_queue
from approvals.recovery import recover_dead_runs
from approvals.supervisor import ChildSpec, Supervisor
from approvals.tools import import_modules
from worker.spare import Spare, fork_spare

log = logging.getLogger(__name__)


def run_worker(settings: Settings, *, burst: bool = False, name: str | None = None) -> bool:
    """Run an RQ worker on the approvals queue until stopped (or, with ``burst``, until idle).

    Plugins and models are loaded here, once, before any job: llm's plugin loading is not
    thread-safe, and a forked work-horse inherits what its parent loaded.
    """
    settings.require("SLACK_BOT_TOKEN", "APPROVALS_TOOL_MODULES")
    load_plugins(settings)
    conn = store.connect(settings)
    worker_class = SimpleWorker if settings.worker_class == "SimpleWorker" else ForkingWorker
    worker = worker_class(
        [get_queue(conn, settings)],
        connection=conn,
        serializer=JSONSerializer,
        name=name,
        worker_ttl=settings.worker_ttl,
        maintenance_interval=settings.maintenance_interval,
        # Heartbeats while a job runs: a dead work-horse is noticed within a few seconds.
        job_monitoring_interval=5,
    )
    configure_logging(settings)
    _warm(settings)
    if burst:
        deadlines.sweep(conn, settings)  # what is due now is part of the work to finish
    else:
        _start_background(settings)
    return bool(worker.work(burst=burst, with_scheduler=True, logging_level="INFO"))


class ForkingWorker(Worker):
    """RQ's forking worker, forking only for the jobs that run agent code.

    A resume runs the user's tools and model: it runs in a work-horse (with the resumes
    queued right behind it, unless ``APPROVALS_RESUME_BATCH`` is 1), so a tool that crashes,
    leaks or changes process state cannot touch the worker, and the tools and model are
    readied here first so every horse inherits them. The project's
    own jobs (posting and redrawing cards, thread replies, deadlines) run no agent code and
    take milliseconds: they run in the worker process, as ``SimpleWorker`` runs every job,
    instead of paying for a fork each (bench B4: 23 ms to a posted card, against 7 ms).
    """

    _spare: Spare | None = None

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        super().bootstrap(*args, **kwargs)
        self._keep_spare()

    def execute_job(self, job: Job, queue: Queue) -> None:
        execution = self.prepare_execution(job)
        if job.func_name in IN_PROCESS_JOBS:
            self.perform_job(job, queue, execution)
        else:
            self.fork_work_horse(job, queue)
            # While the horse runs: load what this resume needs (its tools, their schemas,
            # its model) here too, so the next spare horse inherits it.
            worker.jobs.ready(job.func_name or "", job.args)
            if self._jobs_waiting():
                # A stream of jobs: fork the next spare now, beside the running horse, so the
                # fork is off the path from one job to the next (bench B5). A lone resume
                # forks it afterwards, so the fork never competes with its tool (bench B1).
                self._keep_spare()
            self.monitor_work_horse(job, queue, execution)
        self._keep_spare()
        self.set_state(WorkerStatus.IDLE)

    def fork_work_horse(self, job: Job, queue: Queue) -> None:
        """Hand the job to the spare horse when it is current; fork one otherwise."""
        spare, self._spare = self._spare, None
        if spare is not None:
            current = spare.inherited == worker.jobs.inherited()
            if current and self.execution is not None and spare.hand(job, queue, self.execution):
                os.environ["RQ_WORKER_ID"] = self.name
                os.environ["RQ_JOB_ID"] = job.id
                self._horse_pid = spare.pid
                return
            spare.discard()
        super().fork_work_horse(job, queue)

    def _jobs_waiting(self) -> bool:
        try:
            return any(q.count for q in self.queues)
        except redis.RedisError:
            return False

    def _keep_spare(self) -> None:
        """Have a current spare horse waiting for the next resume (see ``worker.spare``)."""
        if self._spare is not None and self._spare.inherited != worker.jobs.inherited():
            self._spare.discard()
            self._spare = None
        if self._spare is None:
            self._spare = fork_spare(self, worker.jobs.inherited())

    def teardown(self) -> None:
        if self._spare is not None:
            self._spare.discard()
            self._spare = None
        super().teardown()  # type: ignore[no-untyped-call]


#: The jobs ``ForkingWorker`` runs without a work-horse: none of them runs agent code.
IN_PROCESS_JOBS = frozenset({POST_CARD, PUBLISH, ANNOUNCE, INTERRUPTED, EXPIRE, WARN})


def _warm(settings: Settings) -> None:
    """Do once, before any job, what every job would otherwise pay for on its first run.

    With the forking worker this matters most: a work-horse starts from its parent's memory,
    so whatever is imported or built here is never rebuilt per job.
    """
    worker.jobs.warm()
    import_modules(settings.tool_modules)
    log.info("%d model ids resolved ahead of jobs", warm_models())
    # What is loaded now lives as long as the worker: keep the collector of each forked
    # work-horse from walking it, which copied its pages on write in every job.
    gc.collect()
    gc.freeze()


def _start_background(settings: Settings) -> None:
    """Every worker, in the background: sweep due deadlines into jobs, several times a second,
    and look for resumes whose worker died, every maintenance interval. Both are atomic in
    Redis, so workers never act twice on one deadline or one dead run."""
    _every("approvals-deadlines", deadlines.SWEEP_INTERVAL, settings, deadlines.sweep)
    _every("approvals-recovery", settings.maintenance_interval, settings, recover_dead_runs)


def _every(
    name: str,
    interval: float,
    settings: Settings,
    task: Callable[[redis.Redis, Settings], object],
    stop: threading.Event | None = None,
) -> threading.Thread:
    """Run ``task`` every ``interval`` seconds in a daemon thread (until ``stop`` is set)."""
    stopped = stop or threading.Event()

    def loop() -> None:
        conn = store.connect(settings)
        failing = False
        while not stopped.is_set():
            try:
                task(conn, settings)
            except Exception:  # Redis restarting, say: try again next round
                if not failing:  # once per outage, not every round of it
                    log.warning("%s: round failed; retrying", name, exc_info=True)
                failing = True
            else:
                if failing:
                    log.info("%s: working again", name)
                failing = False
            stopped.wait(interval)
        conn.close()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread


def run_pool(settings: Settings, processes: int) -> None:
    """Keep ``processes`` workers running: one that dies is reported and replaced.

    Each is a plain ``approvals worker`` child, so it forks its own work-horses and runs the
    same recovery; Ctrl-C or SIGTERM stops them all, each finishing its current job.
    """
    settings.require("SLACK_BOT_TOKEN", "APPROVALS_TOOL_MODULES")
    argv = [sys.executable, "-m", "approvals", "worker"]
    specs = [ChildSpec(f"worker-{i + 1}", argv) for i in range(processes)]
    supervisor = Supervisor(specs, sys.stdout, label="approvals worker")
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: supervisor.stop())
    supervisor.run()
