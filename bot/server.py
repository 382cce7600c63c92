"""Serving the Bolt app: waitress over HTTP, or Socket Mode.

Bolt's ``app.start()`` is a single-threaded development server that reset connections in a
burst of 20 clicks; Slack does not retry a click, so HTTP mode runs on waitress with threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot.listeners.lazy import answering

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
#: Slack's largest payloads (views) are 250 kB; anything much bigger is not from Slack.
MAX_BODY_BYTES = 1024 * 1024

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def wsgi_app(app: App) -> WSGIApp:
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


def serve_http(app: App, host: str, port: int, threads: int = 64) -> None:
    """Serve until interrupted; prints the URL it listens on (port 0 picks a free one)."""
    from waitress.server import create_server

    server = create_server(
        wsgi_app(app),
        host=host,
        port=port,
        threads=threads,
        max_request_body_size=MAX_BODY_BYTES,
        ident="approvals",
    )
    bound = getattr(server, "effective_port", port)
    print(f"approvals bot listening on http://{host}:{bound}{EVENTS_PATH}", flush=True)
    server.run()


def serve_socket_mode(app: App, app_token: str) -> None:
    """Connect to Slack over a WebSocket (no public URL needed)."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    print("approvals bot connecting to Slack in Socket Mode", flush=True)
    SocketModeHandler(app, app_token).start()  # type: ignore[no-untyped-call]
