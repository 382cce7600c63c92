"""The service a gated tool acts on, as a small real WSGI app: it deletes a row only when the
request carries a receipt that ``approvals.verify_receipt`` accepts for exactly that call.

It is what the acting side of a deployment looks like: the public keys come from the bot's
``/.well-known/jwks.json`` (fetched once, at start), never from the caller or from Redis.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import redis

from approvals import InvalidReceipt, verify_receipt
from approvals.proof.receipts import check_not_replayed


@dataclass
class Answer:
    status: int
    text: str
    arguments: dict[str, Any]
    token: str | None


@dataclass
class Downstream:
    jwks: dict[str, Any]
    replays: redis.Redis
    deleted: list[dict[str, Any]] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    url: str = ""
    _server: WSGIServer | None = None

    def app(self, environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        arguments = json.loads(environ["wsgi.input"].read(length) or b"{}")
        auth = environ.get("HTTP_AUTHORIZATION", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        status, text = self._delete(arguments, token)
        self.answers.append(Answer(status, text, arguments, token))
        start(f"{status} {'OK' if status == 200 else 'Refused'}", [("Content-Type", "text/plain")])
        return [text.encode()]

    def _delete(self, arguments: dict[str, Any], token: str | None) -> tuple[int, str]:
        if token is None:
            return 401, "a receipt is required"
        try:
            receipt = verify_receipt(
                token, tool="delete_row", arguments=arguments, keys=self.jwks, require_person=True
            )
            check_not_replayed(self.replays, receipt)
        except InvalidReceipt as refused:
            return 403, str(refused)
        self.deleted.append(arguments)
        return 200, f"deleted {arguments['row']} for {','.join(receipt.approvers)}"

    def start(self) -> Downstream:
        self._server = make_server("127.0.0.1", 0, self.app, handler_class=_Quiet)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def fetch_jwks(bot_url: str) -> dict[str, Any]:
    """The bot's published keys (``bot_url`` ends in /slack/events)."""
    base = bot_url.removesuffix("/slack/events")
    with urllib.request.urlopen(base + "/.well-known/jwks.json", timeout=10) as answer:
        assert answer.headers["Content-Type"] == "application/json"
        assert answer.headers["Cache-Control"] == "public, max-age=300"
        return dict(json.load(answer))


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass
