"""The worker entry point behind ``approvals worker``."""

from __future__ import annotations

import logging

from rq import SimpleWorker, Worker
from rq.serializers import JSONSerializer

import worker.jobs  # noqa: F401 - imported once here so forked work-horses inherit it
from approvals import store
from approvals.config import Settings
from approvals.plugins import load_plugins
from approvals.queue import get_queue


def run_worker(settings: Settings, *, burst: bool = False, name: str | None = None) -> bool:
    """Run an RQ worker on the approvals queue until stopped (or, with ``burst``, until idle).

    Plugins and models are loaded here, once, before any job: llm's plugin loading is not
    thread-safe, and a forked work-horse inherits what its parent loaded.
    """
    settings.require("SLACK_BOT_TOKEN")
    load_plugins(settings)
    conn = store.connect(settings)
    worker_class = SimpleWorker if settings.worker_class == "SimpleWorker" else Worker
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return bool(worker.work(burst=burst, with_scheduler=True, logging_level="INFO"))
