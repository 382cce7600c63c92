"""Builds the Bolt app: client, middleware, listeners. Serving it lives in ``bot.server``."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from slack_bolt import App, BoltRequest, BoltResponse
from slack_bolt.context import BoltContext
from slack_bolt.middleware import Middleware
from slack_bolt.request.internals import build_context
from slack_sdk.signature import SignatureVerifier

from approvals import slack, store
from approvals.config import Settings
from bot import form
from bot.listeners import register_listeners
from bot.listeners.lazy import ANSWERED, Acknowledged, after_answer
from bot.runtime import Runtime

log = logging.getLogger(__name__)


def check_settings(settings: Settings) -> None:
    """Raise ``ConfigError`` for a setting the bot needs and does not have."""
    settings.require("SLACK_BOT_TOKEN")
    if settings.slack_app_token is None:
        settings.require("SLACK_SIGNING_SECRET")


@dataclass(frozen=True)
class Request:
    """An HTTP request to the bot, before Bolt builds its own from it."""

    raw_body: str
    query: str
    #: Lower-case names.
    headers: dict[str, str]

    def to_bolt(self) -> BoltRequest:
        headers: dict[str, str | Sequence[str]] = dict(self.headers)
        return BoltRequest(body=self.raw_body, query=self.query, headers=headers)

    def to_bolt_admitted(self, body: dict[str, Any]) -> BoltRequest:
        """The request once ``Admission`` let it through, with its body already parsed.

        Handed to Bolt as a dict, the way Bolt takes Socket Mode's requests: Bolt's mode only
        decides whether it checks the signature itself, which it does not here (Admission
        did), and parsing the body again was half of Bolt's dispatch (bench B1).
        """
        headers: dict[str, str | Sequence[str]] = dict(self.headers)
        return BoltRequest(
            body=body,
            query=self.query,
            headers=headers,
            context={ANSWERED: True},
            mode="socket_mode",
        )


@dataclass(frozen=True)
class Bot:
    """The Bolt app, and how an HTTP request to it is answered (``answer``)."""

    app: App
    admission: Admission
    acknowledged: Acknowledged

    def answer(self, request: Request) -> BoltResponse:
        """Bolt's answer; for an acknowledged listener, an empty 200 as soon as the request is
        admitted, and Bolt parses, routes and runs it on the work pool after the answer (see
        ``bot.listeners.lazy``).

        Raises:
            ValueError, TypeError, LookupError, AttributeError: a body Bolt could not read
                (not JSON, not an object, fields of the wrong types).
        """
        body = form.parse(request.raw_body, request.headers.get("content-type"))
        build_context(BoltContext(), body)  # raises where building Bolt's request would
        if not self.acknowledged.covers(body):
            return self.app.dispatch(request.to_bolt())
        refused = self.admission.refusal(
            request.raw_body,
            request.headers.get("x-slack-request-timestamp", "0"),
            request.headers.get("x-slack-signature", ""),
            body,
        )
        if refused is not None:
            return refused
        after_answer(functools.partial(self._dispatch_answered, request, body))
        return BoltResponse(status=200, body="")

    def _dispatch_answered(self, request: Request, body: dict[str, Any]) -> None:
        response = self.app.dispatch(request.to_bolt_admitted(body))
        if response.status != 200:
            log.warning(
                "Bolt answered %s to a request already answered: %s", response.status, response.body
            )


def create_bot(settings: Settings, conn: redis.Redis | None = None) -> Bot:
    """The Bolt app for these settings (Socket Mode when ``SLACK_APP_TOKEN`` is set).

    Raises:
        ConfigError: a required setting is missing (checked here, not at the first request).
    """
    socket_mode = settings.slack_app_token is not None
    check_settings(settings)
    client = slack.web_client(settings)
    runtime = Runtime(settings=settings, conn=conn or store.connect(settings), client=client)
    # Socket Mode requests come over an authenticated WebSocket and carry no signature.
    admission = Admission(
        None if socket_mode else settings.slack_signing_secret or "",
        None if socket_mode else runtime.conn,
    )
    app = App(
        client=client,
        signing_secret=settings.slack_signing_secret or "",
        # Admission checks the signature instead, in the same place in Bolt's middleware.
        request_verification_enabled=False,
        before_authorize=admission,
        # Only custom workflow functions use it; it would let a payload swap the bot token.
        attaching_function_token_enabled=False,
        # Answer from the request's thread; the work runs after (bot/listeners/lazy.py).
        process_before_response=True,
    )

    @app.middleware
    def inject_runtime(context: Any, next: Callable[[], Any]) -> Any:
        context["runtime"] = runtime
        return next()

    return Bot(app, admission, register_listeners(app))


#: Bolt refuses timestamps more than 5 minutes old; a signature is remembered a little longer.
REPLAY_WINDOW = 310


class Admission(Middleware):
    """What a request must pass before anything acts on it, in this order:

    1. Slack's signature (HTTP only), checked as Bolt's own ``RequestVerification`` does: 401.
    2. A payload Bolt's routing will not crash on and that UTF-8 can carry: 400.
    3. A signature not accepted before, by this bot or another replica (HTTP only): 401. The
       signature covers the timestamp, so one key per signature remembers the (timestamp,
       signature) pair; Slack re-signs its retries with a new timestamp, so they still get in.
       Checked last, so only verified signatures of well-formed requests are remembered.

    Bolt runs it first (``before_authorize``, where its own verification would run); a request
    the bot answered before Bolt saw it passed it then (``ANSWERED``) and is let through.
    """

    def __init__(self, signing_secret: str | None, conn: redis.Redis | None) -> None:
        self.verifier = SignatureVerifier(signing_secret) if signing_secret is not None else None
        self.conn = conn

    def process(
        self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]
    ) -> BoltResponse:
        if req.context.get(ANSWERED):
            return next()
        timestamp = req.headers.get("x-slack-request-timestamp", ["0"])[0]
        signature = req.headers.get("x-slack-signature", [""])[0]
        return self.refusal(req.raw_body, timestamp, signature, req.body) or next()

    def refusal(
        self, raw_body: str, timestamp: str, signature: str, body: dict[str, Any]
    ) -> BoltResponse | None:
        """The answer refusing a request; None when it may go on."""
        if self.verifier is not None and not self.verifier.is_valid(raw_body, timestamp, signature):
            log.info("refused a request with an invalid signature (timestamp %r)", timestamp)
            return BoltResponse(status=401, body={"error": "invalid request"})
        if not (_routable(body) and _encodable(body)):
            return BoltResponse(status=400, body={"error": "malformed request"})
        if self.conn is not None and not store.first_sighting(self.conn, signature, REPLAY_WINDOW):
            return BoltResponse(status=401, body={"error": "replayed request"})
        return None


def _routable(body: dict[str, Any]) -> bool:
    """Bolt indexes ``actions[0]["action_id"]``, ``view["type"]`` and ``event`` unchecked, and
    ``respond()`` posts to ``response_url`` as is."""
    actions = body.get("actions", [{"action_id": ""}])
    first = actions[0] if isinstance(actions, list) and actions else None
    view = body.get("view", {"type": ""})
    url = body.get("response_url", "https://")
    return (
        isinstance(first, dict)
        and isinstance(first.get("action_id"), str)
        and isinstance(view, dict)
        and "type" in view
        and isinstance(body.get("event", {}), dict)
        and isinstance(url, str)
        and url.startswith(("https://", "http://"))
    )


def _encodable(body: dict[str, Any]) -> bool:
    """False when a string holds a lone surrogate (JSON escapes allow them; Redis and Slack
    take UTF-8, which does not), or when the payload nests too deeply to walk."""
    try:
        json.dumps(body, ensure_ascii=False).encode()
    except (UnicodeEncodeError, RecursionError):
        return False
    return True
