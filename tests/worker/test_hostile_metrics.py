"""Hostile requests to ``approvals worker --metrics-port`` (prometheus-client's server), the
twin of the bot's fuzz of ``/slack/events``: an answer below 500 in time, no traceback in the
worker's log, Redis unchanged, and the metrics still served."""

from __future__ import annotations

import re
import urllib.request

from hypothesis import given, settings

from tests.e2e import redis_state, settled
from tests.hostile_http import Request, acceptable, exchange, requests
from tests.processes import Process, approvals_command, wait_until

FUZZ = settings(max_examples=150, deadline=None, database=None)


def test_hostile_requests_to_the_workers_metrics_port_are_answered_and_change_nothing(
    env, conn, tmp_path
):
    """Odd methods, paths, queries, headers and bodies on the metrics port: below 500 (501
    only for a method HTTP does not define), never a hang, no traceback, Redis unchanged."""
    worker = Process(approvals_command("worker", "--metrics-port", "0"), env, tmp_path / "w.log")
    try:
        printed = wait_until(
            lambda: re.search(r"metrics at http://0.0.0.0:(\d+)/metrics", worker.output()),
            30,
            "the worker's metrics port",
        )
        port = int(printed.group(1))
        before = settled(lambda: redis_state(conn, seen=False))

        @FUZZ
        @given(requests(["/metrics", "/", "/favicon.ico"]))
        def fuzz(request: Request) -> None:
            status = exchange("127.0.0.1", port, request)
            assert acceptable(request, status), (status, request)

        fuzz()
        assert settled(lambda: redis_state(conn, seen=False)) == before
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200 and b"approvals_redis_up 1.0" in response.read()
        log = worker.output()
    finally:
        worker.stop()
    assert "Traceback" not in log and " ERROR " not in log, log[-6000:]
