"""RQ jobs the benchmark enqueues beside the project's own: a job that does nothing (the floor
of B5) and a job that holds a worker until released (so every worker starts at one instant)."""

from __future__ import annotations

from rq import get_current_job


def noop() -> None:
    """Do nothing: what a worker costs per job, and no more."""


def hold(key: str, timeout: float) -> None:
    """Keep this worker busy until a token is pushed to ``key`` (or ``timeout`` passes)."""
    job = get_current_job()
    assert job is not None
    job.connection.incr(f"{key}:held")
    job.connection.blpop([key], timeout)
