"""The lists people look at: pending approvals (newest first, in pages), recent decisions,
and how many wait on each model."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import redis

from approvals.models import (
    Approval,
)
from approvals.store.connection import text
from approvals.store.keys import DECIDED_KEY, PENDING_KEY, approval_key
from approvals.store.records import load_many


def pending_models(conn: redis.Redis, batch: int = 500) -> dict[tuple[str, bool], int]:
    """How many pending approvals resume on each (model id, async) pair.

    Reads only each record's model fields, in batches: a doctor must answer with a hundred
    thousand approvals waiting.
    """
    counts: dict[tuple[str, bool], int] = {}
    ids: list[str] = []

    def count(chunk: list[str]) -> None:
        pipe = conn.pipeline(transaction=False)
        for approval_id in chunk:
            pipe.hget(approval_key(approval_id), "record")
        for raw in pipe.execute():
            try:
                record: Any = json.loads(raw) if raw else {}
                if record.get("external") is True:
                    continue  # no model resumes it
                key = (str(record["model_id"]), record.get("asynchronous") is True)
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # a corrupt record is reported where it is loaded
            counts[key] = counts.get(key, 0) + 1

    for member, _ in conn.zscan_iter(PENDING_KEY, count=batch):
        ids.append(text(member))
        if len(ids) >= batch:
            count(ids)
            ids = []
    if ids:
        count(ids)
    return counts


def pending(conn: redis.Redis, limit: int = 100) -> list[Approval]:
    """Pending approvals, newest first."""
    ids = [text(i) for i in cast(list[bytes], conn.zrevrange(PENDING_KEY, 0, limit - 1))]
    return load_many(conn, ids)


@dataclass(frozen=True)
class Page:
    """One page of a filtered list of pending approvals."""

    approvals: list[Approval]
    #: Accepted approvals after this page (a lower bound unless ``exact``).
    remaining: int
    exact: bool


def pending_page(
    conn: redis.Redis,
    keep: Callable[[Approval], bool],
    offset: int,
    count: int,
    batch: int = 100,
) -> Page:
    """One page of the pending approvals that ``keep`` accepts, newest first.

    Reads in batches and stops at the batch that fills the page, so a page costs the same
    with 10 or 10,000 approvals waiting; what remains after it is then only a lower bound.
    """
    page: list[Approval] = []
    skipped = remaining = 0
    start = 0
    while True:
        raw = cast(list[bytes], conn.zrevrange(PENDING_KEY, start, start + batch - 1))
        ids = [text(i) for i in raw]
        for approval in load_many(conn, ids):
            if not keep(approval):
                continue
            if skipped < offset:
                skipped += 1
            elif len(page) < count:
                page.append(approval)
            else:
                remaining += 1
        if len(ids) < batch:
            return Page(page, remaining, exact=True)
        if remaining:
            return Page(page, remaining, exact=False)
        start += batch


def decided_between(conn: redis.Redis, since: float, until: float) -> list[Approval]:
    """The recently decided approvals whose decision was made between the two times."""
    ids = cast(list[bytes], conn.zrangebyscore(DECIDED_KEY, since, until))
    return load_many(conn, [text(i) for i in ids])


def recent_decisions(conn: redis.Redis, limit: int = 10) -> list[Approval]:
    """The most recently decided approvals, newest first."""
    ids = [text(i) for i in cast(list[bytes], conn.zrevrange(DECIDED_KEY, 0, limit - 1))]
    return load_many(conn, ids)


def pending_count(conn: redis.Redis) -> int:
    return int(conn.zcard(PENDING_KEY))
