"""Serving the Bolt app: over HTTP (``approvals.httpd``), or Socket Mode.

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
from http import HTTPStatus
from typing import Any

from slack_bolt import App

from approvals import httpd
from bot.app import Bot, Request
from bot.board import Board
from bot.board import create as create_board
from bot.listeners.lazy import answering, share_board

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
#: Slack's largest payloads (views) are 250 kB; anything much bigger is not from Slack.
MAX_BODY_BYTES = 1024 * 1024
#: Connections the kernel holds while every thread is busy.
BACKLOG = 1024


def wsgi_app(bot: Bot) -> httpd.WSGIApp:
    """The bot at ``/slack/events`` plus a ``/healthz`` for load balancers and tests."""

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO")
        if path == HEALTH_PATH:
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]
        if path != EVENTS_PATH or environ.get("REQUEST_METHOD") != "POST":
            start_response("404 Not Found", [("Content-Type", "text/plain;charset=utf-8")])
            return [b"Not Found"]
        try:
            with answering():
                response = bot.answer(bot_request(environ))
        except (AttributeError, LookupError, RecursionError, TypeError, ValueError):
            # Bolt parses the body before any listener runs and raises on malformed JSON or
            # form data, on JSON that is not an object and on JSON nested too deeply; such a
            # request changed nothing, so it gets a 400, not a 500.
            start_response("400 Bad Request", [("Content-Type", "text/plain")])
            return [b"malformed request"]
        status = HTTPStatus(response.status)
        headers = [(name, value) for name, values in response.headers.items() for value in values]
        start_response(f"{status.value} {status.phrase}", headers)
        return [response.body.encode()]

    return application


def bot_request(environ: dict[str, Any]) -> Request:
    """The request as the bot reads it (what Bolt's own WSGI adapter reads)."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw_body = environ["wsgi.input"].read(length).decode()
    headers = {
        name[5:].lower().replace("_", "-"): value
        for name, value in environ.items()
        if name.startswith("HTTP_")
    }
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if name in environ:
            headers[name.lower().replace("_", "-")] = environ[name]
    return Request(raw_body, environ.get("QUERY_STRING", ""), headers)


def listen(host: str, port: int) -> socket.socket:
    """The bot's listening socket (port 0 picks a free one); prints the URL it serves."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=BACKLOG)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"approvals bot listening on http://{shown}:{bound}{EVENTS_PATH}", flush=True)
    return sock


def serve_http(bot: Bot, sock: socket.socket, threads: int) -> None:
    """Answer requests on ``sock`` until the process is stopped."""
    # Everything loaded so far lives as long as the process: out of the collector's sight,
    # a full collection during a burst of clicks no longer walks it (tens of ms, bench B2).
    gc.freeze()
    httpd.serve(wsgi_app(bot), sock, threads, MAX_BODY_BYTES)


def run_replicas(sock: socket.socket, threads: int, processes: int) -> None:
    """Keep ``processes`` bot processes answering on ``sock``; one that dies is replaced.

    Each is a plain ``approvals bot`` child given the socket's descriptor and its slot on the
    replicas' shared board (``bot.board``); Ctrl-C or SIGTERM stops them all.
    """
    from approvals.supervisor import ChildSpec, Supervisor

    fd, board = sock.fileno(), create_board(processes)
    argv = [sys.executable, "-m", "approvals", "bot", "--threads", str(threads)]
    argv += ["--listen-fd", str(fd), "--board-fd", str(board)]
    specs = [
        ChildSpec(f"bot-{i + 1}", [*argv, "--board-slot", str(i)], pass_fds=(fd, board))
        for i in range(processes)
    ]
    supervisor = Supervisor(specs, sys.stdout, label="approvals bot")
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: supervisor.stop())
    supervisor.run()


def join_board(fd: int, slot: int) -> None:
    """In a replica: share what it answers with the others (see ``bot.board``)."""
    share_board(Board(fd, slot))


def serve_socket_mode(app: App, app_token: str) -> None:
    """Connect to Slack over a WebSocket (no public URL needed)."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    print("approvals bot connecting to Slack in Socket Mode", flush=True)
    SocketModeHandler(app, app_token).start()  # type: ignore[no-untyped-call]
