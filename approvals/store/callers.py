"""What the API's callers hold: their tokens (as SHA-256 digests), idempotency keys, request
counts per minute, and the stream that wakes a caller waiting for a decision."""

from __future__ import annotations

import json
import math
from typing import Any, cast

import redis
import redis.asyncio as redis_async

from approvals.store.connection import json_value, text
from approvals.store.keys import TOKENS_KEY, answer_key, idempotency_key, rate_key


def wake_caller(target: Any, approval_id: str, ttl: int) -> None:
    """Wake the caller waiting on an external approval (``wait_answer``); ``target`` is a
    client or a pipeline (the decision's own transaction)."""
    target.xadd(answer_key(approval_id), {"event": "decided"})
    target.expire(answer_key(approval_id), max(ttl, 1))


async def wait_answer(aconn: redis_async.Redis, approval_id: str, block: float) -> bool:
    """Block up to ``block`` seconds (an asyncio client: a waiting caller costs no thread)
    until the approval's caller is woken; True when it was, or had been already.

    Read from the stream's start, so a decision made just before the read is not missed.
    The block is rounded up to a whole millisecond: Redis reads ``BLOCK 0`` as "forever".
    """
    milliseconds = max(1, math.ceil(block * 1000))
    found = await aconn.xread({answer_key(approval_id): "0"}, count=1, block=milliseconds)
    return bool(found)


def save_token(conn: redis.Redis, digest: str, record: dict[str, Any]) -> None:
    conn.hset(TOKENS_KEY, digest, json.dumps(record))


def token_record(conn: redis.Redis, digest: str) -> Any:
    """The record of the token with this digest (decoded JSON; None when unknown)."""
    return json_value(cast(bytes | None, conn.hget(TOKENS_KEY, digest)))


def token_records(conn: redis.Redis) -> dict[str, Any]:
    """Every token's record by digest (decoded JSON)."""
    raw = cast(dict[bytes, bytes], conn.hgetall(TOKENS_KEY))
    return {text(k): json_value(v) for k, v in raw.items()}


def delete_token(conn: redis.Redis, digest: str) -> bool:
    return bool(conn.hdel(TOKENS_KEY, digest))


def claim_idempotency(
    conn: redis.Redis, agent: str, digest: str, approval_id: str, ttl: int
) -> str | None:
    """Bind an idempotency key to ``approval_id``; returns the id it was bound to already
    (None: this call bound it)."""
    key = idempotency_key(agent, digest)
    if conn.set(key, approval_id, nx=True, ex=max(ttl, 1)):
        return None
    return text(conn.get(key)) or None


def idempotent_id(conn: redis.Redis, agent: str, digest: str) -> str | None:
    """The approval an idempotency key of ``agent`` created (None: none, or its TTL passed)."""
    return text(conn.get(idempotency_key(agent, digest))) or None


def forget_idempotency(conn: redis.Redis, agent: str, digest: str) -> None:
    conn.delete(idempotency_key(agent, digest))


def count_request(conn: redis.Redis, token_id: str, now: float) -> int:
    """Count one request of a token in the current minute; returns the minute's count."""
    minute = int(now // 60)
    pipe = conn.pipeline(transaction=True)
    pipe.incr(rate_key(token_id, minute))
    pipe.expire(rate_key(token_id, minute), 120)
    count, _ = pipe.execute()
    return int(count)
