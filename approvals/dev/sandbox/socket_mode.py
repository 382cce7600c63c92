"""Slack's Socket Mode, served on this machine: the WebSocket that ``apps.connections.open``
points an app at, and the envelopes Slack sends down it.

Why it exists: most teams run the bot in Socket Mode (the manifest's default), where Slack
never calls the bot; the bot dials out, and every click, slash command and event arrives as a
JSON envelope on that WebSocket, acknowledged by ``envelope_id``. So the tests and the sandbox
run the bot through slack_sdk's own ``SocketModeHandler`` against this server, served by the
maintained ``websockets`` library, rather than handing Bolt a dict.

The protocol, as Slack speaks it and slack_sdk's built-in client reads it
(``slack_sdk/socket_mode/builtin``, ``request.py``, ``response.py``):

1. The app calls ``apps.connections.open`` with its app-level token (``xapp-...``) and gets
   ``ws://.../link/?ticket=...&app_id=...``. A ticket opens one connection. Slack's
   ``debug_reconnects=true`` query (connections refreshed every few minutes) is accepted and
   ignored: slack_sdk never adds it, and tests ask for a refresh with :meth:`disconnect`.
2. On connect the server sends ``{"type": "hello", "num_connections", "debug_info",
   "connection_info"}``; the client only reads it as "not an envelope".
3. A request is ``{"envelope_id", "type": "interactive" | "slash_commands" | "events_api",
   "payload", "accepts_response_payload"}`` (Events also carry ``retry_attempt`` and
   ``retry_reason``); the app answers ``{"envelope_id", "payload"?}``.
4. ``{"type": "disconnect", "reason": "refresh_requested"}`` asks the app to open a new
   connection (slack_sdk calls ``apps.connections.open`` again, connects, then closes the old).

Pings go both ways as WebSocket control frames (slack_sdk pings every few seconds and drops a
connection whose pongs stop; ``websockets`` answers and pings on its own).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve

__all__ = ["ENVELOPE_KINDS", "NoAck", "NotConnected", "SocketModeServer"]

_log = logging.getLogger(__name__)

ENVELOPE_KINDS = ("interactive", "slash_commands", "events_api")
#: Slack gives an app 3 seconds to acknowledge an envelope.
ACK_SECONDS = 3.0
LINK_PATH = "/link/"
#: Interactive payloads whose acknowledgement Slack reads (a modal's errors, options).
_ANSWERED_INTERACTIONS = ("view_submission", "block_suggestion")


class NotConnected(Exception):
    """No app is connected to deliver an envelope to."""


class NoAck(TimeoutError):
    """The app did not acknowledge an envelope in time."""


@dataclass
class _Link:
    """One open connection, and a lock so that two deliveries never interleave frames."""

    number: int
    connection: ServerConnection
    send_lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, message: dict[str, Any]) -> None:
        with self.send_lock:
            self.connection.send(json.dumps(message))


@dataclass
class _Pending:
    """An envelope waiting for its acknowledgement."""

    answered: threading.Event = field(default_factory=threading.Event)
    ack: dict[str, Any] | None = None


class SocketModeServer:
    """The Socket Mode WebSocket endpoint of the Slack stand-in.

    ``on_change`` is called (from a connection's thread) whenever a connection opens or
    closes, so the sandbox's page can say whether the bot is connected.
    """

    def __init__(self, app_id: str, on_change: Callable[[], None] | None = None) -> None:
        self.app_id = app_id
        self._on_change = on_change or (lambda: None)
        self._cond = threading.Condition()
        self._tickets: set[str] = set()
        self._links: dict[int, _Link] = {}
        self._numbers = itertools.count(1)
        self._opened = 0
        self._pending: dict[str, _Pending] = {}
        self._deliveries: list[dict[str, Any]] = []
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on ``host``:``port`` (0: a free one) and serve from daemon threads."""
        if self._server is not None:
            raise RuntimeError("the Socket Mode server is already started")
        self._server = serve(
            self._serve,
            host,
            port,
            process_request=self._check_ticket,
            # slack_sdk's built-in client offers no extensions; Slack compresses nothing.
            compression=None,
            server_header=None,
            logger=_log,
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="slack-socket-mode", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Close every connection (code 1001, going away) and stop listening."""
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is not None:
            server.shutdown()
        if thread is not None:
            thread.join(timeout=5)

    @property
    def url(self) -> str:
        """``ws://host:port``; only valid once started."""
        if self._server is None:
            raise RuntimeError("the Socket Mode server is not started")
        host, port = self._server.socket.getsockname()[:2]
        return f"ws://{host!s}:{port}"

    def reset(self) -> None:
        """Forget recorded deliveries (open connections stay: the app is still there)."""
        with self._cond:
            self._deliveries = []

    # ------------------------------------------------------------------ apps.connections.open

    def new_url(self) -> str:
        """A connection URL with a fresh single-use ticket, as ``apps.connections.open``
        answers."""
        ticket = secrets.token_hex(16)
        with self._cond:
            self._tickets.add(ticket)
        return f"{self.url}{LINK_PATH}?ticket={ticket}&app_id={self.app_id}"

    # ------------------------------------------------------------------ for tests and the sandbox

    @property
    def connections(self) -> int:
        """How many connections are open now."""
        with self._cond:
            return len(self._links)

    @property
    def opened(self) -> int:
        """How many connections were ever opened (each greeted with ``hello``)."""
        with self._cond:
            return self._opened

    def wait_for_connections(self, opened: int, timeout: float = 30.0) -> None:
        """Block until ``opened`` connections were opened and one is open; ``NotConnected``
        at the deadline."""
        with self._cond:
            ready = self._cond.wait_for(
                lambda: self._opened >= opened and bool(self._links), timeout
            )
        if not ready:
            raise NotConnected(f"no app connected ({self._opened} opened) after {timeout}s")

    def wait_for_closed(self, open_at_most: int, timeout: float = 30.0) -> None:
        """Block until at most ``open_at_most`` connections are open."""
        with self._cond:
            done = self._cond.wait_for(lambda: len(self._links) <= open_at_most, timeout)
        if not done:
            raise TimeoutError(f"{len(self._links)} connections still open after {timeout}s")

    def deliver(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        timeout: float = ACK_SECONDS,
        retry_attempt: int = 0,
        retry_reason: str = "",
    ) -> dict[str, Any]:
        """Send one request as Slack does and wait for its acknowledgement; return the ack's
        ``payload`` (``{}`` when it has none).

        It goes down the newest open connection (waiting for one until the deadline).
        ``retry_attempt``/``retry_reason`` mark an Events API redelivery.

        Raises:
            NotConnected: no connection opened before the deadline.
            NoAck: no acknowledgement arrived before the deadline.
        """
        if kind not in ENVELOPE_KINDS:
            raise ValueError(f"envelope type must be one of {ENVELOPE_KINDS}, not {kind!r}")
        envelope = _envelope(kind, payload, retry_attempt, retry_reason)
        pending = _Pending()
        deadline = time.monotonic() + timeout
        with self._cond:
            self._pending[envelope["envelope_id"]] = pending
        try:
            self._send(envelope, deadline)
            if not pending.answered.wait(max(0.0, deadline - time.monotonic())):
                raise NoAck(f"no acknowledgement of a {kind} envelope within {timeout}s")
        finally:
            with self._cond:
                self._pending.pop(envelope["envelope_id"], None)
                self._deliveries.append({"envelope": envelope, "ack": pending.ack})
        payload_back = (pending.ack or {}).get("payload")
        return dict(payload_back) if isinstance(payload_back, dict) else {}

    def deliveries(self) -> list[dict[str, Any]]:
        """Every delivery since :meth:`reset`: ``{"envelope", "ack"}`` (``ack`` None if none
        came)."""
        with self._cond:
            return copy.deepcopy(self._deliveries)

    def disconnect(self, reason: str = "refresh_requested") -> int:
        """Send ``{"type": "disconnect"}`` down every open connection, as Slack does before it
        rotates them; returns how many were told. The app opens a new one and closes these."""
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "stand-in"}}
        with self._cond:
            links = list(self._links.values())
        for link in links:
            with contextlib.suppress(ConnectionClosed):
                link.send(message)
        return len(links)

    # ------------------------------------------------------------------ connection threads

    def _check_ticket(self, connection: ServerConnection, request: Request) -> Response | None:
        """Refuse a handshake without a ticket from ``apps.connections.open`` (used once)."""
        parts = urlsplit(request.path)
        ticket = parse_qs(parts.query).get("ticket", [""])[0]
        with self._cond:
            known = parts.path == LINK_PATH and ticket in self._tickets
            self._tickets.discard(ticket)
        if not known:
            return connection.respond(HTTPStatus.UNAUTHORIZED, "invalid or used ticket\n")
        return None

    def _serve(self, connection: ServerConnection) -> None:
        with self._cond:
            link = _Link(next(self._numbers), connection)
            self._links[link.number] = link
            self._opened += 1
            hello = _hello(len(self._links), self.app_id)
        try:
            link.send(hello)
            self._notify()
            for message in connection:
                self._take_ack(message)
        except ConnectionClosed:
            pass
        finally:
            with self._cond:
                self._links.pop(link.number, None)
            self._notify()

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()
        self._on_change()

    def _take_ack(self, message: str | bytes) -> None:
        try:
            ack = json.loads(message)
            envelope_id = ack["envelope_id"]
        except (ValueError, TypeError, KeyError):
            _log.warning("the app sent something that is not an acknowledgement: %.200r", message)
            return
        with self._cond:
            pending = self._pending.get(envelope_id)
        if pending is None:
            _log.warning("acknowledgement of an unknown or late envelope %r", envelope_id)
            return
        pending.ack = ack
        pending.answered.set()

    def _send(self, envelope: dict[str, Any], deadline: float) -> None:
        """Send down the newest open connection; one closing under us is skipped."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._links), deadline - time.monotonic())
                if not self._links:
                    raise NotConnected("no app is connected in Socket Mode")
                link = self._links[max(self._links)]
            try:
                link.send(envelope)
                return
            except ConnectionClosed:
                with self._cond:
                    self._links.pop(link.number, None)


def _envelope(
    kind: str, payload: dict[str, Any], retry_attempt: int, retry_reason: str
) -> dict[str, Any]:
    """A request as Slack wraps it for Socket Mode."""
    envelope: dict[str, Any] = {
        "envelope_id": secrets.token_hex(8) + "-" + secrets.token_hex(4),
        "type": kind,
        "payload": payload,
        "accepts_response_payload": kind == "slash_commands"
        or (kind == "interactive" and payload.get("type") in _ANSWERED_INTERACTIONS),
    }
    if kind == "events_api":
        envelope.update(retry_attempt=retry_attempt, retry_reason=retry_reason)
    return envelope


def _hello(connections: int, app_id: str) -> dict[str, Any]:
    return {
        "type": "hello",
        "num_connections": connections,
        "debug_info": {
            "host": "applink-stand-in",
            "build_number": 1,
            "approximate_connection_time": 18060,
        },
        "connection_info": {"app_id": app_id},
    }
