"""B11: the primary SIGKILLed → the first decision recorded on the new primary, beside
Sentinel's own detection and promotion measured in the same run.

A primary, two replicas and three Sentinels (``tests/sentinels.py``); approvals written and
confirmed by a replica (``APPROVALS_MIN_REPLICAS=1``) before the kill. The figure is from the
kill to the first ``review.decide`` (the function the Slack buttons call, on a client given
only the Sentinels) that returns; the floor is from the kill to the first Sentinel naming the
new primary. Every approval written before the kill must still be there afterwards.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import redis

from approvals import store
from approvals.calls import external
from approvals.calls.external import ExternalRequest
from approvals.config import Settings
from approvals.decisions.review import decide
from approvals.models import DecisionKind, Status
from tests.processes import redis_binary
from tests.sentinels import SERVICE, Topology, start_topology

#: Sentinel's settings for the run: how long a silent primary takes to count as down, and
#: the bound on one failover attempt.
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
#: Approvals written (and confirmed by a replica) before each kill.
WRITTEN = 20


@dataclass
class Failovers:
    samples: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    #: Approvals written before a kill and missing after it, or decisions not recorded.
    failures: int = 0


def run_failover(folder: Path, rounds: int, env: dict[str, str]) -> Failovers:
    """``rounds`` failovers, each on a topology of its own."""
    result = Failovers()
    for n in range(rounds):
        topology = start_topology(
            redis_binary(),
            folder / f"failover-{n}",
            down_after_ms=DOWN_AFTER_MS,
            failover_timeout_ms=FAILOVER_TIMEOUT_MS,
        )
        try:
            _one(topology, env, result)
        finally:
            topology.stop()
    return result


def _one(topology: Topology, env: dict[str, str], result: Failovers) -> None:
    settings = Settings.from_env({**env, **topology.env(db=0), "APPROVALS_MIN_REPLICAS": "1"})
    conn = store.connection.connect(settings)
    try:
        request = ExternalRequest("bench_tool", {"n": 1}, "bench")
        ids = [external.ask(conn, settings, request)[0].id for _ in range(WRITTEN)]
        if not store.replication.replicated(conn, settings):
            raise RuntimeError("no replica confirmed the approvals before the kill")
        promoted: list[float] = []
        old_port = topology.primary_port()
        watching = threading.Thread(target=_watch, args=(topology, old_port, promoted))
        killed = time.perf_counter()
        topology.kill_primary()
        watching.start()
        decided = _first_decision(conn, settings, ids[0])
        watching.join(60)
        result.samples.append((decided - killed) * 1000)
        if promoted:
            result.floor.append((promoted[0] - killed) * 1000)
        result.failures += _lost(settings, ids)
    finally:
        conn.close()


def _watch(topology: Topology, old_port: int, promoted: list[float]) -> None:
    """When the first Sentinel names a primary other than the killed one."""
    clients = [topology.sentinel(i) for i in range(len(topology.sentinels))]
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            for client in clients:
                try:
                    address = client.sentinel_get_master_addr_by_name(SERVICE)
                except redis.RedisError:
                    continue
                if address and int(cast(tuple[str, int], address)[1]) != old_port:
                    promoted.append(time.perf_counter())
                    return
            time.sleep(0.002)
    finally:
        for client in clients:
            client.close()


def _first_decision(conn: redis.Redis, settings: Settings, approval_id: str) -> float:
    """When ``decide`` first returns (each failed try is what a person would retry)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            decide(conn, settings, approval_id, DecisionKind.APPROVE, "UBENCH")
            return time.perf_counter()
        except redis.RedisError:
            time.sleep(0.005)
    raise RuntimeError("no decision was recorded within 60 s of the kill")


def _lost(settings: Settings, ids: list[str]) -> int:
    """Approvals written before the kill that the new primary lacks, and the decision if it
    is not recorded there: read through a new client, so nothing is cached."""
    conn = store.connection.connect(settings)
    try:
        missing = sum(not conn.exists(store.keys.approval_key(i)) for i in ids)
        decided = store.records.load(conn, ids[0]).status is Status.APPROVED
        return missing + (0 if decided else 1)
    finally:
        conn.close()
