"""What the API answers: the JSON its responses are written in, the refusals, and the shapes of
its bodies as the OpenAPI document declares them (the tests hold the live API to them).

Every answer is ASCII JSON with no ``NaN`` or ``Infinity`` (they are not JSON): a lone
surrogate is written as its ``\\u`` escape, and a non-finite number that a record from before
the door refused them may hold is written as ``null``, as ``JSON.stringify`` does. So no
stored value can make a read fail.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.routing import Match

from approvals.errors import InvalidArguments
from approvals.models import DecidedBy, DecisionKind, Status


class JSONAnswer(JSONResponse):
    """``application/json`` that any JSON parser reads, whatever the record holds."""

    def render(self, content: Any) -> bytes:
        try:
            text = _dumps(content)
        except ValueError:  # NaN or Infinity
            text = _dumps(_finite(content))
        return text.encode("ascii")


def _dumps(content: Any) -> str:
    return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


# --- the bodies, as the document declares them --------------------------------------------


class DecisionAnswer(BaseModel):
    """Who decided what, and what to run."""

    kind: DecisionKind
    actor: str = Field(description="A Slack user id, rule:<id>, grant:<id> or system.")
    actor_name: str | None
    at: float = Field(description="When, in seconds since the epoch.")
    reason: str | None = Field(description="A rejection's reason.")
    arguments: dict[str, Any] | None = Field(
        description="What to run (a reviewer may have edited them); null when nothing runs."
    )
    response: str | None = Field(description="A Respond's text: the tool's result.")
    decided_by: DecidedBy
    rule_id: str | None
    grant_id: str | None
    fingerprint: str | None = Field(
        description="The state the decision was made on, as the request named it (the "
        "receipt's fingerprint claim); null when it named none."
    )


class ResultAnswer(BaseModel):
    """What the caller reported it did (``POST /v1/approvals/{id}/result``)."""

    ok: bool
    output: str


class ApprovalAnswer(BaseModel):
    """An approval as its caller sees it (``approvals.calls.external.answer``)."""

    id: str = Field(pattern=r"^[0-9a-f]{16}$")
    status: Status
    tool: str
    agent: str
    decision: DecisionAnswer | None = Field(description="Null while pending.")
    receipt: str | None = Field(description="The signed receipt (a JWT) of a person's release.")
    votes: list[str] = Field(description="Who approved so far, when several must.")
    expires_at: float | None
    card_url: str | None = Field(description="The Slack card; null until it is posted.")
    run_id: str | None
    result: ResultAnswer | None = Field(default=None, description="Once the result is reported.")


class ApprovalList(BaseModel):
    approvals: list[ApprovalAnswer]


class Refusal(BaseModel):
    """Why the request was refused, in words."""

    detail: str


class FieldProblem(BaseModel):
    loc: list[str | int] = Field(
        description='Where: ["body", "arguments", "path"], ["query", "wait"], ["body"]...'
    )
    msg: str
    type: str


class Invalid(BaseModel):
    """Each field that is missing or malformed, and why (422)."""

    detail: list[FieldProblem]


#: Why each refusal happens, for the document.
_WHY = {
    401: "No bearer token, or an unknown or revoked one.",
    403: "The body names another agent than the token's, or a tool the token may not ask for.",
    404: "No such approval, or another agent's (its existence is not told).",
    409: "A result for an approval not decided to go ahead, or one reported already.",
    413: "The request body is over APPROVALS_API_MAX_BODY bytes.",
    422: "A field is missing or malformed, or the body is not strict JSON; loc names where.",
    429: "Over APPROVALS_API_RATE_LIMIT requests this minute for this token.",
    503: "APPROVALS_POLICY cannot be read or holds a malformed rule: nothing is asked.",
}
_HEADERS = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}, "required": True}},
    429: {"Retry-After": {"schema": {"type": "integer"}, "required": True}},
}


def refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The document's entries for the refusals a route can answer."""
    return {
        status: {
            "model": Invalid if status == 422 else Refusal,
            "description": _WHY[status],
            **({"headers": _HEADERS[status]} if status in _HEADERS else {}),
        }
        for status in statuses
    }


# --- refusals, written in those shapes -----------------------------------------------------


def problem(loc: list[str | int], msg: str, kind: str) -> dict[str, Any]:
    """One ``FieldProblem``."""
    return {"loc": loc, "msg": msg, "type": kind}


async def refused(request: Request, exc: Exception) -> JSONAnswer:
    """An ``HTTPException`` (ours, or the router's 404 and 405) as ``{"detail": ...}``."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed(request))
    return JSONAnswer({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


def _allowed(request: Request) -> list[str]:
    """Every method some route takes at the request's path: Starlette's 405 names only those
    of the first route there, and a path served by two routes (GET and POST) has both."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


async def invalid_request(request: Request, exc: Exception) -> JSONAnswer:
    """422 naming each field and what is wrong, without echoing the input back (it may be
    bytes that are not JSON, or a secret)."""
    assert isinstance(exc, RequestValidationError)
    detail = [
        problem(list(error.get("loc", ())), str(error.get("msg", "")), str(error.get("type")))
        for error in exc.errors()
    ]
    return JSONAnswer({"detail": detail}, status_code=422)


async def invalid_arguments(request: Request, exc: Exception) -> JSONAnswer:
    """422 naming each argument that does not fit the schema (``_``: the arguments as a whole)."""
    assert isinstance(exc, InvalidArguments)
    detail = [
        problem(["body", "arguments", *([] if name == "_" else [name])], message, "arguments")
        for name, message in exc.errors.items()
    ]
    return JSONAnswer({"detail": detail}, status_code=422)
