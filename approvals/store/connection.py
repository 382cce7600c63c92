"""Redis clients: one per URL per process, and Lua scripts run by their SHA1.

Responses stay bytes (RQ shares these clients and needs them so); ``text`` and ``json_value``
read them, and a field that is not what it should be is a ``CorruptRecord``: Redis is a trust
boundary.
"""

from __future__ import annotations

import json
from typing import Any

import redis
from redis.commands.core import Script
from redis.driver_info import DriverInfo

from approvals.config import Settings
from approvals.errors import CorruptRecord

_shared: dict[str, redis.Redis] = {}


def shared_connection(settings: Settings) -> redis.Redis:
    """One client per ``REDIS_URL`` for the whole process (agents call ``run_agent`` often)."""
    client = _shared.get(settings.redis_url)
    if client is None:
        client = _shared.setdefault(settings.redis_url, connect(settings))
    return client


def close_shared_connections() -> None:
    """Close the clients ``shared_connection`` kept (a process that used many Redis URLs,
    such as the test suite, would otherwise hold every one's connections until it exits)."""
    while _shared:
        _, client = _shared.popitem()
        client.close()


#: redis-py 8 caps a client's pool at 100 connections and fails the command past that: an agent
#: program whose many threads pause at once would lose pauses instead of opening more.
MAX_CONNECTIONS = 2000

#: How long a command may wait for Redis's answer. Above the longest blocking read made here
#: (``outcomes.wait`` blocks in slices of seconds; redis-py's own default would cut those short
#: with a ``TimeoutError``), and finite, so a primary lost without a reset fails the command
#: instead of hanging it.
SOCKET_TIMEOUT = 30.0


def connect(settings: Settings) -> redis.Redis:
    """A client for ``REDIS_URL`` (``redis://``, ``rediss://`` and ACL users in the URL work).

    Responses stay bytes: RQ shares this connection and needs them so.
    """
    return redis.Redis.from_url(
        settings.redis_url,
        health_check_interval=30,
        driver_info=_DRIVER_INFO,
        max_connections=MAX_CONNECTIONS,
        socket_timeout=SOCKET_TIMEOUT,
    )


_scripts: dict[str, Script] = {}


def eval_script(conn: redis.Redis, lua: str, keys: list[str], args: list[Any]) -> Any:
    """Run a Lua script by its SHA1 (loading it when Redis does not know it yet).

    One ``Script`` per text for the whole process: built per call, each hashed its text again.
    """
    script = _scripts.get(lua)
    if script is None:
        script = _scripts.setdefault(lua, conn.register_script(lua))
    return script(keys=keys, args=args, client=conn)


# Given once: left to redis-py, every new client re-reads the package's metadata from disk.
_DRIVER_INFO = DriverInfo(lib_version=redis.__version__)


def text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def json_value(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise CorruptRecord("a stored field is not valid JSON") from None
