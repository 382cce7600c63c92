"""Who is asking: the bearer token, what it may ask for, and how often (401, 403, 429)."""

from __future__ import annotations

import time
from typing import Annotated

import redis
from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from approvals import store
from approvals.proof.tokens import Token, verify_token

#: The document's security scheme (Swagger UI's Authorize button, generated clients' token);
#: a missing or malformed header is this module's 401, with its own words.
BEARER = HTTPBearer(
    scheme_name="bearer",
    description="A token of `approvals tokens create`: it asks as that token's agent.",
    auto_error=False,
)


def authenticate(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]
) -> Token:
    """The request's token, counted against its per-minute limit.

    Raises:
        HTTPException: 401 without a valid token, 429 over the limit.
    """
    conn: redis.Redis = request.app.state.conn
    token = None if credentials is None else verify_token(conn, credentials.credentials)
    if token is None:
        raise HTTPException(
            401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
        )
    limit: int = request.app.state.settings.api_rate_limit
    if store.callers.count_request(conn, token.id, time.time()) > limit:
        retry = str(60 - int(time.time() % 60))
        raise HTTPException(
            429, f"over {limit} requests a minute for this token", headers={"Retry-After": retry}
        )
    return token


def check_may_ask(token: Token, agent: str | None, tool: str) -> None:
    """A token asks only for its own agent, and for its own tools when it names some (403)."""
    if agent is not None and agent != token.agent:
        raise HTTPException(403, f"this token is for agent {token.agent!r}, not {agent!r}")
    if not token.allows_tool(tool):
        raise HTTPException(403, f"this token may not ask for tool {tool!r}")
