"""Hostile requests to the bot's other endpoints: ``/metrics``, ``/.well-known/jwks.json``
and ``/healthz`` (and the paths beside them), the twin of ``test_hostile_input.py``'s fuzz of
``/slack/events``. Every request gets an answer below 500 in time, the bot logs no
traceback, Redis is unchanged, and each endpoint still answers as before."""

from __future__ import annotations

import json
import urllib.request
from urllib.parse import urlsplit

from hypothesis import given, settings

from tests.e2e import redis_state, settled
from tests.hostile_http import Request, acceptable, exchange, requests
from tests.processes import bot_url, start_bot

FUZZ = settings(max_examples=200, deadline=None, database=None)
PATHS = ["/metrics", "/.well-known/jwks.json", "/healthz"]


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read()


def test_hostile_requests_to_metrics_keys_and_health_are_answered_and_change_nothing(
    env, conn, tmp_path
):
    """Odd methods, paths, queries, headers and bodies: below 500 (501 only for a method
    HTTP does not define), never a hang, no traceback, Redis unchanged; afterwards the
    metrics, the keys and the health check answer as before."""
    bot = start_bot(env, tmp_path / "bot.log")
    try:
        events = bot_url(bot)
        parts = urlsplit(events)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        base = f"http://{host}:{port}"
        keys_before = _get(base + PATHS[1])
        before = settled(lambda: redis_state(conn, seen=False))

        @FUZZ
        @given(requests(PATHS))
        def fuzz(request: Request) -> None:
            status = exchange(host, port, request)
            assert acceptable(request, status), (status, request)

        fuzz()
        assert settled(lambda: redis_state(conn, seen=False)) == before
        assert _get(base + PATHS[1]) == keys_before
        assert json.loads(keys_before[1]) == {"keys": []}
        assert _get(base + "/healthz") == (200, b"ok")
        status, metrics = _get(base + "/metrics")
        assert status == 200 and b"approvals_redis_up 1.0" in metrics
        log = bot.output()
    finally:
        bot.stop()
    assert "Traceback" not in log and " ERROR " not in log, log[-6000:]
