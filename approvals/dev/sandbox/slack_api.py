"""A local stand-in for the Slack Web API and for response URLs.

It serves the tests (``tests/slack_standin.py`` re-exports it) and, extended with a channel's
state and a web page, the local Slack sandbox of ``approvals dev`` (``workspace.py``).

Why it exists: the project's rule is that everything crossing a network boundary is tested
against the real thing, and a mocked ``WebClient`` proves nothing about what Slack receives.
So the real ``slack_sdk.WebClient`` (and Bolt's ``respond()``) talk HTTP to this server, which
answers the way Slack does, records what it was sent, and refuses what Slack would refuse
(bad auth, over-long block lists, unknown messages), so that a bot bug fails a test instead of
failing in production.

Usage::

    standin = SlackStandIn().start()
    client = WebClient(token=standin.token, base_url=standin.base_url)
    client.chat_postMessage(channel="C1", text="hi")
    assert standin.messages("C1")[0].text == "hi"
    standin.stop()

Supported methods (``POST`` or ``GET /api/<method>``, JSON or form bodies, query strings):
``apps.connections.open``, ``auth.test``, ``chat.postMessage``, ``chat.update``,
``chat.postEphemeral``, ``views.open``, ``views.update``, ``views.publish``,
``usergroups.users.list``, ``conversations.info``, ``conversations.members`` (paged with
``limit`` and ``cursor`` as Slack pages it) and ``users.info``. Anything else answers
``unknown_method``. ``multipart/form-data`` bodies (file uploads) are not understood and
answer ``invalid_form_data``. A missing token answers
``not_authed``, a wrong one ``invalid_auth``. Beyond the 50-block limit it refuses duplicate or
over-long ``block_id``s, and views over 100 blocks, of the wrong type, or with a modal title
over 24 characters. ``chat.postMessage`` to a user id answers that user's DM channel
(:meth:`SlackStandIn.dm_channel`), and ``chat.update`` then needs the DM id, as in Slack.

Slack's pace: given ``pace=Pace(per_second, burst)`` (or :meth:`SlackStandIn.set_pace`),
``chat.postMessage`` keeps Slack's per-channel limit, about one message a second with short
bursts: a post above it answers HTTP 429 ``ratelimited`` with a ``Retry-After`` header, as
Slack does when it refuses (real Slack may also accept the post and hide it, which no test
could see). Without a pace, posts are never refused for their rate.

Response URLs come from :meth:`SlackStandIn.new_response_url`; like Slack's they accept JSON
bodies, answer ``ok`` as text, refuse a sixth use (``404 used_url``) and, when bound to a posted
message, apply ``replace_original`` to it.

Socket Mode: ``apps.connections.open``, called with the app-level token (:attr:`app_token`;
the bot token there, or the app token elsewhere, answers ``not_allowed_token_type``), answers
the URL of a local WebSocket (``socket_mode.py``). :meth:`SlackStandIn.deliver` sends a click,
a slash command or an event down it as Slack's envelope and returns the app's acknowledgement;
``socket_mode.disconnect()`` asks the app to reconnect, as Slack does when it rotates servers.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import itertools
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from approvals.dev.sandbox.socket_mode import ACK_SECONDS, SocketModeServer

__all__ = ["ApiError", "Message", "Pace", "Reply", "SlackStandIn"]

T = TypeVar("T")

_log = logging.getLogger(__name__)

MESSAGE_BLOCK_LIMIT = 50
"""Blocks per message (chat.postMessage, chat.update, response URLs)."""
VIEW_BLOCK_LIMIT = 100
"""Blocks per modal or Home tab."""
BLOCK_ID_LIMIT = 255
MODAL_TITLE_LIMIT = 24
PRIVATE_METADATA_LIMIT = 3000
CALLBACK_ID_LIMIT = 255
RESPONSE_URL_USES = 5
"""Slack lets a response_url be used five times (within 30 minutes)."""

_BOT_ID = "B0001"
_APP_ID = "A0001"
_SCOPES = (
    "channels:read,chat:write,chat:write.public,commands,groups:read,im:write,usergroups:read,"
    "users:read"
)
_JSON_STRING_FIELDS = ("blocks", "view", "attachments")
_FIRST_TS_SECONDS = 1_700_000_000


@dataclass
class Message:
    """A message the bot posted, as Slack holds it now (``updates`` keeps the history)."""

    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None
    user: str
    updates: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Pace:
    """Slack's per-channel pace for ``chat.postMessage``: ``per_second`` posts a second, and
    ``burst`` of them back to back in a channel that has been quiet."""

    per_second: float
    burst: int = 1


@dataclass
class _Fault:
    """One queued failure for :meth:`SlackStandIn.fail_next`."""

    status: int
    retry_after: int
    error: str | None


class ApiError(Exception):
    """Raised by a method implementation to answer ``{"ok": false, "error": ...}``."""

    def __init__(self, error: str, detail: str | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.detail = detail


@dataclass
class Reply:
    """An HTTP answer, built by the stand-in and written by the request handler."""

    status: int
    body: bytes
    content_type: str = "application/json; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(
        cls, data: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
    ) -> Reply:
        return cls(status, json.dumps(data).encode(), headers=headers or {})

    @classmethod
    def text(cls, text: str, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
        return cls(status, text.encode(), "text/plain; charset=utf-8", headers or {})


class SlackStandIn:
    """A threaded HTTP server that answers like the Slack Web API, and records what it got.

    All recorded state is guarded by one lock and handed out as deep copies, so tests can read
    it while the bot is still calling in from other threads.
    """

    def __init__(
        self,
        token: str = "xoxb-test-token",
        app_token: str = "xapp-1-A0001-test-app-token",
        bot_user_id: str = "UBOT",
        team_id: str = "T0001",
        usergroups: dict[str, list[str]] | None = None,
        channel_members: dict[str, list[str]] | None = None,
        pace: Pace | None = None,
    ) -> None:
        self.token = token
        self._initial_pace = pace
        self.app_token = app_token
        self.bot_user_id = bot_user_id
        self.team_id = team_id
        self._initial_usergroups = dict(usergroups or {})
        self.usergroups: dict[str, list[str]] = dict(self._initial_usergroups)
        self._initial_channel_members = dict(channel_members or {})
        #: Who ``conversations.members`` lists per channel id (unknown: ``channel_not_found``).
        self.channel_members: dict[str, list[str]] = dict(self._initial_channel_members)
        self._lock = threading.RLock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        # Never reset: a response URL left over from an earlier test must not alias a new one.
        self._response_counter = itertools.count(1)
        #: Socket Mode: ``apps.connections.open`` points the app at this WebSocket server.
        self.socket_mode = SocketModeServer(_APP_ID, on_change=self._socket_changed)
        self._methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "apps.connections.open": self._apps_connections_open,
            "auth.test": self._auth_test,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "views.open": self._views_open,
            "views.update": self._views_update,
            "views.publish": self._views_publish,
            "usergroups.users.list": self._usergroups_users_list,
            "conversations.info": self._conversations_info,
            "conversations.members": self._conversations_members,
            "users.info": self._users_info,
        }
        self.reset()

    # ------------------------------------------------------------------ lifecycle

    def start(self, host: str = "127.0.0.1", port: int = 0) -> SlackStandIn:
        """Bind ``host`` on ``port`` (0: a free one) and serve from daemon threads.

        A thread per connection, kept open as long as the client wants (the sandbox's page
        long-polls). Socket Mode's WebSocket listens on another free port of ``host``.
        """
        if self._server is not None:
            raise RuntimeError("SlackStandIn already started")
        server = _Server((host, port), _Handler)
        server.standin = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="slack-standin",
            daemon=True,
        )
        self._thread.start()
        self.socket_mode.start(host)
        return self

    def stop(self) -> None:
        """Stop serving and close the sockets (WebSocket connections too); safe to call twice."""
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None:
            return
        self.socket_mode.stop()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> SlackStandIn:
        return self.start() if self._server is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``; only valid once started."""
        if self._server is None:
            raise RuntimeError("SlackStandIn is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def base_url(self) -> str:
        """What ``WebClient(base_url=...)`` and ``SLACK_API_URL`` take (ends with ``/api/``)."""
        return self.url + "/api/"

    def reset(self) -> None:
        """Forget every recorded call, message, view and response, and all queued faults.

        ``usergroups`` and ``channel_members`` go back to what the constructor was given, so
        one test's groups cannot leak into the next.
        """
        with self._lock:
            self._calls: list[dict[str, Any]] = []
            self._messages: dict[tuple[str, str], Message] = {}
            self._ephemerals: list[dict[str, Any]] = []
            self._responses: list[dict[str, Any]] = []
            self._views: list[dict[str, Any]] = []
            self._live_views: dict[str, dict[str, Any]] = {}
            self._home_view_ids: dict[str, str] = {}
            self._faults: dict[str, list[_Fault]] = {}
            self._delays: dict[str, list[float]] = {}
            self._response_urls: dict[int, dict[str, Any]] = {}
            self._ts_counter = itertools.count(1)
            self._view_counter = itertools.count(1)
            self.usergroups = dict(self._initial_usergroups)
            self.channel_members = dict(self._initial_channel_members)
            self._pace = self._initial_pace
            #: Per channel: when its next post would be on time (the cell rate algorithm).
            self._next_post: dict[str, float] = {}
        self.socket_mode.reset()

    def new_response_url(self, *, channel: str | None = None, message_ts: str | None = None) -> str:
        """Return a fresh response URL that records what is POSTed to it.

        Bind it to a posted message with ``channel``/``message_ts`` (as Slack does for a
        button on that message) and ``replace_original`` bodies update that message (the
        body, with ``response_url`` added, is appended to its ``updates``). URLs stay unique
        across :meth:`reset`, so a late post from an earlier test answers 404.
        """
        with self._lock:
            n = next(self._response_counter)
            self._response_urls[n] = {"channel": channel, "ts": message_ts, "uses": 0}
        return f"{self.url}/response/{n}"

    def deliver(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        timeout: float = ACK_SECONDS,
        retry_attempt: int = 0,
        retry_reason: str = "",
    ) -> dict[str, Any]:
        """Deliver a request to the app connected in Socket Mode and wait for its ack.

        ``kind`` is the envelope type: ``"interactive"`` (a ``block_actions`` or
        ``view_submission`` payload), ``"slash_commands"`` (the command's fields) or
        ``"events_api"`` (an ``event_callback``); ``tests/slack_requests.py`` builds all three.
        Returns the ack's payload (``{}`` when it has none), for example a view submission's
        ``{"response_action": "errors", ...}``. See ``socket_mode.SocketModeServer.deliver``.

        Raises:
            NotConnected: no app connected before ``timeout``.
            NoAck: the app did not acknowledge within ``timeout``.
        """
        return self.socket_mode.deliver(
            kind, payload, timeout=timeout, retry_attempt=retry_attempt, retry_reason=retry_reason
        )

    def _socket_changed(self) -> None:
        """A Socket Mode connection opened or closed (the sandbox tells its page)."""

    @staticmethod
    def dm_channel(user_id: str) -> str:
        """The DM channel id Slack answers when ``chat.postMessage`` is given a user id."""
        return "D" + user_id[1:]

    # ------------------------------------------------------------------ recorded state

    def calls(self, method: str | None = None) -> list[dict[str, Any]]:
        """Every API call in order: ``{"method", "args", "status", "error", "at"}`` (``at``:
        when it was answered, on ``time.monotonic()``'s clock)."""
        with self._lock:
            found = [c for c in self._calls if method is None or c["method"] == method]
            return copy.deepcopy(found)

    def messages(self, channel: str | None = None) -> list[Message]:
        """Messages posted with chat.postMessage (thread replies too), in post order."""
        wanted = None if channel is None else self._resolve_channel(channel)
        with self._lock:
            found = [m for m in self._messages.values() if wanted in (None, m.channel)]
            return copy.deepcopy(found)

    def message(self, channel: str, ts: str) -> Message:
        """The message at ``(channel, ts)`` as it is now; raises ``KeyError`` if never posted."""
        key = (self._resolve_channel(channel), ts)
        with self._lock:
            if key not in self._messages:
                raise KeyError(f"no message {ts} in {channel}; {self._summary()}")
            return copy.deepcopy(self._messages[key])

    def thread(self, channel: str, ts: str) -> list[Message]:
        """Replies posted with ``thread_ts == ts`` in ``channel``, in order."""
        return [m for m in self.messages(channel) if m.thread_ts == ts and m.ts != ts]

    def ephemerals(self, user: str | None = None) -> list[dict[str, Any]]:
        """Arguments of accepted chat.postEphemeral calls, optionally for one user."""
        with self._lock:
            found = [e for e in self._ephemerals if user is None or e.get("user") == user]
            return copy.deepcopy(found)

    def responses(self) -> list[dict[str, Any]]:
        """Bodies accepted by response URLs, each with ``response_url`` added."""
        with self._lock:
            return copy.deepcopy(self._responses)

    def views(self) -> list[dict[str, Any]]:
        """Accepted views.* calls: ``{"method", "view", "trigger_id"|"view_id"|"user_id"}``
        (views.open's with the ``view_id`` it gave the modal)."""
        with self._lock:
            return copy.deepcopy(self._views)

    def wait_for(
        self, predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02
    ) -> T:
        """Poll ``predicate`` until it returns something truthy, and return that.

        The bot answers Slack before doing its work, so tests must wait for the effects.
        An exception from the predicate (say ``KeyError`` from :meth:`message`) counts as
        "not yet". At the deadline this raises ``AssertionError`` listing what was recorded.
        """
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while True:
            try:
                result = predicate()
            except Exception as exc:
                last_error = exc
            else:
                if result:
                    return result
            if time.monotonic() >= deadline:
                break
            time.sleep(interval)
        name = getattr(predicate, "__qualname__", repr(predicate))
        lines = [f"wait_for({name}) still false after {timeout}s"]
        if last_error is not None:
            lines.append(f"last error from predicate: {last_error!r}")
        with self._lock:
            lines.append(self._summary())
        raise AssertionError("\n".join(lines))

    # ------------------------------------------------------------------ fault injection

    def fail_next(
        self,
        method: str,
        count: int = 1,
        status: int = 429,
        retry_after: int = 1,
        error: str | None = None,
    ) -> None:
        """Make the next ``count`` calls to ``method`` fail.

        For API methods: HTTP 429 with ``Retry-After`` (or another plain-text HTTP status),
        or, when ``error`` is given, HTTP 200 ``{"ok": false, "error": error}``. Use the method
        name ``"response_url"`` to fail response-URL posts instead; there ``error`` becomes the
        plain-text body of the HTTP ``status`` answer, as Slack's are.
        """
        if count < 1:
            raise ValueError("count must be at least 1")
        if method != "response_url" and method not in self._methods:
            raise ValueError(f"the stand-in does not implement {method!r}")
        with self._lock:
            queue = self._faults.setdefault(method, [])
            queue.extend(_Fault(status, retry_after, error) for _ in range(count))

    def delay_next(self, method: str, seconds: float, count: int = 1) -> None:
        """Answer the next ``count`` calls to ``method`` only after ``seconds`` (a slow Slack)."""
        if method not in self._methods:
            raise ValueError(f"the stand-in does not implement {method!r}")
        with self._lock:
            self._delays.setdefault(method, []).extend([seconds] * count)

    def set_pace(self, pace: Pace | None) -> None:
        """Keep ``chat.postMessage`` to ``pace`` in each channel from now on (None: never
        refuse a post for its rate); :meth:`reset` goes back to the constructor's."""
        with self._lock:
            self._pace = pace
            self._next_post = {}

    def _over_pace(self, method: str, args: dict[str, Any]) -> float:
        """Seconds a ``chat.postMessage`` is early for its channel's pace (0: on time, and
        counted); every other call is on time."""
        channel = args.get("channel")
        if method != "chat.postMessage" or not isinstance(channel, str) or not channel:
            return 0.0
        with self._lock:
            pace = self._pace
            if pace is None:
                return 0.0
            interval = 1 / pace.per_second
            now = time.monotonic()
            key = self._resolve_channel(channel)
            due = max(self._next_post.get(key, now), now)
            early = due - (max(1, pace.burst) - 1) * interval - now
            if early > 0:
                return early
            self._next_post[key] = due + interval
            return 0.0

    def delays_left(self, method: str) -> int:
        """How many of the delays asked for ``method`` no call has reached yet: a test waits
        for zero to know the slow call is in flight."""
        with self._lock:
            return len(self._delays.get(method, []))

    # ------------------------------------------------------------------ HTTP entry points

    def _reply_to(self, verb: str, path: str, headers: Any, body: bytes) -> Reply:
        """The reply to one HTTP request, whichever server read it (a 500 if the stand-in
        fails)."""
        try:
            return self._handle(verb, path, headers, body)
        except Exception:
            _log.exception("Slack stand-in failed on %s %s", verb, path)
            return Reply.json({"ok": False, "error": "fatal_error"}, 500)

    def _handle(self, verb: str, path: str, headers: Any, body: bytes) -> Reply:
        """Route one HTTP request; called from a server thread."""
        parts = urlsplit(path)
        if parts.path.startswith("/api/"):
            return self._handle_api(parts.path[len("/api/") :], parts.query, headers, body)
        if parts.path.startswith("/response/"):
            if verb != "POST":
                return Reply.text("method_not_allowed", 405)
            return self._handle_response_url(parts.path[len("/response/") :], body)
        return self._handle_other(verb, path, headers, body)

    def _handle_other(self, verb: str, path: str, headers: Any, body: bytes) -> Reply:
        """Paths that are not Slack's; a subclass (the sandbox's web page) may serve them."""
        return Reply.text("not_found", 404)

    def _handle_api(self, method: str, query: str, headers: Any, body: bytes) -> Reply:
        args: dict[str, Any] = {}
        reply: Reply
        try:
            args = _parse_args(str(headers.get("Content-Type") or ""), query, body)
            form_token = args.pop("token", None)
            if method not in self._methods:
                raise ApiError("unknown_method")
            with self._lock:
                delays = self._delays.get(method)
                delay = delays.pop(0) if delays else 0.0
            time.sleep(delay)  # outside the lock: other calls are answered meanwhile
            self._check_auth(method, str(headers.get("Authorization") or ""), form_token)
            fault = self._take_fault(method)
            if fault is not None and fault.error is not None:
                raise ApiError(fault.error)
            early = 0.0 if fault is not None else self._over_pace(method, args)
            if fault is not None:
                reply = _fault_reply(fault, api=True)
            elif early > 0:
                reply = _fault_reply(_Fault(429, math.ceil(early), None), api=True)
            else:
                reply = Reply.json(self._methods[method](args), headers={"X-OAuth-Scopes": _SCOPES})
        except ApiError as exc:
            data: dict[str, Any] = {"ok": False, "error": exc.error}
            if exc.detail:
                data["response_metadata"] = {"messages": [exc.detail]}
            reply = Reply.json(data)
        error = _reply_error(reply)
        with self._lock:
            self._calls.append(
                {
                    "method": method,
                    "args": args,
                    "status": reply.status,
                    "error": error,
                    "at": time.monotonic(),
                }
            )
        return reply

    def _check_auth(self, method: str, authorization: str, form_token: Any) -> None:
        """The bot token for every method but ``apps.connections.open``, which takes the
        app-level token; the other kind answers ``not_allowed_token_type``, as in Slack."""
        token = authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else None
        token = token or form_token
        if not token:
            raise ApiError("not_authed")
        wanted, other = (self.token, self.app_token)
        if method == "apps.connections.open":
            wanted, other = other, wanted
        if token == other:
            raise ApiError("not_allowed_token_type")
        if token != wanted:
            raise ApiError("invalid_auth")

    def _take_fault(self, method: str) -> _Fault | None:
        with self._lock:
            queue = self._faults.get(method)
            return queue.pop(0) if queue else None

    def _handle_response_url(self, n_text: str, body: bytes) -> Reply:
        with self._lock:
            bound = self._response_urls.get(int(n_text)) if n_text.isdigit() else None
        if bound is None:
            return Reply.text("no_service", 404)
        fault = self._take_fault("response_url")
        if fault is not None:
            return _fault_reply(fault, api=False)
        try:
            payload = json.loads(body or b"null")
        except ValueError:
            return Reply.text("invalid_payload", 400)
        if not isinstance(payload, dict):
            return Reply.text("invalid_payload", 400)
        _decode_json_strings(payload)
        try:
            if "blocks" in payload:
                _check_blocks(payload["blocks"], MESSAGE_BLOCK_LIMIT)
            if not payload.get("delete_original"):
                _require_content(payload)
        except ApiError as exc:
            return Reply.text(exc.error, 400)
        url = f"{self.url}/response/{n_text}"
        with self._lock:
            if bound["uses"] >= RESPONSE_URL_USES:
                return Reply.text("used_url", 404)
            bound["uses"] += 1
            self._responses.append({**payload, "response_url": url})
            key = (bound["channel"], bound["ts"])
            if payload.get("replace_original") and key in self._messages:
                self._apply_update(self._messages[key], {**payload, "response_url": url})
        return Reply.text("ok")

    # ------------------------------------------------------------------ API methods

    def _apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": self.socket_mode.new_url()}

    def _auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://test.slack.com/",
            "team": "Test",
            "user": "approvals",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": _BOT_ID,
            "is_enterprise_install": False,
        }

    def _chat_post_message(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._resolve_channel(_require(args, "channel", "channel_not_found"))
        _require_content(args)
        _check_blocks(args.get("blocks"), MESSAGE_BLOCK_LIMIT)
        thread_ts = args.get("thread_ts") or None
        with self._lock:
            ts = self._next_ts()
            message = Message(
                channel=channel,
                ts=ts,
                text=str(args.get("text") or ""),
                blocks=list(args.get("blocks") or []),
                thread_ts=None if thread_ts is None else str(thread_ts),
                user=self.bot_user_id,
            )
            self._messages[(channel, ts)] = message
            return {"ok": True, "channel": channel, "ts": ts, "message": self._as_api(message)}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = _require(args, "channel", "channel_not_found")
        if channel[:1] in ("U", "W"):
            raise ApiError("channel_not_found", "chat.update needs the DM id (D...), not a user")
        ts = _require(args, "ts", "message_not_found")
        _require_content(args)
        _check_blocks(args.get("blocks"), MESSAGE_BLOCK_LIMIT)
        with self._lock:
            message = self._messages.get((channel, ts))
            if message is None:
                raise ApiError("message_not_found")
            self._apply_update(message, args)
            return {
                "ok": True,
                "channel": channel,
                "ts": ts,
                "text": message.text,
                "message": self._as_api(message),
            }

    def _chat_post_ephemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        _require(args, "channel", "channel_not_found")
        _require(args, "user", "user_not_found")
        _require_content(args)
        _check_blocks(args.get("blocks"), MESSAGE_BLOCK_LIMIT)
        with self._lock:
            ts = self._next_ts()
            self._ephemerals.append(copy.deepcopy(args))
        return {"ok": True, "message_ts": ts}

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        trigger_id = _require(args, "trigger_id", "invalid_arguments")
        view = _check_view(args.get("view"), ("modal",))
        with self._lock:
            live = self._store_view(self._new_view_id(), view)
            self._views.append({"method": "views.open", "view": view, "trigger_id": trigger_id,
                                "view_id": live["id"]})  # fmt: skip
            return {"ok": True, "view": copy.deepcopy(live)}

    def _views_update(self, args: dict[str, Any]) -> dict[str, Any]:
        view = _check_view(args.get("view"), ("modal", "home"))
        view_id, external_id = args.get("view_id"), args.get("external_id")
        with self._lock:
            if not view_id and external_id:
                view_id = next(
                    (k for k, v in self._live_views.items() if v["external_id"] == external_id),
                    None,
                )
            elif not view_id:
                raise ApiError("invalid_arguments", "view_id or external_id is required")
            current = self._live_views.get(str(view_id))
            if current is None:
                raise ApiError("not_found")
            if args.get("hash") and args["hash"] != current["hash"]:
                raise ApiError("hash_conflict")
            live = self._store_view(str(view_id), view)
            record = {"method": "views.update", "view": view, "view_id": view_id}
            if external_id:
                record["external_id"] = external_id
            self._views.append(record)
            return {"ok": True, "view": copy.deepcopy(live)}

    def _views_publish(self, args: dict[str, Any]) -> dict[str, Any]:
        user_id = _require(args, "user_id", "invalid_arguments")
        view = _check_view(args.get("view"), ("home",))
        with self._lock:
            view_id = self._home_view_ids.get(user_id) or self._new_view_id()
            self._home_view_ids[user_id] = view_id
            live = self._store_view(view_id, view)
            self._views.append({"method": "views.publish", "view": view, "user_id": user_id})
            return {"ok": True, "view": copy.deepcopy(live)}

    def _usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        group = _require(args, "usergroup", "invalid_arguments")
        with self._lock:
            users = self.usergroups.get(group)
            if users is None:
                raise ApiError("no_such_subteam")
            return {"ok": True, "users": list(users)}

    def _conversations_info(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = _require(args, "channel", "channel_not_found")
        is_im = channel.startswith("D")
        info: dict[str, Any] = {
            "id": channel,
            "name": channel.lower(),
            "is_channel": not is_im,
            "is_im": is_im,
            "is_private": False,
            "is_archived": False,
            "is_member": True,
            "created": _FIRST_TS_SECONDS,
        }
        if is_im:
            info["user"] = "U" + channel[1:]
        return {"ok": True, "channel": info}

    def _conversations_members(self, args: dict[str, Any]) -> dict[str, Any]:
        """Slack's shape: ``members`` and ``response_metadata.next_cursor`` ("" on the last
        page); ``limit`` defaults to 100 and is capped at 1000; cursors are opaque base64."""
        channel = _require(args, "channel", "channel_not_found")
        try:
            limit = min(max(int(args.get("limit") or 100), 1), 1000)
        except (TypeError, ValueError):
            raise ApiError("invalid_limit") from None
        start = 0
        cursor = args.get("cursor")
        if cursor:
            try:
                decoded = base64.b64decode(str(cursor), validate=True).decode()
                kind, _, offset = decoded.partition(":")
                start = int(offset)
            except (ValueError, UnicodeDecodeError):
                raise ApiError("invalid_cursor") from None
            if kind != "offset" or start < 0:
                raise ApiError("invalid_cursor")
        with self._lock:
            members = self.channel_members.get(channel)
            if members is None:
                raise ApiError("channel_not_found")
            page = list(members[start : start + limit])
            more = start + limit < len(members)
        next_cursor = base64.b64encode(f"offset:{start + limit}".encode()).decode() if more else ""
        return {"ok": True, "members": page, "response_metadata": {"next_cursor": next_cursor}}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = _require(args, "user", "user_not_found")
        real_name = f"User {user}"
        return {
            "ok": True,
            "user": {
                "id": user,
                "team_id": self.team_id,
                "name": user.lower(),
                "real_name": real_name,
                "deleted": False,
                "is_bot": user == self.bot_user_id,
                "tz": "UTC",
                "profile": {"real_name": real_name, "display_name": real_name},
            },
        }

    # ------------------------------------------------------------------ helpers (lock held)

    def _next_ts(self) -> str:
        n = next(self._ts_counter) * 100
        return f"{_FIRST_TS_SECONDS + n // 1_000_000}.{n % 1_000_000:06d}"

    def _new_view_id(self) -> str:
        return f"V{next(self._view_counter):04d}"

    def _store_view(self, view_id: str, view: dict[str, Any]) -> dict[str, Any]:
        live = {
            "id": view_id,
            "team_id": self.team_id,
            "app_id": _APP_ID,
            "bot_id": _BOT_ID,
            "private_metadata": "",
            "callback_id": "",
            "external_id": "",
            "clear_on_close": False,
            "notify_on_close": False,
            "previous_view_id": None,
            "root_view_id": view_id,
            **copy.deepcopy(view),
            "state": {"values": {}},
            "hash": f"{time.time():.6f}.{view_id}",
        }
        self._live_views[view_id] = live
        return live

    def _apply_update(self, message: Message, update: dict[str, Any]) -> None:
        if "text" in update:
            message.text = str(update["text"] or "")
        if "blocks" in update:
            message.blocks = list(update["blocks"] or [])
        message.updates.append(copy.deepcopy(update))

    def _as_api(self, message: Message) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": "message",
            "user": message.user,
            "bot_id": _BOT_ID,
            "app_id": _APP_ID,
            "team": self.team_id,
            "ts": message.ts,
            "text": message.text,
            # Not copied: the reply is serialized at once, and an update replaces a message's
            # block list instead of changing it in place.
            "blocks": message.blocks,
        }
        if message.thread_ts:
            data["thread_ts"] = message.thread_ts
        return data

    def _resolve_channel(self, channel: str) -> str:
        return self.dm_channel(channel) if channel[:1] in ("U", "W") else channel

    def _summary(self) -> str:
        lines = [f"recorded calls ({len(self._calls)}):"]
        for i, call in enumerate(self._calls, 1):
            outcome = "ok" if call["error"] is None else call["error"]
            target = call["args"].get("channel") or call["args"].get("user") or ""
            lines.append(f"  {i}. {call['method']} {target} -> {call['status']} {outcome}")
        lines.append(f"response_url posts: {len(self._responses)}")
        return "\n".join(lines)


# ---------------------------------------------------------------------- HTTP plumbing


#: The largest request body read: Slack's payloads (views) are a few hundred kB at most.
MAX_BODY_BYTES = 4 * 1024 * 1024


class _Server(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` (daemon threads) that knows its stand-in."""

    #: The socketserver default is 5: a burst of calls from a few workers overflowed it, and
    #: the kernel dropped the connection until the client's retry a whole second later.
    #: Slack's own front end never refuses a connection that way.
    request_queue_size = 1024

    standin: SlackStandIn

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that left before its answer was written (a page closed or reloaded) is
        not an error worth a traceback; anything else is."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Reads the whole request, lets the stand-in answer it, writes the answer.

    A method HTTP defines but the stand-in does not serve gets 405 (``http.server`` answers
    501 to any method without a ``do_`` handler, which is right only for methods it does
    not recognize); a body whose length is not a number, too big, or chunked gets a 4xx.
    """

    protocol_version = "HTTP/1.1"
    timeout = 30
    server: _Server

    def do_POST(self) -> None:
        self._serve("POST")

    def do_GET(self) -> None:
        self._serve("GET")

    def _not_allowed(self) -> None:
        self._write(Reply.text("method_not_allowed", 405, {"Allow": "GET, POST"}))

    do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed

    def _serve(self, verb: str) -> None:
        body = self._body()
        if isinstance(body, Reply):
            self.close_connection = True  # what is left of the body is not read
            self._write(body)
            return
        self._write(self.server.standin._reply_to(verb, self.path, self.headers, body))

    def _body(self) -> bytes | Reply:
        if self.headers.get("Transfer-Encoding"):
            return Reply.text("length_required", 411)
        declared = str(self.headers.get("Content-Length") or "0").strip()
        if not (declared.isascii() and declared.isdigit()):
            return Reply.text("invalid_content_length", 400)
        if int(declared) > MAX_BODY_BYTES:
            return Reply.text("request_too_large", 413)
        return self.rfile.read(int(declared)) if int(declared) else b""

    def _write(self, reply: Reply) -> None:
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left (a page that was closed or reloaded)

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: test output should show the test's failures, not access logs."""


# ---------------------------------------------------------------------- pure helpers


def _parse_args(content_type: str, query: str, body: bytes) -> dict[str, Any]:
    """Merge query-string and body arguments the way Slack accepts them."""
    args: dict[str, Any] = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
    if body:
        if content_type.startswith("multipart/"):
            raise ApiError("invalid_form_data", "the stand-in does not parse multipart bodies")
        if content_type.startswith("application/json"):
            try:
                parsed = json.loads(body)
            except ValueError as exc:
                raise ApiError("invalid_json") from exc
            if not isinstance(parsed, dict):
                raise ApiError("invalid_json")
            args.update(parsed)
        else:
            try:
                form = parse_qs(body.decode("utf-8"), keep_blank_values=True)
            except UnicodeDecodeError as exc:
                raise ApiError("invalid_form_data", "the body is not UTF-8") from exc
            args.update({k: v[0] for k, v in form.items()})
    _decode_json_strings(args)
    return args


def _decode_json_strings(args: dict[str, Any]) -> None:
    """Form bodies carry blocks/view/attachments as JSON strings; turn them into data."""
    for key in _JSON_STRING_FIELDS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            # Undecodable JSON stays a string, which _check_blocks/_check_view then refuse.
            with contextlib.suppress(ValueError):
                args[key] = json.loads(value)


def _require(args: dict[str, Any], name: str, error: str) -> str:
    value = args.get(name)
    if value in (None, ""):
        raise ApiError(error, f"missing {name}")
    return str(value)


def _require_content(args: dict[str, Any]) -> None:
    if not (args.get("text") or args.get("blocks") or args.get("attachments")):
        raise ApiError("no_text")


def _check_blocks(blocks: Any, limit: int) -> None:
    """Refuse block lists Slack would refuse, so tests see what production would."""
    if blocks is None:
        return
    if not isinstance(blocks, list):
        raise ApiError("invalid_blocks_format", "blocks must be a JSON array")
    if len(blocks) > limit:
        raise ApiError("invalid_blocks", f"no more than {limit} items allowed [json-pointer:]")
    seen: set[str] = set()
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise ApiError("invalid_blocks", f"block {i} must be an object with a type")
        block_id = block.get("block_id")
        if block_id is None:
            continue
        if not isinstance(block_id, str) or not 0 < len(block_id) <= BLOCK_ID_LIMIT:
            raise ApiError("invalid_blocks", f"block {i} has an invalid block_id")
        if block_id in seen:
            raise ApiError("invalid_blocks", f"duplicate block_id {block_id!r}")
        seen.add(block_id)


def _check_view(view: Any, types: tuple[str, ...]) -> dict[str, Any]:
    """Check the parts of a view Slack validates that a bot most often gets wrong."""
    if not isinstance(view, dict):
        raise ApiError("invalid_arguments", "view must be a JSON object")
    if view.get("type") not in types:
        raise ApiError("invalid_arguments", f"view type must be one of {types}")
    _check_blocks(view.get("blocks", []), VIEW_BLOCK_LIMIT)
    if view["type"] == "modal":
        title = (view.get("title") or {}).get("text")
        if not isinstance(title, str) or not 0 < len(title) <= MODAL_TITLE_LIMIT:
            raise ApiError("invalid_arguments", f"modal title must be 1-{MODAL_TITLE_LIMIT} chars")
    if len(str(view.get("private_metadata") or "")) > PRIVATE_METADATA_LIMIT:
        raise ApiError("invalid_arguments", "private_metadata is too long")
    if len(str(view.get("callback_id") or "")) > CALLBACK_ID_LIMIT:
        raise ApiError("invalid_arguments", "callback_id is too long")
    return view


def _fault_reply(fault: _Fault, *, api: bool) -> Reply:
    """Answer a queued fault: Web API 429s carry Slack's JSON body, everything else is text."""
    headers = {"Retry-After": str(fault.retry_after)} if fault.status == 429 else {}
    if api and fault.status == 429:
        return Reply.json({"ok": False, "error": "ratelimited"}, 429, headers)
    default = "ratelimited" if fault.status == 429 else "server_error"
    return Reply.text(fault.error or default, fault.status, headers)


def _reply_error(reply: Reply) -> str | None:
    """The ``error`` of a JSON answer, or the HTTP status for other failures."""
    if reply.content_type.startswith("application/json"):
        data = json.loads(reply.body)
        if not data.get("ok"):
            return str(data.get("error") or f"http_{reply.status}")
        return None
    return f"http_{reply.status}"
