"""Serving the Bolt app: over HTTP on gunicorn, or in Socket Mode.

HTTP mode is Bolt's own WSGI adapter on gunicorn, started from our CLI: gunicorn's arbiter
runs ``workers`` processes of ``threads`` threads each, replaces one that dies or hangs past
its timeout, and on SIGTERM stops accepting, lets the requests in flight finish, and each
process then waits for the work those requests started (Bolt's lazy listeners) before it
exits. Every process builds its own Bolt app, Redis and Slack clients after the fork.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gunicorn import glogging
from gunicorn.app.base import BaseApplication
from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler

from approvals.bot.app import WORK_THREADS, create_app
from approvals.config import Settings
from approvals.ops import metrics
from approvals.proof import keys

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
#: Prometheus's scrape path; every number comes from Redis, so any process can answer it.
METRICS_PATH = "/metrics"
#: Where verifiers of receipts fetch the public keys (RFC 8615's well-known location).
JWKS_PATH = "/.well-known/jwks.json"
#: Verifiers may cache the keys for a few minutes; one that meets a receipt with an unknown
#: ``kid`` (just after a rotation) should fetch them again before refusing it.
JWKS_CACHE = ("Cache-Control", "public, max-age=300")
#: Slack's largest payloads (views) are 250 kB; anything much bigger is not from Slack.
MAX_BODY_BYTES = 1024 * 1024
#: Connections the kernel holds while every thread is busy: a burst of clicks waits, not drops.
BACKLOG = 1024
#: One access line per request, in the project's log format like every other line.
ACCESS_FORMAT = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms'
#: What Bolt raises while it parses a body (not JSON, not an object, nested too deeply, a
#: field of the wrong type): nothing ran yet, so the request gets a 400, not a 500.
MALFORMED = (AttributeError, LookupError, RecursionError, TypeError, ValueError)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def wsgi_app(
    app: App, metrics_app: WSGIApp | None = None, jwks: bytes = b'{"keys": []}'
) -> WSGIApp:
    """Bolt's WSGI adapter at ``/slack/events``, a ``/healthz`` for load balancers, the
    ``/metrics`` of ``approvals.ops.metrics`` when given, the receipts' public keys at
    ``/.well-known/jwks.json``, and a 400 for what Bolt cannot parse or what is too big to be
    from Slack."""
    handler = SlackRequestHandler(app, EVENTS_PATH)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == HEALTH_PATH:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]
        if environ.get("PATH_INFO") == METRICS_PATH and metrics_app is not None:
            return metrics_app(environ, start_response)
        if environ.get("PATH_INFO") == JWKS_PATH and environ.get("REQUEST_METHOD") == "GET":
            start_response("200 OK", [("Content-Type", "application/json"), JWKS_CACHE])
            return [jwks]
        if int(environ.get("CONTENT_LENGTH") or 0) > MAX_BODY_BYTES:
            start_response("413 Content Too Large", [("Content-Type", "text/plain")])
            return [b"request too large"]
        try:
            return handler(environ, start_response)
        except MALFORMED:
            start_response("400 Bad Request", [("Content-Type", "text/plain")])
            return [b"malformed request"]

    return application


class Logger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's logger, writing through the handler ``approvals.ops.logs`` installed: its
    start-up, error and access lines come out in ``APPROVALS_LOG_FORMAT`` (text or JSON)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for logger in (self.error_log, self.access_log):
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.propagate = True


class HttpServer(BaseApplication):  # type: ignore[misc]
    """``approvals bot`` in HTTP mode: gunicorn configured from our CLI's options."""

    def __init__(
        self, settings: Settings, bind: str, workers: int, threads: int, timeout: int
    ) -> None:
        self.settings = settings
        self.options: dict[str, Any] = {
            "bind": bind,
            "workers": workers,
            "threads": threads,
            "worker_class": "gthread",
            "timeout": timeout,
            "graceful_timeout": timeout,
            "backlog": BACKLOG,
            "accesslog": "-",
            "access_log_format": ACCESS_FORMAT,
            "logger_class": Logger,
            "when_ready": _print_listening,
            "worker_exit": self._drain,
        }
        self.executor: ThreadPoolExecutor | None = None
        super().__init__()

    def load_config(self) -> None:
        for name, value in self.options.items():
            self.cfg.set(name, value)

    def load(self) -> WSGIApp:
        """In each worker process, after the fork: its own app, clients and work threads."""
        self.executor = ThreadPoolExecutor(WORK_THREADS, "listener-work")
        app = create_app(self.settings, executor=self.executor)
        jwks = json.dumps(keys.jwks(self.settings)).encode()
        return wsgi_app(app, metrics.wsgi_app(self.settings), jwks)

    def _drain(self, arbiter: Any, worker: Any) -> None:
        """The process is stopping: let the work its requests started finish first."""
        if self.executor is not None:
            self.executor.shutdown(wait=True)


def _print_listening(arbiter: Any) -> None:
    for listener in arbiter.LISTENERS:
        print(f"approvals bot listening on {listener}{EVENTS_PATH}", flush=True)


def serve_http(
    settings: Settings, host: str, port: int, workers: int, threads: int, timeout: int
) -> None:
    """Serve HTTP mode until SIGTERM or Ctrl-C (port 0 picks a free one)."""
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    HttpServer(settings, bind, workers, threads, timeout).run()


def serve_socket_mode(settings: Settings, app_token: str) -> None:
    """Connect to Slack over a WebSocket (no public URL needed) until SIGTERM or Ctrl-C;
    then close the connection, so Slack sends the requests elsewhere, and wait for the work
    the requests already acknowledged started."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    executor = ThreadPoolExecutor(WORK_THREADS, "listener-work")
    handler = SocketModeHandler(create_app(settings, executor=executor), app_token)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print("approvals bot connecting to Slack in Socket Mode", flush=True)
    handler.connect()  # type: ignore[no-untyped-call]
    stop.wait()
    log.info("stopping: closing the Socket Mode connection, then finishing the work under way")
    handler.close()  # type: ignore[no-untyped-call]
    executor.shutdown(wait=True)
