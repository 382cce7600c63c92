"""Who is asking: the bearer token, what it may ask for, and how often (401, 403, 429)."""

from __future__ import annotations

import time

import redis
from fastapi import HTTPException, Request

from approvals import store
from approvals.tokens import Token, verify_token


def authenticate(request: Request) -> Token:
    """The request's token, counted against its per-minute limit.

    Raises:
        HTTPException: 401 without a valid token, 429 over the limit.
    """
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    conn: redis.Redis = request.app.state.conn
    token = verify_token(conn, secret.strip()) if scheme.lower() == "bearer" else None
    if token is None:
        raise HTTPException(
            401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
        )
    limit: int = request.app.state.settings.api_rate_limit
    if store.count_request(conn, token.id, time.time()) > limit:
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
