"""``/metrics``: how the service is doing, in Prometheus's text format.

Every number is read from Redis when Prometheus scrapes, not kept in the process that serves
it. The counters and histograms live in one Redis hash (``store.keys.METRICS_KEY``) that every
process adds to in the same steps that do the work (a decision, a resume's end, the tool's
start, a Slack call, a retention round); the gauges are Redis's own counts. That is why:

- the bot runs several gunicorn processes, and a worker forks a work-horse per job, which
  exits with whatever it counted: numbers kept in process memory would be split over
  processes, or lost with each horse. prometheus-client's multiprocess mode covers the first
  but leaves a file behind for every process that ever ran, one per job with RQ's forking
  worker, which is not something to run for years;
- any bot or worker answers for the whole deployment, so one scrape target is enough, a
  restarted process loses nothing, and ``approvals worker --processes N`` needs one port.

So every target shows the same series: scrape one of them (or aggregate with ``max``, not
``sum``). prometheus-client builds the exposition (``make_wsgi_app``, ``start_http_server``);
this module only says what to expose. The names are documented in ``docs/operations.md``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import redis
from prometheus_client import CollectorRegistry, make_wsgi_app, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from approvals import store
from approvals.config import Settings
from approvals.models import DecisionKind

#: How a resume ended, as ``store`` counts them.
RESUME_ENDS = ("completed", "paused", "failed", "interrupted")
#: What retention removes, as ``store`` counts them.
RETENTION_PARTS = ("history", "approval")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class RedisCollector(Collector):
    """Every metric, read from Redis at each scrape (one pipeline and one HGETALL)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._conn: redis.Redis | None = None
        self._lock = threading.Lock()

    def _connection(self) -> redis.Redis:
        with self._lock:
            if self._conn is None:
                self._conn = store.connection.connect(self.settings)
            return self._conn

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("approvals_redis_up", "1 when Redis answered this scrape.")
        try:
            conn = self._connection()
            waiting, running, memory = store.metrics.gauges(conn)
            values = store.metrics.metric_values(conn)
        except redis.RedisError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield _gauge("approvals_waiting", "Approvals waiting for a decision.", waiting)
        yield _gauge("approvals_resumes_running", "Resumes running now.", running)
        yield _gauge(
            "approvals_redis_memory_used_bytes",
            "Memory Redis uses (INFO memory used_memory).",
            memory.get("used_memory", 0),
        )
        yield _gauge(
            "approvals_redis_memory_max_bytes",
            "Redis's maxmemory (0: no limit).",
            memory.get("maxmemory", 0),
        )
        yield _counter(
            "approvals_decisions",
            "Decisions made, by kind (expire: nobody decided in time).",
            "kind",
            {k.value: values.get(f"decisions:{k.value}", 0) for k in DecisionKind},
        )
        yield _counter(
            "approvals_resumes_ended",
            "Resumes that ended, by how (interrupted: the worker died while the tool ran).",
            "outcome",
            {end: values.get(f"resumes:{end}", 0) for end in RESUME_ENDS},
        )
        yield _histogram(
            "approvals_decision_seconds",
            "Time from the pause to the decision.",
            "decision_seconds",
            values,
        )
        yield _histogram(
            "approvals_tool_start_seconds",
            "Time from the decision to the gated tool's start.",
            "tool_start_seconds",
            values,
        )
        yield _counter(
            "approvals_slack_calls",
            "Slack Web API calls made by approvals' own clients, by method.",
            "method",
            _by_prefix(values, "slack:calls:"),
        )
        yield _counter(
            "approvals_slack_retries",
            "Slack Web API calls retried, by why (rate_limited, server_error, connection).",
            "reason",
            _by_prefix(values, "slack:retries:"),
        )
        yield _counter(
            "approvals_retention_removed",
            "What the retention sweep removed from Redis (history: a message history; "
            "approval: a record with its audit trail).",
            "part",
            {part: values.get(f"retention:{part}", 0) for part in RETENTION_PARTS},
        )


def _gauge(name: str, documentation: str, value: Any) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=float(value))


def _counter(
    name: str, documentation: str, label: str, values: dict[str, float]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=[label])
    for value_label, value in sorted(values.items()):
        family.add_metric([value_label], value)
    return family


def _histogram(
    name: str, documentation: str, field: str, values: dict[str, float]
) -> HistogramMetricFamily:
    buckets: list[tuple[str, float]] = []
    total = 0.0
    for bound in [*store.metrics.HISTOGRAM_BUCKETS[field], math.inf]:
        total += values.get(f"{field}:le:{store.metrics.bucket_name(bound)}", 0)
        buckets.append((floatToGoString(bound), total))  # type: ignore[no-untyped-call]
    return HistogramMetricFamily(
        name, documentation, buckets=buckets, sum_value=values.get(f"{field}:sum", 0)
    )


def _by_prefix(values: dict[str, float], prefix: str) -> dict[str, float]:
    return {name[len(prefix) :]: v for name, v in values.items() if name.startswith(prefix)}


def registry(settings: Settings) -> CollectorRegistry:
    """A registry of our metrics only (not the serving process's own, which would differ
    from one target to the next)."""
    found = CollectorRegistry(auto_describe=False)
    found.register(RedisCollector(settings))
    return found


def wsgi_app(settings: Settings) -> WSGIApp:
    """``/metrics`` as a WSGI app (the bot serves it beside ``/healthz``)."""
    return make_wsgi_app(registry(settings))


def serve(settings: Settings, port: int, host: str = "0.0.0.0") -> int:
    """Serve ``/metrics`` on ``port`` from a daemon thread (the worker's ``--metrics-port``);
    returns the port (0 picks a free one)."""
    server, _ = start_http_server(port, host, registry(settings))
    return int(server.server_port)
