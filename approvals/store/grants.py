"""Grants as Redis keeps them: a hash each, indexed by creation time and by tool; taking a
use and revoking are each one atomic step."""

from __future__ import annotations

import time
from typing import cast

import redis

from approvals.store.connection import eval_script, text
from approvals.store.keys import GRANTS_KEY, grant_key, grants_tool_key


def save_grant(
    conn: redis.Redis,
    grant_id: str,
    record: str,
    tool_name: str,
    created_at: float,
    expires_at: float | None,
) -> None:
    """Store a new grant (``record``: JSON) and index it, in one transaction."""
    pipe = conn.pipeline(transaction=True)
    pipe.hset(
        grant_key(grant_id),
        mapping={"record": record, "uses": "0", "expires_at": repr(expires_at or 0.0)},
    )
    if expires_at:
        # A day past its end it is gone; until then lists show it as expired.
        pipe.expireat(grant_key(grant_id), int(expires_at) + 24 * 3600)
    pipe.zadd(GRANTS_KEY, {grant_id: created_at})
    pipe.zadd(grants_tool_key(tool_name), {grant_id: created_at})
    pipe.execute()


def grant_ids(conn: redis.Redis, tool_name: str | None = None) -> list[str]:
    """Grant ids, newest first: all of them, or one tool's."""
    key = GRANTS_KEY if tool_name is None else grants_tool_key(tool_name)
    return [text(i) for i in cast(list[bytes], conn.zrevrange(key, 0, -1))]


def load_grants(conn: redis.Redis, ids: list[str]) -> list[tuple[str, dict[str, str]]]:
    """The stored hashes of these grants, in one round trip (missing ones left out)."""
    pipe = conn.pipeline(transaction=False)
    for grant_id in ids:
        pipe.hgetall(grant_key(grant_id))
    found = []
    for grant_id, raw in zip(ids, pipe.execute(), strict=True):
        if raw:
            found.append((grant_id, {text(k): text(v) for k, v in raw.items()}))
    return found


def forget_grants(conn: redis.Redis, tool_name: str, ids: list[str]) -> None:
    """Drop ids whose grant is gone (expired past keeping) from the indexes."""
    if ids:
        conn.zrem(GRANTS_KEY, *ids)
        conn.zrem(grants_tool_key(tool_name), *ids)


# KEYS: grant hash. ARGV: now. Takes one use of a live grant; 0 when revoked, expired or gone.
_USE_GRANT_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[1], 'revoked_at') == 1 then return 0 end
local ends = tonumber(redis.call('HGET', KEYS[1], 'expires_at') or '0')
if ends > 0 and ends <= tonumber(ARGV[1]) then return 0 end
return redis.call('HINCRBY', KEYS[1], 'uses', 1)
"""


def use_grant(conn: redis.Redis, grant_id: str, now: float) -> int:
    """Take one use of a grant, atomically: its new use count, or 0 when it is not live."""
    return int(eval_script(conn, _USE_GRANT_LUA, [grant_key(grant_id)], [repr(now)]))


# KEYS: grant hash. ARGV: now, actor. 1: revoked now; 0: already revoked or gone.
_REVOKE_GRANT_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HSETNX', KEYS[1], 'revoked_at', ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'revoked_by', ARGV[2])
return 1
"""


def revoke_grant(conn: redis.Redis, grant_id: str, actor: str) -> int:
    """Revoke a grant once: 1 revoked now, 0 revoked already, -1 no such grant."""
    keys = [grant_key(grant_id)]
    return int(eval_script(conn, _REVOKE_GRANT_LUA, keys, [repr(time.time()), actor]))
