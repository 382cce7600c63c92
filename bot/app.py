"""Builds the Bolt app: client, middleware, listeners. Serving it lives in
``approvals.bot.server``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis
from slack_bolt import App, BoltRequest, BoltResponse
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_bolt.middleware import Middleware

from approvals import store
from approvals.bot.listeners import register_listeners
from approvals.bot.runtime import Runtime
from approvals.config import Settings
from approvals.proof import keys
from approvals.slack import web as slack

log = logging.getLogger(__name__)

#: Threads running the work after each acknowledgement (Bolt's lazy listeners), per process.
#: Two, so that one Slack call sleeping out a rate limit does not hold up every other click;
#: not more, because the work shares the interpreter with the threads answering Slack, and
#: in a burst of clicks more of it at once only delays the answers.
WORK_THREADS = 2


class _TokenGoesToTheClient(logging.Filter):
    """Bolt warns that ``SLACK_BOT_TOKEN`` will be unused whenever it is given a client while
    that variable is set; our client is built from that very token, so the warning is false
    (and came at every start of every bot process)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


def _drop_false_token_warning() -> None:
    bolt = logging.getLogger("slack_bolt.App")  # the logger Bolt's App warns on
    if not any(isinstance(f, _TokenGoesToTheClient) for f in bolt.filters):
        bolt.addFilter(_TokenGoesToTheClient())


def check_settings(settings: Settings) -> None:
    """Raise ``ConfigError`` for a setting the bot needs and does not have."""
    settings.require("SLACK_BOT_TOKEN")
    if settings.slack_app_token is None:
        settings.require("SLACK_SIGNING_SECRET")
    keys.public_keys(settings)  # an unreadable key stops start-up, not the first approval


def create_app(
    settings: Settings,
    conn: redis.Redis | None = None,
    executor: ThreadPoolExecutor | None = None,
) -> App:
    """The Bolt app for these settings (Socket Mode when ``SLACK_APP_TOKEN`` is set).

    ``executor`` runs the lazy listeners; the server passes its own so that a stopping
    process can wait for the work its requests started.

    Raises:
        ConfigError: a required setting is missing (checked here, not at the first request).
    """
    check_settings(settings)
    socket_mode = settings.slack_app_token is not None
    client = slack.web_client(settings)
    runtime = Runtime(
        settings=settings, conn=conn or store.connection.connect(settings), client=client
    )
    _drop_false_token_warning()
    app = App(
        client=client,
        # Bolt verifies every HTTP request's signature; Socket Mode requests carry none.
        signing_secret=settings.slack_signing_secret or "",
        request_verification_enabled=not socket_mode,
        before_authorize=Admission(None if socket_mode else runtime.conn),
        # Only custom workflow functions use it; it would let a payload swap the bot token.
        attaching_function_token_enabled=False,
        # The answer goes out when a listener's ack function returns; what follows the
        # acknowledgement runs in lazy listeners on the executor, never in the request.
        process_before_response=True,
        listener_executor=executor or ThreadPoolExecutor(WORK_THREADS, "listener-work"),
    )

    @app.middleware
    def inject_runtime(context: Any, next: Callable[[], Any]) -> Any:
        context["runtime"] = runtime
        return next()

    register_listeners(app)
    return app


#: Bolt refuses timestamps more than 5 minutes old; a signature is remembered a little longer.
REPLAY_WINDOW = 310


class Admission(Middleware):
    """What Bolt lacks, checked right after its own signature verification:

    1. A payload Bolt's routing will not crash on and that UTF-8 can carry: 400.
    2. A signature not accepted before, by this bot or another replica (HTTP only): 401.
       The signature covers the timestamp, so one key per signature remembers the pair;
       Slack re-signs its retries with a new timestamp, so they still get in. Checked last,
       so only verified signatures of well-formed requests are remembered.
    """

    def __init__(self, conn: redis.Redis | None) -> None:
        self.conn = conn

    def process(
        self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]
    ) -> BoltResponse:
        if not (_routable(req.body) and _encodable(req.body)):
            return BoltResponse(status=400, body={"error": "malformed request"})
        if self.conn is not None and req.mode == "http":
            signature = req.headers.get("x-slack-signature", [""])[0]
            if not store.caches.first_sighting(self.conn, signature, REPLAY_WINDOW):
                log.info("refused a replayed request")
                return BoltResponse(status=401, body={"error": "replayed request"})
        return next()


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
