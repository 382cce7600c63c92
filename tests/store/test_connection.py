"""The store's Redis clients.

Against a private real redis-server, a fresh database per test."""

from __future__ import annotations

from approvals import store


def test_connect_reaches_the_configured_database(settings, conn):
    """connect() talks to the database named by REDIS_URL."""
    client = store.connection.connect(settings)
    client.set("probe", "1")
    assert conn.get("probe") == b"1"
    client.close()
