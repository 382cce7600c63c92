"""The worker entry points behind ``approvals worker``: RQ's own workers, unmodified.

``APPROVALS_WORKER_CLASS`` picks one of RQ's two classes. ``Worker`` (the default) forks a
work-horse for every job, so a tool that crashes, leaks or changes process state cannot
touch the worker, and RQ watches the horse (heartbeats, timeouts, a killed horse reported as
such). ``SimpleWorker`` runs every job in the worker process: no fork, so a job starts
sooner, but a tool that crashes or hangs takes the worker with it.

What is ours runs beside RQ, in background threads of each worker: the deadline sweep
(``approvals.decisions.deadlines``), the recovery of resumes whose worker died
(``approvals.decisions.recovery``) and the retention sweep (``approvals.ops.retention``).
"""

from __future__ import annotations

import functools
import gc
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

import redis
from rq import Queue, SimpleWorker, Worker
from rq.serializers import JSONSerializer
from rq.worker import BaseWorker
from rq.worker_pool import WorkerPool

from approvals import store
from approvals.calls.plugins import load_plugins, warm_models
from approvals.calls.tools import import_modules
from approvals.config import Settings
from approvals.decisions import deadlines, policy
from approvals.decisions.recovery import (
    finish_decisions,
    recover_dead_runs,
    requeue_stranded,
    requeue_unfinished,
)
from approvals.errors import ConfigError
from approvals.ops import retention
from approvals.ops.logs import configure_logging
from approvals.proof import webhooks
from approvals.secrets import load_detectors
from approvals.store.queue import Job, get_queue
from approvals.worker import jobs  # imported here, once: forked work-horses inherit it

log = logging.getLogger(__name__)

#: Seconds between RQ's heartbeats while a work-horse runs: a dead one is noticed soon.
JOB_MONITORING_INTERVAL = 5


def run_worker(settings: Settings, *, burst: bool = False, name: str | None = None) -> bool:
    """Run an RQ worker on the approvals queue until stopped (or, with ``burst``, until idle)."""
    _prepare(settings)
    conn = store.connection.connect(settings)
    rq_worker = _worker_class(settings)(
        [get_queue(conn, settings)],
        connection=conn,
        serializer=JSONSerializer,
        job_class=Job,
        name=name,
        **_worker_options(settings),
    )
    if burst:
        deadlines.sweep(conn, settings)  # what is due now is part of the work to finish
    else:
        _start_background(settings)
    return bool(rq_worker.work(burst=burst, with_scheduler=True, logging_level="INFO"))


def run_pool(settings: Settings, processes: int) -> None:
    """Run ``processes`` workers under RQ's ``WorkerPool``, which replaces any that dies.

    Ctrl-C or SIGTERM stops them all, each finishing its current job (RQ's warm shutdown).

    WorkerPool forks each worker from this process and builds it in the child by calling
    its ``worker_class`` with the queues and connection. We give it ``_pooled_worker``, a
    function whose only job is start-up: it starts our background threads in the child
    (threads do not survive a fork) and returns RQ's own class, unmodified, with our
    settings. A subclass of ``Worker`` would do the same, but would have to exist twice
    (``Worker`` and ``SimpleWorker``) and would make every worker something other than RQ's.
    Plugins, tool modules and models are loaded here, once, before the pool forks: every
    worker, and every work-horse after it, inherits them.
    """
    _prepare(settings)
    conn = store.connection.connect(settings)
    factory = functools.partial(_pooled_worker, settings)
    pool = WorkerPool(
        [settings.queue],
        connection=conn,
        num_workers=processes,
        # WorkerPool only ever calls it, as it would call a class.
        worker_class=cast("type[BaseWorker]", factory),
        serializer=JSONSerializer,
        job_class=Job,
    )
    pool.start(logging_level="INFO")


def _pooled_worker(
    settings: Settings, queues: Sequence[Queue | str], *, connection: redis.Redis, **kwargs: Any
) -> BaseWorker:
    """Build one worker of the pool, in its own process (see ``run_pool``).

    The pool hands over a connection it rebuilt from the parent's connection options; ours
    replaces it, so every pooled worker connects as ``run_worker`` does (through the
    Sentinels, when they are set)."""
    del connection
    connection = store.connection.connect(settings)
    _start_background(settings)
    # WorkerPool builds its queues without a serializer; every producer of ours writes JSON.
    names = [q.name if isinstance(q, Queue) else q for q in queues]
    json_queues = [
        Queue(n, connection=connection, serializer=JSONSerializer, job_class=Job) for n in names
    ]
    return _worker_class(settings)(
        json_queues, connection=connection, **kwargs, **_worker_options(settings)
    )


def _worker_class(settings: Settings) -> type[BaseWorker]:
    return SimpleWorker if settings.worker_class == "SimpleWorker" else Worker


def _worker_options(settings: Settings) -> dict[str, Any]:
    """RQ's defaults take minutes to notice a dead worker; ours bring it under a minute."""
    return {
        "worker_ttl": settings.worker_ttl,
        "maintenance_interval": settings.maintenance_interval,
        "job_monitoring_interval": JOB_MONITORING_INTERVAL,
    }


def _prepare(settings: Settings) -> None:
    """Everything a worker process does once, before any job.

    llm's plugin loading is not thread-safe, so plugins are loaded here, before any job or
    background thread could ask for a model.
    """
    settings.require("SLACK_BOT_TOKEN", "APPROVALS_TOOL_MODULES")
    if settings.signing_key:  # a worker that can sign could mint receipts for its own tools
        raise ConfigError("APPROVALS_SIGNING_KEY is set: only the bot and the CLI may hold it")
    load_plugins(settings)
    configure_logging(settings)
    retention.check_archive(settings)
    _warm(settings)


def _warm(settings: Settings) -> None:
    """Load now what every job would otherwise load on its first run.

    A forked work-horse starts from a copy of its worker's memory, so whatever is imported or
    built here is never rebuilt per job. Freezing the collector on what is loaded now (it
    lives as long as the worker) keeps each horse's collector from walking those objects,
    which would copy their memory pages into every horse.
    """
    jobs.warm()
    load_detectors()  # every card masks its arguments with them
    import_modules(settings.tool_modules)
    log.info("%d model ids resolved ahead of jobs", warm_models())
    try:  # the rules a resume's later calls are judged by, compiled once for every horse
        policy.rules_at(settings.policy_path)
    except ConfigError as exc:  # each resume reports it, visibly, on its card
        log.error("%s", exc)
    gc.collect()
    gc.freeze()


def _start_background(settings: Settings) -> None:
    """Every worker, in the background: sweep due deadlines into jobs, several times a second,
    and, every maintenance interval, look for resumes whose worker died, decisions whose
    decider did not finish what follows them (the audit entry, the caller woken, the resume
    queued) or whose card does not show them, decisions whose resume was never queued, and
    ended runs whose outcome was never stored or whose
    ``on_finish`` was never queued; turn the outbox of state changes into webhook jobs; every
    second, remove from Redis what finished long enough ago (``approvals.ops.retention``); and
    keep advertising what this worker imports tools from (``approvals.store.workers``).
    Each is atomic in Redis or idempotent, so workers never act twice on one of them."""
    _every("approvals-deadlines", deadlines.SWEEP_INTERVAL, settings, deadlines.sweep)
    _every("approvals-recovery", settings.maintenance_interval, settings, recover_dead_runs)
    _every("approvals-decisions", settings.maintenance_interval, settings, finish_decisions)
    _every("approvals-stranded", settings.maintenance_interval, settings, requeue_stranded)
    _every("approvals-unfinished", settings.maintenance_interval, settings, requeue_unfinished)
    _every("approvals-retention", retention.SWEEP_INTERVAL, settings, retention.sweep)
    _every("approvals-webhooks", webhooks.DRAIN_INTERVAL, settings, webhooks.drain)
    _every("approvals-tool-modules", settings.worker_ttl / 3, settings, advertise_tool_modules)


def advertise_tool_modules(conn: redis.Redis, settings: Settings) -> None:
    """Tell agents what this worker imports tools from, for as long as it is alive (a
    worker's TTL), so ``run_agent`` refuses tools it would refuse before any model call."""
    store.workers.advertise(conn, settings.queue, settings.tool_modules, settings.worker_ttl)


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
        conn = store.connection.connect(settings)
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
