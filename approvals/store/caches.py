"""Short-lived memories: the members of a Slack user group or channel, and the Slack request
signatures and receipt ids already seen once (each kept with a TTL)."""

from __future__ import annotations

import json
from typing import cast

import redis

from approvals.store.connection import json_value
from approvals.store.keys import members_key, receipt_key, seen_key


def cached_members(conn: redis.Redis, target: str) -> list[str] | None:
    """Members of a user group or a channel as last fetched, or None when not cached."""
    members = json_value(cast(bytes | None, conn.get(members_key(target))))
    if isinstance(members, list) and all(isinstance(m, str) for m in members):
        return members
    return None


def cache_members(conn: redis.Redis, target: str, members: list[str], ttl: int) -> None:
    conn.set(members_key(target), json.dumps(members), ex=ttl)


def first_sighting(conn: redis.Redis, signature: str, ttl: int) -> bool:
    """Remember a request signature for ``ttl`` seconds; False when it was remembered already.

    Every bot replica shares these keys, so a replayed request is refused wherever it lands.
    """
    return bool(conn.set(seen_key(signature), b"1", nx=True, ex=ttl))


def first_receipt_use(conn: redis.Redis, jti: str, ttl: int) -> bool:
    """Remember a receipt id for ``ttl`` seconds; False when it was remembered already."""
    return bool(conn.set(receipt_key(jti), b"1", nx=True, ex=ttl))
