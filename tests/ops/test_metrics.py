"""``/metrics``: what Prometheus sees, read from Redis, on the bot's server and a worker's port."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from approvals import store
from approvals.config import Settings
from approvals.decisions.review import decide
from approvals.models import DecisionKind, Status
from approvals.ops import metrics, retention
from tests.ops.test_retention import DAY, finish, pause
from tests.processes import Process, approvals_command, bot_url, start_bot, stop_all, wait_until


def samples(text: str) -> dict[str, float]:
    """``name{label="value"}`` -> value, for every sample of an exposition."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def scrape(settings: Settings) -> dict[str, float]:
    return samples(generate_latest(metrics.registry(settings)).decode())


def test_decisions_resumes_waiting_and_retention_are_counted(env, conn):
    settings = Settings.from_env()
    pause(conn, "m1")
    pause(conn, "m2")
    pause(conn, "m3")
    decide(conn, settings, "m1", DecisionKind.APPROVE, "UALICE")
    decide(conn, settings, "m2", DecisionKind.REJECT, "UALICE", reason="no")
    assert store.transitions.transition(conn, "m1", Status.RUNNING).ok
    assert store.records.mark_tool_started(conn, "m1")
    assert store.transitions.transition(conn, "m1", Status.FAILED).ok
    pause(conn, "m4")
    finish(conn, "m4")
    retention.sweep(conn, settings, now=time.time() + 31 * DAY)

    found = scrape(settings)

    assert found["approvals_redis_up"] == 1
    assert found["approvals_waiting"] == 1
    assert found["approvals_resumes_running"] == 0
    assert found['approvals_decisions_total{kind="approve"}'] == 1
    assert found['approvals_decisions_total{kind="reject"}'] == 1
    assert found["approvals_decision_seconds_count"] == 2
    assert found['approvals_decision_seconds_bucket{le="+Inf"}'] == 2
    assert found["approvals_tool_start_seconds_count"] == 1
    assert found['approvals_tool_start_seconds_bucket{le="1.0"}'] == 1
    assert found['approvals_resumes_ended_total{outcome="failed"}'] == 1
    assert found['approvals_resumes_ended_total{outcome="completed"}'] == 1
    assert found['approvals_retention_removed_total{part="approval"}'] == 2
    assert found["approvals_redis_memory_used_bytes"] > 0


def test_redis_down_is_a_metric_not_an_error(tmp_path):
    settings = Settings(redis_url="redis://127.0.0.1:1/0")
    assert scrape(settings) == {"approvals_redis_up": 0}


def test_the_bot_and_a_worker_serve_the_same_metrics(env, conn, tmp_path: Path):
    """/metrics beside /healthz on the bot's gunicorn, and on ``--metrics-port``."""
    pause(conn, "w1")
    bot = start_bot(env, tmp_path / "bot.log", args=("--workers", "2"))
    worker = Process(approvals_command("worker", "--metrics-port", "0"), env, tmp_path / "w.log")
    try:
        bot_metrics = bot_url(bot).rsplit("/slack/events", 1)[0] + "/metrics"
        printed = wait_until(
            lambda: re.search(r"metrics at http://0.0.0.0:(\d+)/metrics", worker.output()),
            30,
            "the worker's metrics port",
        )
        worker_metrics = f"http://127.0.0.1:{printed.group(1)}/metrics"
        for url in (bot_metrics, worker_metrics):
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.status == 200
                assert samples(response.read().decode())["approvals_waiting"] == 1
    finally:
        stop_all([bot, worker])
