"""Redis, and nothing else: the only code that talks to it, one module per thing it keeps.

Every key's name is in ``keys`` (one table: ``keys.KEYS``, also in docs/architecture.md);
each module reads and writes its own keys: ``records`` the approval hash and its history,
``transitions`` the one atomic move between statuses (a Lua compare-and-set), ``owed`` what a
decision leaves to carry out, ``turns`` the calls that share a card, ``audit`` the hash-chained
trail and its outbox entries, ``runs`` a run's pauses, events and outcome, ``callers`` what the
API's callers hold (tokens, idempotency keys, rates, the answers they wait on), ``grants``,
``leases`` (a live resume), ``deadlines``, ``retention``, ``pending`` (the lists people see),
``metrics``, ``caches``, ``pacing`` (Slack's pace per channel), ``outbox`` (webhook
receivers' state), ``workers`` (what the live workers import tools from) and ``queue`` (the
worker's jobs, on RQ). ``connection`` makes the clients; ``replication`` asks replicas to
confirm.
"""

from approvals.store import (
    audit,
    caches,
    callers,
    connection,
    deadlines,
    grants,
    keys,
    leases,
    metrics,
    outbox,
    owed,
    pacing,
    pending,
    queue,
    records,
    replication,
    retention,
    runs,
    transitions,
    turns,
    workers,
)

__all__ = [
    "audit",
    "caches",
    "callers",
    "connection",
    "deadlines",
    "grants",
    "keys",
    "leases",
    "metrics",
    "outbox",
    "owed",
    "pacing",
    "pending",
    "queue",
    "records",
    "replication",
    "retention",
    "runs",
    "transitions",
    "turns",
    "workers",
]
