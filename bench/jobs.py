"""RQ jobs the benchmark enqueues beside the project's own: a job that does nothing (RQ's own
floor), B5's floor (a resume's Slack calls and Redis round trips, with none of our code), and
a job that holds a worker until released (so every worker starts at one instant)."""

from __future__ import annotations

import functools
import os
from typing import Any

from rq import get_current_job
from slack_sdk import WebClient


def noop() -> None:
    """Do nothing: what a worker costs per job, and no more."""


@functools.cache
def _client() -> WebClient:
    """A plain slack_sdk client for the stand-in, one per process (as the worker's own)."""
    return WebClient(token=os.environ["SLACK_BOT_TOKEN"], base_url=os.environ["SLACK_API_URL"])


#: Built when the worker imports this module (``APPROVALS_TOOL_MODULES`` names it), before it
#: forks, as the worker builds its own client before it forks.
if "SLACK_BOT_TOKEN" in os.environ and "SLACK_API_URL" in os.environ:
    _client()


def floor(round_trips: int, calls: list[list[Any]]) -> None:
    """What a resume asks of Redis and Slack, asked directly: ``round_trips`` Redis commands,
    one round trip each, on the job's own connection, then each ``[method, body]`` Slack
    call with slack_sdk."""
    job = get_current_job()
    assert job is not None
    conn = job.connection
    for _ in range(round_trips):
        conn.ping()
    client = _client()
    for method, body in calls:
        client.api_call(method, json=body)


def hold(key: str, timeout: float) -> None:
    """Keep this worker busy until a token is pushed to ``key`` (or ``timeout`` passes)."""
    job = get_current_job()
    assert job is not None
    job.connection.incr(f"{key}:held")
    job.connection.blpop([key], timeout)
