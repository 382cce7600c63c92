"""Webhook receivers as the outbox sees them: which are failing, and since when."""

from __future__ import annotations

import time
from typing import Any, cast

import redis

from approvals.store.connection import text
from approvals.store.keys import (
    EVENTS_KEY,
    EVENTS_TAKING_KEY,
    WEBHOOK_FAILING_KEY,
    webhook_key,
)


def webhook_failed(conn: redis.Redis, url: str) -> None:
    """Note that a webhook receiver failed (kept from its first failure until it answers)."""
    conn.hsetnx(WEBHOOK_FAILING_KEY, url, repr(time.time()))


def webhook_answered(conn: redis.Redis, url: str) -> None:
    conn.hdel(WEBHOOK_FAILING_KEY, url)


def webhooks_failing(conn: redis.Redis) -> dict[str, float]:
    """Receiver URL -> since when it has failed, for every receiver failing now."""
    raw = cast(dict[bytes, bytes], conn.hgetall(WEBHOOK_FAILING_KEY))
    found = {}
    for url, since in raw.items():
        try:
            found[text(url)] = float(since)
        except ValueError:
            continue
    return found


def take(conn: redis.Redis, most: int) -> list[bytes]:
    """Move up to ``most`` entries from the outbox to the taking list (a few round trips for a
    burst of state changes), and return them."""
    waiting = min(int(conn.llen(EVENTS_KEY)), most)
    if waiting <= 0:
        return []
    pipe = conn.pipeline(transaction=False)
    for _ in range(waiting):
        pipe.lmove(EVENTS_KEY, EVENTS_TAKING_KEY, "LEFT", "RIGHT")
    return [raw for raw in pipe.execute() if raw is not None]


def taking(conn: redis.Redis, most: int = 21) -> list[bytes]:
    """The first entries of the taking list (some may be a dead worker's)."""
    return cast(list[bytes], conn.lrange(EVENTS_TAKING_KEY, 0, most - 1))


def taken(conn: redis.Redis, entries: list[bytes]) -> None:
    """Drop entries from the taking list once their jobs are queued."""
    if not entries:
        return
    pipe = conn.pipeline(transaction=False)
    for raw in entries:
        pipe.lrem(EVENTS_TAKING_KEY, 1, cast(Any, raw))  # the bytes as taken
    pipe.execute()


def keep_body(conn: redis.Redis, message_id: str, body: str, ttl: int) -> None:
    """A webhook's body, kept so every retry sends the same bytes (the first one written wins)."""
    conn.set(webhook_key(message_id), body, nx=True, ex=ttl)


def body(conn: redis.Redis, message_id: str) -> str | None:
    """The kept body of a webhook (None once its TTL passed)."""
    raw = cast(bytes | None, conn.get(webhook_key(message_id)))
    return None if raw is None else text(raw)
