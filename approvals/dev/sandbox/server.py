"""The local Slack sandbox: one HTTP port serving Slack's Web API to the bot and a page to people.

``/api/*`` and ``/response/*`` are the Web API stand-in (the bot's ``SLACK_API_URL`` points
here, with a generated token). ``/`` is the page; ``/sandbox/*`` is its small JSON API: a
long-polled ``state``, and the actions a person takes, which ``BotLink`` turns into requests
signed with a generated secret that the bot is given as ``SLACK_SIGNING_SECRET``. With
``socket_mode`` the bot is given a generated app-level token instead (``SLACK_APP_TOKEN``),
dials the stand-in's WebSocket, and the actions go down it as Socket Mode envelopes.

The page's endpoints change things (a click can approve a deletion), and the server listens on
loopback where any web page in the same browser could reach it. So they take only JSON with
a ``Host`` of this server and, when the browser sends one, an ``Origin`` of this server: a
cross-site form cannot send that, and DNS rebinding gets a wrong ``Host``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from approvals.dev.sandbox.interactions import BotLink, Outcome
from approvals.dev.sandbox.mrkdwn import TextContext
from approvals.dev.sandbox.page import View, render_state
from approvals.dev.sandbox.slack_api import Reply
from approvals.dev.sandbox.workspace import SandboxSlack

STATIC = Path(__file__).with_name("static")
_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/sandbox.css": ("sandbox.css", "text/css; charset=utf-8"),
    "/static/sandbox.js": ("sandbox.js", "text/javascript; charset=utf-8"),
}
#: How long a state request waits for something to change before answering anyway.
LONG_POLL_SECONDS = 20.0

Action = Callable[[str, dict[str, Any]], Outcome]


class Sandbox:
    """A Slack workspace with one channel and a few people, in a browser."""

    def __init__(
        self,
        *,
        channel: str,
        channel_name: str,
        users: dict[str, str],
        state_file: Path | None = None,
        socket_mode: bool = False,
    ) -> None:
        self.token = "xoxb-sandbox-" + secrets.token_hex(12)
        self.app_token = "xapp-1-sandbox-" + secrets.token_hex(12)
        self.signing_secret = secrets.token_hex(20)
        self.channel = channel
        self.workspace = SandboxSlack(
            token=self.token,
            app_token=self.app_token,
            users=users,
            channels={channel: channel_name},
            state_file=state_file,
        )
        self.workspace.pages = self._route
        self.link = BotLink(self.workspace, self.signing_secret, socket_mode=socket_mode)
        self._actions: dict[str, Action] = {
            "/sandbox/click": lambda user, b: self.link.click(
                user, _object(b, "container"), _object(b, "action"), b.get("state")
            ),
            "/sandbox/submit": lambda user, b: self.link.submit(
                user, _object({"values": b.get("values") or {}}, "values")
            ),
            "/sandbox/close": self._close,
            "/sandbox/send": self._send,
            "/sandbox/home": lambda user, b: self.link.open_home(user),
            "/sandbox/dismiss": self._dismiss,
        }

    def start(self, host: str = "127.0.0.1", port: int = 3000) -> Sandbox:
        self.workspace.start(host, port)
        return self

    def stop(self) -> None:
        self.workspace.stop()

    @property
    def url(self) -> str:
        """The page, and the base of the Web API (``url + "/api/"``)."""
        return self.workspace.url + "/"

    @property
    def api_url(self) -> str:
        return self.workspace.base_url

    def set_bot_url(self, url: str | None) -> None:
        """Where the bot listens (it moves when the bot restarts on a new port)."""
        self.link.bot_url = url
        self.workspace.touch()

    def _route(self, verb: str, path: str, headers: Any, body: bytes) -> Reply:
        parts = urlsplit(path)
        if not self._same_host(headers):
            return Reply.text("wrong host", 403)
        if verb == "GET" and parts.path in _FILES:
            name, content_type = _FILES[parts.path]
            return Reply(
                200, (STATIC / name).read_bytes(), content_type, {"Cache-Control": "no-store"}
            )
        if verb == "GET" and parts.path == "/sandbox/config":
            return Reply.json(self._config())
        if verb == "GET" and parts.path == "/sandbox/state":
            return self._state(parse_qs(parts.query))
        if verb == "POST" and parts.path in self._actions:
            return self._act(parts.path, headers, body)
        return Reply.text("not_found", 404)

    def _config(self) -> dict[str, Any]:
        users = [{"id": k, "name": v} for k, v in self.workspace.users.items()]
        return {"users": users, "channel": self.channel}

    def _state(self, query: dict[str, list[str]]) -> Reply:
        def arg(name: str, default: str = "") -> str:
            return query.get(name, [default])[0]

        user = arg("user")
        if user not in self.workspace.users:
            return Reply.json({"ok": False, "error": "unknown user"}, 400)
        try:
            since = int(arg("since", "-1"))
        except ValueError:
            since = -1
        self.workspace.wait_for_change(since, LONG_POLL_SECONDS)
        view = View(
            user=user,
            channel=arg("channel") or self.channel,
            thread=arg("thread") or None,
            tab="home" if arg("tab") == "home" else "channel",
        )
        ctx = TextContext(users=self.workspace.users, channels=self.workspace.channels)
        state = render_state(self.workspace.snapshot(user), view, ctx, self.workspace.bot_user_id)
        state["bot"] = self.link.ready
        return Reply.json(state)

    def _act(self, path: str, headers: Any, body: bytes) -> Reply:
        if not str(headers.get("Content-Type") or "").startswith("application/json"):
            return Reply.json({"ok": False, "error": "JSON only"}, 415)
        origin = urlsplit(str(headers.get("Origin") or ""))
        if origin.netloc and (origin.scheme, origin.netloc) not in self._origins():
            return Reply.json({"ok": False, "error": "cross-origin request refused"}, 403)
        try:
            data = json.loads(body or b"{}")
            user = str(data["user"])
        except (ValueError, KeyError, TypeError):
            return Reply.json({"ok": False, "error": "bad request"}, 400)
        if user not in self.workspace.users:
            return Reply.json({"ok": False, "error": "unknown user"}, 400)
        try:
            outcome = self._actions[path](user, data)
        except (KeyError, TypeError, ValueError) as exc:
            return Reply.json({"ok": False, "error": f"bad request: {exc}"}, 400)
        return Reply.json({"ok": outcome.ok, "error": outcome.error})

    def _same_host(self, headers: Any) -> bool:
        return ("http", str(headers.get("Host") or "")) in self._origins()

    def _origins(self) -> set[tuple[str, str]]:
        """The page's own (scheme, host:port) pairs, by address or by name."""
        port = self.workspace.url.rsplit(":", 1)[1]
        return {("http", f"127.0.0.1:{port}"), ("http", f"localhost:{port}")}

    def _close(self, user: str, data: dict[str, Any]) -> Outcome:
        self.workspace.close_modal(user)
        return Outcome(True)

    def _dismiss(self, user: str, data: dict[str, Any]) -> Outcome:
        self.workspace.dismiss(user, int(data["id"]))
        return Outcome(True)

    def _send(self, user: str, data: dict[str, Any]) -> Outcome:
        """The composer: ``/command text`` goes to the bot, anything else is a message."""
        text = str(data.get("text") or "").strip()
        channel = str(data.get("channel") or self.channel)
        thread = str(data["thread"]) if data.get("thread") else None
        if not text:
            return Outcome(False, "nothing to send")
        if text.startswith("/"):
            return self.link.command(user, channel, text, thread)
        self.workspace.post_as_user(user, channel, text, thread)
        return Outcome(True)


def _object(body: dict[str, Any], name: str) -> dict[str, Any]:
    """``body[name]``, which must be a JSON object (``TypeError``, a 400, when it is not)."""
    value = body[name]
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be an object")
    return value
