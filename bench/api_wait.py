"""B10: a decision → the caller waiting on ``GET /v1/approvals/{id}?wait=`` answered, with many
callers waiting at once on one ``approvals api`` process; the floor is Redis's own hand-off
(``XADD`` on one connection → ``XREAD BLOCK`` returning on another)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import httpx
import redis

from approvals.calls import external
from approvals.calls.external import ExternalRequest
from approvals.decisions.review import decide
from approvals.models import DecisionKind
from approvals.proof.tokens import create_token
from bench.harness import Phase
from tests.processes import start_api, wait_until


@dataclass
class Waits:
    samples: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    #: Callers that got no decision (a timeout, an error, a wrong answer): any fails it.
    failures: int = 0


def run_api_wait(phase: Phase, callers: int) -> Waits:
    """``callers`` approvals, each with a caller waiting; decided one after another, each once
    the previous caller has its answer (people decide one card at a time: the figure is one
    decision's latency while all the others still wait, not how fast a burst drains)."""
    api, url = start_api(phase.env, phase.folder / "api.log")
    try:
        _, token = create_token(phase.conn, "bench")
        request = ExternalRequest("bench_tool", {"n": 1}, "bench")
        ids = [external.ask(phase.conn, phase.settings, request)[0].id for _ in range(callers)]
        decided: dict[str, float] = {}
        answered: dict[str, float] = {}
        done = {approval_id: threading.Event() for approval_id in ids}
        blocked = phase.conn.info("clients")["blocked_clients"]
        waiting = threading.Thread(
            target=lambda: asyncio.run(_wait_all(url, token, done, answered))
        )
        waiting.start()
        wait_until(
            lambda: phase.conn.info("clients")["blocked_clients"] >= blocked + callers,
            60,
            "every caller to block",
        )
        for approval_id in ids:
            decided[approval_id] = time.perf_counter()
            decide(phase.conn, phase.settings, approval_id, DecisionKind.APPROVE, "UBENCH")
            done[approval_id].wait(30)
        waiting.join(90)
        result = Waits(failures=callers - len(answered))
        result.samples = [(answered[i] - decided[i]) * 1000 for i in ids if i in answered]
        result.floor = _handoff(phase.conn, callers)
        return result
    finally:
        api.stop()


async def _wait_all(
    url: str, token: str, done: dict[str, threading.Event], answered: dict[str, float]
) -> None:
    limits = httpx.Limits(max_connections=len(done) + 10)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=90) as http:

        async def one(approval_id: str) -> None:
            try:
                answer = await http.get(f"/v1/approvals/{approval_id}", params={"wait": 60})
                if answer.status_code == 200 and answer.json()["status"] == "approved":
                    answered[approval_id] = time.perf_counter()
            finally:  # a failed caller counts as a failure, and never holds up the others
                done[approval_id].set()

        await asyncio.gather(*(one(i) for i in done), return_exceptions=True)


def _handoff(conn: redis.Redis, count: int) -> list[float]:
    """Redis's hand-off: XADD → a blocked XREAD on another connection returns."""
    reader = redis.Redis(connection_pool=conn.connection_pool)
    samples = []
    for i in range(count):
        key = f"bench:handoff:{i}"
        got: list[float] = []

        def read(key: str = key, got: list[float] = got) -> None:
            reader.xread({key: "0"}, block=5000)
            got.append(time.perf_counter())

        thread = threading.Thread(target=read)
        thread.start()
        wait_until(lambda: conn.info("clients")["blocked_clients"] >= 1, 5, "the reader to block")
        sent = time.perf_counter()
        conn.xadd(key, {"e": "1"})
        thread.join(5)
        samples.append((got[0] - sent) * 1000)
        conn.delete(key)
    return samples
