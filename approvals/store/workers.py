"""What the live workers allow: the tool modules each imports from, and how to restart them.

A worker refuses, at the resume, a tool outside its ``APPROVALS_TOOL_MODULES``: that is the
security check, and it stays in the worker. So that an agent hears of a refusal before the
first model call, and not after a person clicked Approve, every worker advertises its list
here while it runs (a sorted set per queue: the comma-joined list, scored by when it lapses,
pushed forward by a heartbeat), and ``run_agent`` reads the lists that have not lapsed.
``approvals dev`` also leaves the command that restarts it, so the refusal can name it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import cast

import redis

from approvals.store.connection import json_value
from approvals.store.keys import DEV_KEY, tool_modules_key


def advertise(conn: redis.Redis, queue: str, modules: Sequence[str], ttl: float) -> None:
    """Say, for ``ttl`` seconds, that a worker on ``queue`` imports tools from ``modules``
    (and drop what lapsed: a worker that stopped stops counting after its ``ttl``)."""
    now = time.time()
    key = tool_modules_key(queue)
    with conn.pipeline(transaction=True) as pipe:
        pipe.zadd(key, {",".join(sorted(modules)): now + ttl})
        pipe.zremrangebyscore(key, "-inf", now)
        pipe.expire(key, max(1, int(ttl) + 1))
        pipe.execute()


def allow_lists(conn: redis.Redis, queue: str) -> list[tuple[str, ...]]:
    """The tool modules of each list a live worker on ``queue`` advertised; none when no
    worker advertised (an older worker, or none running)."""
    members = cast(list[bytes], conn.zrangebyscore(tool_modules_key(queue), time.time(), "+inf"))
    return [tuple(m for m in member.decode().split(",") if m) for member in members]


def announce_dev(conn: redis.Redis, command: str, ttl: int) -> None:
    """Record, for ``ttl`` seconds, the command line that restarts the running ``approvals dev``."""
    conn.set(DEV_KEY, json.dumps({"command": command}), ex=ttl)


def forget_dev(conn: redis.Redis) -> None:
    conn.delete(DEV_KEY)


def dev_command(conn: redis.Redis) -> str | None:
    """The command line of the ``approvals dev`` whose workers these are, if one runs."""
    value = json_value(cast(bytes | None, conn.get(DEV_KEY)))
    command = value.get("command") if isinstance(value, dict) else None
    return command if isinstance(command, str) else None
