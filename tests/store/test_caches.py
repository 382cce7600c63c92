"""Caches of Slack lookups (user groups).

Against a private real redis-server, a fresh database per test."""

from __future__ import annotations

import pytest

from approvals import store


def test_a_cached_user_group_is_read_back_until_it_expires(conn):
    """Group members are cached with a time to live; an unknown group is not cached."""
    store.caches.cache_members(conn, "S1", ["UA", "UB"], ttl=60)
    assert store.caches.cached_members(conn, "S1") == ["UA", "UB"]
    assert 0 < conn.ttl(f"{store.keys.PREFIX}usergroup:S1") <= 60
    assert store.caches.cached_members(conn, "S2") is None


def test_an_empty_group_is_cached_as_empty(conn):
    """A group with no members is cached as an empty list, not as missing."""
    store.caches.cache_members(conn, "S1", [], ttl=60)
    assert store.caches.cached_members(conn, "S1") == []


@pytest.mark.parametrize("stored", ['{"UA": 1}', '["UA", 2]', '"UA"'])
def test_a_malformed_group_cache_is_ignored(conn, stored):
    """A cached value that is not a list of ids is treated as not cached."""
    conn.set(f"{store.keys.PREFIX}usergroup:S1", stored)
    assert store.caches.cached_members(conn, "S1") is None
