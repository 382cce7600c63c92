"""The FastAPI application: routes over ``approvals.calls.external``, one concern per function.

Quick Redis work runs in FastAPI's thread pool (the sync client RQ also uses); the long wait
of ``GET ...?wait=`` is a blocking read on an asyncio client, so waiting callers hold no
thread.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import redis
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from approvals import store
from approvals.api.answers import (
    ApprovalAnswer,
    ApprovalList,
    JSONAnswer,
    invalid_arguments,
    invalid_request,
    problem,
    refusals,
    refused,
)
from approvals.api.auth import authenticate, check_may_ask
from approvals.api.bodies import MAX_WAIT, ApprovalBody, ResultBody, StrictJSONRoute
from approvals.api.mcp_server import build_server, http_route
from approvals.api.size import BodySizeLimit
from approvals.calls import external
from approvals.config import Settings
from approvals.errors import (
    ConfigError,
    InvalidArguments,
    NotAllowed,
    NotReplicated,
    PolicyError,
    UnknownApproval,
)
from approvals.models import Approval, Status
from approvals.proof.tokens import Token

#: Approval ids are 16 hex digits; anything else is not one (and never becomes a key name).
_ID = re.compile(r"^[0-9a-f]{16}$")

Auth = Annotated[Token, Depends(authenticate)]


def build_app(settings: Settings) -> FastAPI:
    """The API for ``settings``; ``approvals api`` serves it on uvicorn."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # A blocking read lasts up to MAX_WAIT: the socket must outwait it (redis-py's default
        # read timeout would cut a long wait short with an error).
        app.state.aconn = store.connection.connect_async(
            settings, max_connections=4000, socket_timeout=MAX_WAIT + 15
        )
        async with mcp_server.session_manager.run():
            yield
        await app.state.aconn.aclose()
        app.state.conn.close()

    app = FastAPI(
        title="approvals",
        summary="Ask people in Slack before an agent acts; wait for their decision.",
        version="1",
        openapi_url="/v1/openapi.json",
        docs_url="/v1/docs",
        redoc_url=None,
        lifespan=lifespan,
        default_response_class=JSONAnswer,
        # A path with a trailing slash is a 404 like any unknown path, not a redirect to a
        # Location built from the request's own Host header.
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.conn = store.connection.connect(settings)
    app.add_exception_handler(StarletteHTTPException, refused)
    app.add_exception_handler(InvalidArguments, invalid_arguments)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.router.route_class = StrictJSONRoute
    _routes(app)
    # MCP over streamable HTTP at /mcp; its bearer middleware refuses a request without a
    # valid token of this API before MCP reads it.
    mcp_server = build_server(settings, mounted_on=app)
    app.router.routes.append(http_route(mcp_server))
    app.add_middleware(BodySizeLimit, limit=settings.api_max_body)
    return app


def _routes(app: FastAPI) -> None:
    """The routes, each with every answer it can give in the OpenAPI document."""
    by_id = {"approval_id": "$response.body#/id"}
    app.post(
        "/v1/approvals",
        status_code=201,
        operation_id="create_approval",
        response_model=None,
        responses={
            201: {
                "model": ApprovalAnswer,
                "description": "Asked (or, for a known idempotency_key, asked before).",
                "headers": {"Idempotent-Replayed": {"schema": {"type": "string"}}},
                "links": {
                    "GetApproval": {"operationId": "get_approval", "parameters": by_id},
                    "PostResult": {"operationId": "post_result", "parameters": by_id},
                },
            },
            **refusals(401, 403, 413, 422, 429, 503),
        },
    )(create_approval)
    app.get(
        "/v1/approvals",
        operation_id="list_approvals",
        response_model=None,
        responses={200: {"model": ApprovalList}, **refusals(401, 413, 422, 429)},
    )(list_approvals)
    app.get(
        "/v1/approvals/{approval_id}",
        operation_id="get_approval",
        response_model=None,
        responses={200: {"model": ApprovalAnswer}, **refusals(401, 404, 413, 422, 429)},
    )(get_approval)
    app.post(
        "/v1/approvals/{approval_id}/result",
        operation_id="post_result",
        response_model=None,
        responses={200: {"model": ApprovalAnswer}, **refusals(401, 404, 409, 413, 422, 429)},
    )(post_result)


def create_approval(body: ApprovalBody, token: Auth, request: Request) -> JSONAnswer:
    """Ask for a decision; the same ``idempotency_key`` returns the same approval (also 201,
    with ``Idempotent-Replayed: true``, so a retrying client needs no second case)."""
    check_may_ask(token, body.agent, body.tool)
    settings: Settings = request.app.state.settings
    try:
        approval, created = external.ask(request.app.state.conn, settings, _request(body, token))
    except PolicyError as exc:  # fail closed: nothing is asked while the rules are broken
        raise HTTPException(503, f"the approval policy cannot be applied: {exc}") from None
    except ConfigError as exc:  # no channel in the body, and none set
        raise HTTPException(422, [problem(["body", "channel"], str(exc), "missing")]) from None
    except NotReplicated as exc:  # nothing was recorded: the same request may be sent again
        raise HTTPException(503, str(exc)) from None
    headers = {} if created else {"Idempotent-Replayed": "true"}
    return JSONAnswer(external.answer(approval), status_code=201, headers=headers)


def _request(body: ApprovalBody, token: Token) -> external.ExternalRequest:
    return external.ExternalRequest(
        tool=body.tool,
        arguments=body.arguments,
        agent=token.agent,
        schema=body.schema_,
        preview=body.preview,
        fingerprint=body.fingerprint,
        requested_by=body.requested_by,
        idempotency_key=body.idempotency_key,
        run_id=body.run_id,
        options=body.options(),
    )


async def get_approval(
    approval_id: str,
    token: Auth,
    request: Request,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT)] = 0,
) -> dict[str, Any]:
    """The approval as it stands; with ``wait``, as soon as it is decided (at most ``wait`` s)."""
    conn = request.app.state.conn
    approval = await run_in_threadpool(_seen, conn, approval_id, token)
    pending = wait > 0 and approval.status is Status.PENDING
    if pending and await store.callers.wait_answer(request.app.state.aconn, approval_id, wait):
        approval = await run_in_threadpool(_seen, conn, approval_id, token)
    return external.answer(approval)


def _seen(conn: redis.Redis, approval_id: str, token: Token) -> Approval:
    return external.as_caller_sees(conn, _owned(conn, approval_id, token))


def list_approvals(
    token: Auth,
    request: Request,
    status: Annotated[str, Query(pattern="^pending$")] = "pending",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    idempotency_key: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
) -> dict[str, Any]:
    """This agent's pending approvals, newest first; with ``idempotency_key``, the one approval
    that key created, whatever its status (none: an empty list)."""
    conn = request.app.state.conn
    if idempotency_key is not None:
        one = external.by_idempotency_key(conn, token.agent, idempotency_key)
        seen = None if one is None else external.as_caller_sees(conn, one)
        return {"approvals": [] if seen is None else [external.answer(seen)]}
    found = external.pending_of(conn, token.agent, limit)
    return {"approvals": [external.answer(a) for a in found]}


def post_result(
    approval_id: str, body: ResultBody, token: Auth, request: Request
) -> dict[str, Any]:
    """Report what the caller did after the decision; shown in the card's thread (once: 409)."""
    conn, settings = request.app.state.conn, request.app.state.settings
    _owned(conn, approval_id, token)
    try:
        approval = external.report_result(conn, settings, approval_id, body.ok, body.output)
    except NotAllowed as exc:
        raise HTTPException(409, str(exc)) from None
    return external.answer(approval)


def _owned(conn: redis.Redis, approval_id: str, token: Token) -> Approval:
    """The approval, if it is this token's agent's external one (else 404: another agent's
    approvals are not even said to exist)."""
    if not _ID.match(approval_id):
        raise HTTPException(404, "no such approval")
    try:
        approval = store.records.load(conn, approval_id)
    except UnknownApproval:
        raise HTTPException(404, "no such approval") from None
    if not approval.external or approval.agent != token.agent:
        raise HTTPException(404, "no such approval")
    return approval
