"""A cap on request bodies, enforced before anything reads them (HTTP 413).

Plain ASGI middleware: it refuses a declared ``Content-Length`` over the cap at once, and
counts the bytes of a body sent without one (chunked), so that such an upload cannot get
around it. The count's refusal is an ``HTTPException`` raised from ``receive``: FastAPI lets
those through its body reading (any other error there would become a 400), so the 413 is
written like every other refusal.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException

from approvals.api.answers import JSONAnswer

Scope = dict[str, Any]
Message = dict[str, Any]


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over {limit} bytes")


class BodySizeLimit:
    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(BodyTooLarge(self.limit), scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message: Message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise BodyTooLarge(self.limit)
            return message

        try:
            await self.app(scope, counted, send)
        except BodyTooLarge as exc:  # read outside a route that answers refusals itself
            await _too_large(exc, scope, receive, send)


async def _too_large(exc: BodyTooLarge, scope: Scope, receive: Any, send: Any) -> None:
    await JSONAnswer({"detail": exc.detail}, status_code=exc.status_code)(scope, receive, send)
