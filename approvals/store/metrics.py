"""Counters and histogram buckets in one hash: every process adds to the same ones, so
``/metrics`` on any bot or worker shows the whole deployment."""

from __future__ import annotations

import contextlib
from typing import Any, cast

import redis

from approvals.config import Settings
from approvals.store.connection import shared_connection, text
from approvals.store.keys import METRICS_KEY, PENDING_KEY, RUNNING_KEY

#: Buckets (upper bounds, seconds) of the histograms kept in ``METRICS_KEY``. Here, beside
#: the Lua that fills one of them. A person takes seconds to days to decide; a worker takes
#: milliseconds to start the tool, or minutes when every worker is busy.
HISTOGRAM_BUCKETS: dict[str, tuple[float, ...]] = {
    "decision_seconds": (
        1,
        5,
        15,
        30,
        60,
        300,
        900,
        1800,
        3600,
        7200,
        14400,
        28800,
        86400,
        172800,
        604800,
    ),
    "tool_start_seconds": (
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1,
        2.5,
        5,
        10,
        30,
        60,
        300,
    ),
}


# Lua: add ``value`` to histogram ``name`` of the metrics hash ``key``; its bucket bounds are
# ARGV[first] onwards. The fields are those ``observe`` writes.
_OBSERVE_LUA = """
local function observe(key, name, value, first)
  local bucket = '+Inf'
  for i = first, #ARGV do
    if value <= tonumber(ARGV[i]) then bucket = ARGV[i] break end
  end
  redis.call('HINCRBY', key, name .. ':le:' .. bucket, 1)
  redis.call('HINCRBYFLOAT', key, name .. ':sum', value)
  redis.call('HINCRBY', key, name .. ':count', 1)
end
"""


def bucket_name(value: float) -> str:
    """A bucket bound as its field names spell it (``0.005``, ``60``, ``+Inf``)."""
    return "+Inf" if value == float("inf") else f"{value:g}"


def observe(target: Any, name: str, value: float) -> None:
    """Add ``value`` to the histogram ``name`` (``target``: a client or a pipeline)."""
    bounds = HISTOGRAM_BUCKETS[name]
    bucket = next((bucket_name(b) for b in bounds if value <= b), "+Inf")
    target.hincrby(METRICS_KEY, f"{name}:le:{bucket}", 1)
    target.hincrbyfloat(METRICS_KEY, f"{name}:sum", value)
    target.hincrby(METRICS_KEY, f"{name}:count", 1)


def count(target: Any, name: str, by: int = 1) -> None:
    """Add to the counter ``name`` (``target``: a client or a pipeline)."""
    target.hincrby(METRICS_KEY, name, by)


def metric_values(conn: redis.Redis) -> dict[str, float]:
    """Every counter and histogram field, by name (``/metrics`` reads them at each scrape)."""
    raw = cast(dict[bytes, bytes], conn.hgetall(METRICS_KEY))
    values = {}
    for name, value in raw.items():
        try:
            values[text(name)] = float(value)
        except ValueError:  # Redis is a trust boundary: an odd field is not a crash
            continue
    return values


def gauges(conn: redis.Redis) -> tuple[int, int, dict[str, Any]]:
    """(approvals waiting, resumes running, Redis's INFO memory), in one round trip."""
    pipe = conn.pipeline(transaction=False)
    pipe.zcard(PENDING_KEY)
    pipe.zcard(RUNNING_KEY)
    pipe.info("memory")
    waiting, running, memory = pipe.execute()
    return int(waiting), int(running), dict(memory)


def count_safely(settings: Settings, name: str) -> None:
    """Add one to counter ``name``; a metric is never worth failing the work it counts."""
    with contextlib.suppress(redis.RedisError):
        count(shared_connection(settings), name)
