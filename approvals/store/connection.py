"""Redis clients: one per URL per process, and Lua scripts run by their SHA1.

With ``REDIS_SENTINELS`` set, every client asks the Sentinels where the primary is, with
redis-py's own ``Sentinel(...).master_for(...)``: a connection that fails, or finds its
server demoted to a replica, asks again, so a failover is followed without a restart.

Responses stay bytes (RQ shares these clients and needs them so); ``text`` and ``json_value``
read them, and a field that is not what it should be is a ``CorruptRecord``: Redis is a trust
boundary.
"""

from __future__ import annotations

import json
from typing import Any, cast

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis.commands.core import Script
from redis.connection import SSLConnection, parse_url
from redis.driver_info import DriverInfo

from approvals.config import Settings, safe_url
from approvals.errors import ConfigError, CorruptRecord

_shared: dict[tuple[object, ...], redis.Redis] = {}


def shared_connection(settings: Settings) -> redis.Redis:
    """One client per Redis (``REDIS_URL``, or the Sentinels and their service) for the whole
    process (agents call ``run_agent`` often)."""
    where = _where(settings)
    client = _shared.get(where)
    if client is None:
        client = _shared.setdefault(where, connect(settings))
    return client


def _where(settings: Settings) -> tuple[object, ...]:
    return (settings.redis_url, settings.redis_sentinels, settings.redis_sentinel_service)


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


#: How long a question to a Sentinel may take: one that does not answer is passed over for
#: the next, so this bounds how long a dead Sentinel delays finding the primary.
SENTINEL_TIMEOUT = 1.0


def connect(
    settings: Settings, *, timeout: float = SOCKET_TIMEOUT, connect_timeout: float | None = None
) -> redis.Redis:
    """A client for ``REDIS_URL`` (``redis://``, ``rediss://`` and ACL users in the URL work),
    or for the primary the Sentinels name, when ``REDIS_SENTINELS`` is set. ``timeout`` and
    ``connect_timeout`` bound each answer and each connection (``approvals doctor`` keeps
    them short, to answer even when Redis does not).

    Responses stay bytes: RQ shares this connection and needs them so.
    """
    options: dict[str, Any] = {
        "health_check_interval": 30,
        "driver_info": _DRIVER_INFO,
        "max_connections": MAX_CONNECTIONS,
        "socket_timeout": timeout,
        "socket_connect_timeout": connect_timeout,
    }
    if not settings.redis_sentinels:
        return redis.Redis.from_url(settings.redis_url, **options)
    manager = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        settings.redis_sentinels, sentinel_kwargs=sentinel_options(settings)
    )
    primary = manager.master_for(  # type: ignore[no-untyped-call]
        _service(settings), redis_class=_SentinelPrimary, **primary_options(settings), **options
    )
    primary.sentinels = manager
    return cast(redis.Redis, primary)


def connect_async(
    settings: Settings, *, max_connections: int, socket_timeout: float
) -> redis.asyncio.Redis:
    """``connect``'s asyncio twin, for ``approvals api``."""
    if not settings.redis_sentinels:
        return redis.asyncio.Redis.from_url(
            settings.redis_url, max_connections=max_connections, socket_timeout=socket_timeout
        )
    manager = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        settings.redis_sentinels, sentinel_kwargs=sentinel_options(settings)
    )
    primary = manager.master_for(
        _service(settings),
        redis_class=_AsyncSentinelPrimary,
        max_connections=max_connections,
        socket_timeout=socket_timeout,
        **primary_options(settings),
    )
    primary.sentinels = manager
    return cast(redis.asyncio.Redis, primary)


class _SentinelPrimary(redis.Redis):
    """The primary's client, which closes its Sentinels' clients with its own (redis-py
    leaves them to whoever made them)."""

    sentinels: redis.sentinel.Sentinel | None = None

    def close(self) -> None:
        super().close()
        if self.sentinels is not None:
            self.sentinels.close()


class _AsyncSentinelPrimary(redis.asyncio.Redis):
    """``_SentinelPrimary`` for asyncio."""

    sentinels: redis.asyncio.sentinel.Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinels is not None:
            await self.sentinels.aclose()


def primary_options(settings: Settings) -> dict[str, Any]:
    """What ``REDIS_URL`` still says when the Sentinels say where: the database, the user,
    the password, TLS (``rediss://``) and its ``ssl_*`` options."""
    options: dict[str, Any] = parse_url(settings.redis_url)  # type: ignore[no-untyped-call]
    for where in ("host", "port", "path"):
        options.pop(where, None)
    if options.pop("connection_class", None) is SSLConnection:
        options["ssl"] = True
    return options


def sentinel_options(settings: Settings) -> dict[str, Any]:
    """How to reach the Sentinels themselves: their own user and password, and TLS
    (``REDIS_SENTINEL_TLS``, with the ``ssl_*`` options of ``REDIS_URL``)."""
    options: dict[str, Any] = {
        "socket_timeout": SENTINEL_TIMEOUT,
        "socket_connect_timeout": SENTINEL_TIMEOUT,
        "username": settings.redis_sentinel_username,
        "password": settings.redis_sentinel_password,
    }
    if settings.redis_sentinel_tls:
        tls = {k: v for k, v in primary_options(settings).items() if k.startswith("ssl")}
        options.update(tls, ssl=True)
    return options


def sentinel_clients(settings: Settings, timeout: float) -> list[tuple[str, redis.Redis]]:
    """A client for each Sentinel, by its ``host:port`` (for ``approvals doctor``)."""
    options = {**sentinel_options(settings), "socket_timeout": timeout}
    options["socket_connect_timeout"] = timeout
    return [
        (f"{host}:{port}", redis.Redis(host=host, port=port, decode_responses=True, **options))
        for host, port in settings.redis_sentinels
    ]


def node_client(settings: Settings, host: str, port: int, timeout: float) -> redis.Redis:
    """A client for one Redis node (a replica, say) with ``REDIS_URL``'s database, user,
    password and TLS (for ``approvals doctor``)."""
    options = {**primary_options(settings), "socket_timeout": timeout}
    return redis.Redis(host=host, port=port, socket_connect_timeout=timeout, **options)


def describe(settings: Settings) -> str:
    """Where the clients of ``connect`` go, fit to print (no password)."""
    if not settings.redis_sentinels:
        return safe_url(settings.redis_url)
    sentinels = ",".join(f"{host}:{port}" for host, port in settings.redis_sentinels)
    return f"the primary of {settings.redis_sentinel_service!r} (Sentinels {sentinels})"


def _service(settings: Settings) -> str:
    if not settings.redis_sentinel_service:  # Settings.from_env refuses this; a hand-built one
        raise ConfigError("REDIS_SENTINELS is set: set REDIS_SENTINEL_SERVICE too")
    return settings.redis_sentinel_service


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
