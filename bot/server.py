"""Serving the Bolt app: over HTTP (``bot.httpd``), or Socket Mode.

Bolt's ``app.start()`` is a single-threaded development server that reset connections in a
burst of 20 clicks; Slack does not retry a click, so HTTP mode runs on threads of its own.

One Python process answers on one core at a time (the interpreter lock), so ``--processes N``
runs N bot processes that accept from one listening socket, opened before they start: the
kernel hands each new connection to whichever is free, and a replica that dies is replaced
(bench B2: a burst of 50 clicks on two cores).
"""

from __future__ import annotations

import gc
import signal
import socket
import sys
from collections.abc import Callable, Iterable
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot import httpd
from bot.listeners.lazy import answering

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
#: Slack's largest payloads (views) are 250 kB; anything much bigger is not from Slack.
MAX_BODY_BYTES = 1024 * 1024
#: Connections the kernel holds while every thread is busy.
BACKLOG = 1024


def wsgi_app(app: App) -> httpd.WSGIApp:
    """Bolt at ``/slack/events`` plus a ``/healthz`` for load balancers and tests."""
    bolt = SlackRequestHandler(app, path=EVENTS_PATH)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == HEALTH_PATH:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]
        try:
            with answering():
                return bolt(environ, start_response)
        except (AttributeError, LookupError, RecursionError, TypeError, ValueError):
            # Bolt parses the body before any listener runs and raises on malformed JSON or
            # form data, on JSON that is not an object and on JSON nested too deeply; such a
            # request changed nothing, so it gets a 400, not a 500.
            start_response("400 Bad Request", [("Content-Type", "text/plain")])
            return [b"malformed request"]

    return application


def listen(host: str, port: int) -> socket.socket:
    """The bot's listening socket (port 0 picks a free one); prints the URL it serves."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"approvals bot listening on http://{shown}:{bound}{EVENTS_PATH}", flush=True)
    return sock


def serve_http(app: App, sock: socket.socket, threads: int) -> None:
    """Answer requests on ``sock`` until the process is stopped."""
    # Everything loaded so far lives as long as the process: out of the collector's sight,
    # a full collection during a burst of clicks no longer walks it (tens of ms, bench B2).
    gc.freeze()
    httpd.serve(wsgi_app(app), sock, threads, MAX_BODY_BYTES)


def run_replicas(sock: socket.socket, threads: int, processes: int) -> None:
    """Keep ``processes`` bot processes answering on ``sock``; one that dies is replaced.

    Each is a plain ``approvals bot`` child given the socket's descriptor; Ctrl-C or SIGTERM
    stops them all.
    """
    from approvals.supervisor import ChildSpec, Supervisor

    fd = sock.fileno()
    argv = [sys.executable, "-m", "approvals", "bot", "--threads", str(threads)]
    argv += ["--listen-fd", str(fd)]
    specs = [ChildSpec(f"bot-{i + 1}", argv, pass_fds=(fd,)) for i in range(processes)]
    supervisor = Supervisor(specs, sys.stdout, label="approvals bot")
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: supervisor.stop())
    supervisor.run()


def serve_socket_mode(app: App, app_token: str) -> None:
    """Connect to Slack over a WebSocket (no public URL needed)."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    print("approvals bot connecting to Slack in Socket Mode", flush=True)
    SocketModeHandler(app, app_token).start()  # type: ignore[no-untyped-call]
