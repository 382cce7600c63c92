"""API tokens: one per agent, each limited to that agent's name and, if given, its tools.

A token is shown once, when created; Redis keeps only its SHA-256 digest (a token is 256
random bits, so a fast hash is as good as a slow one and keeps every request cheap). Records
read back from Redis are checked, as everything read from Redis is.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

import redis

from approvals import store

#: Tokens start with this, so a leaked one is recognisable (secret scanners, logs).
TOKEN_PREFIX = "apv_"


@dataclass(frozen=True)
class Token:
    """What a token may do: ask for ``agent``, and only for ``tools`` (empty: any tool)."""

    id: str
    agent: str
    tools: tuple[str, ...]
    created_at: float

    def allows_tool(self, tool: str) -> bool:
        return not self.tools or tool in self.tools


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(conn: redis.Redis, agent: str, tools: tuple[str, ...] = ()) -> tuple[Token, str]:
    """A new token for ``agent``; returns its record and the token itself (shown only now)."""
    if not agent.strip():
        raise ValueError("a token needs an agent name")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = Token(secrets.token_hex(4), agent, tools, time.time())
    record = {"id": token.id, "agent": agent, "tools": list(tools), "created_at": token.created_at}
    store.callers.save_token(conn, digest(secret), record)
    return token, secret


def verify_token(conn: redis.Redis, secret: str) -> Token | None:
    """The token's record, or None when it is unknown, revoked or its record is malformed."""
    if not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        return None
    try:
        return _token(store.callers.token_record(conn, digest(secret)))
    except Exception:  # a corrupt record refuses the request rather than granting it
        return None


def list_tokens(conn: redis.Redis) -> list[Token]:
    """Every token, oldest first (unreadable records are left out)."""
    found = [_token(r) for r in store.callers.token_records(conn).values()]
    return sorted((t for t in found if t is not None), key=lambda t: t.created_at)


def revoke_token(conn: redis.Redis, token_id: str) -> bool:
    """Revoke the token with this id; False when there is none."""
    for key, record in store.callers.token_records(conn).items():
        token = _token(record)
        if token is not None and token.id == token_id:
            return store.callers.delete_token(conn, key)
    return False


def _token(record: Any) -> Token | None:
    if not isinstance(record, dict):
        return None
    tid, agent, tools = record.get("id"), record.get("agent"), record.get("tools")
    created = record.get("created_at")
    if not (isinstance(tid, str) and isinstance(agent, str) and isinstance(tools, list)):
        return None
    if not all(isinstance(t, str) for t in tools) or not isinstance(created, int | float):
        return None
    return Token(tid, agent, tuple(tools), float(created))
