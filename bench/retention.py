"""B9: finished approvals pass through retention into the archive.

Redis must come back to what an empty instance plus the approvals still waiting take, the
sweep must not delay the bot's answers to clicks made while it works, and the archive must
hold every finished approval, queryable.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, cast

import redis
import sqlalchemy as sa

from approvals import store
from approvals.calls.agent import new_approval_id
from approvals.models import Approval, RunResult, Status, result_to_dict
from approvals.ops import archive, retention
from bench.bot_http import FILL_BATCH, Bursts, _Batch, run_burst
from bench.harness import Phase, used_memory
from bench.loop import pause
from tests.processes import wait_until

#: How long ago the filled approvals finished: past ``APPROVALS_RETENTION``'s default.
LONG_AGO = 31 * 24 * 3600


def fill(phase: Phase, count: int, size: int, finished: bool) -> float:
    """``count`` approvals with ``size``-byte histories, copies of one real pause, written
    key for key as the store writes them; ``finished`` ones completed a month ago. Returns
    the seconds the writes took."""
    template_id, _, _ = pause(phase, size, f"b9-{new_approval_id()}")
    phase.idle()
    template = store.records.load(phase.conn, template_id)
    history = store.records.load_history(phase.conn, template_id)
    result = json.dumps(result_to_dict(RunResult(Status.COMPLETED, text="Done.")))
    started = time.perf_counter()
    batch = _Batch(phase.conn)
    client = cast(redis.Redis, batch)
    ended = time.time() - LONG_AGO
    for i in range(count):
        copy = dataclasses.replace(template, id=new_approval_id())
        store.records.create(client, copy, history)
        if finished:
            _finish(batch, copy, result, ended)
        if (i + 1) % FILL_BATCH == 0:
            batch.pipe.execute()
    batch.pipe.execute()
    return time.perf_counter() - started


def _finish(batch: _Batch, approval: Approval, result: str, ended: float) -> None:
    """What a resume that completed leaves: the status, the result, the retention indexes."""
    batch.hset(
        store.keys.approval_key(approval.id), mapping={"status": "completed", "result": result}
    )
    batch.zrem(store.keys.PENDING_KEY, approval.id)
    batch.zadd(store.keys.FINISHED_KEY, {approval.id: ended})
    batch.zadd(store.keys.FINISHED_HISTORY_KEY, {approval.id: ended})


def due(phase: Phase) -> int:
    """Finished approvals whose record retention should have removed by now."""
    until = retention.approval_cutoff(phase.settings, time.time())
    return int(phase.conn.zcount(store.keys.FINISHED_KEY, "-inf", repr(until)))


def swept(phase: Phase, timeout: float) -> float:
    """Wait until retention has nothing due left; returns the seconds it took."""
    started = time.perf_counter()

    def done() -> bool:
        phase.check_alive()
        return not due(phase)

    wait_until(done, timeout, "retention to sweep every finished approval", interval=0.2)
    return time.perf_counter() - started


def run_memory(phase: Phase, finished: int, waiting: int, size: int) -> dict[str, Any]:
    """Redis's memory: empty, with ``waiting`` approvals waiting, with ``finished`` more
    finished a month ago, and after retention swept them."""
    phase.idle()
    empty = used_memory(phase.conn)
    fill(phase, waiting, size, finished=False)
    phase.idle()
    with_waiting = used_memory(phase.conn)
    fill_seconds = fill(phase, finished, size, finished=True)
    full = used_memory(phase.conn)
    seconds = swept(phase, timeout=max(120.0, finished / 50))
    phase.idle()
    after = used_memory(phase.conn)
    return {
        "ratio": after / with_waiting,
        "empty_bytes": empty,
        "with_waiting_bytes": with_waiting,
        "full_bytes": full,
        "after_bytes": after,
        "fill_seconds": round(fill_seconds, 1),
        "sweep_seconds": round(seconds, 1),
        "swept_per_second": round(finished / seconds) if seconds else None,
    }


def run_clicks(
    phase: Phase, finished: int, size: int, rounds: int, clicks: int
) -> tuple[Bursts, Bursts, bool]:
    """B2's bursts of clicks, first with nothing to sweep, then right after ``finished``
    approvals became due, while retention works them off. Returns both, and whether the
    sweep was still at work when the last burst ended."""
    quiet = run_burst(phase, rounds, clicks)
    fill(phase, finished, size, finished=True)
    beside = run_burst(phase, rounds, clicks)
    still = bool(due(phase))
    swept(phase, timeout=max(120.0, finished / 50))
    return quiet, beside, still


def run_archive(url: str) -> dict[str, Any]:
    """How many approvals the archive holds, and two queries people would run on it (ms)."""
    opened = archive.Archive.open(url)
    try:
        started = time.perf_counter()
        count = opened.count()
        counted = (time.perf_counter() - started) * 1000
        with opened.engine.connect() as connection:
            some = connection.execute(sa.select(archive.APPROVALS.c.id).limit(1)).scalar_one()
            started = time.perf_counter()
            by_tool = connection.execute(
                sa.select(archive.APPROVALS.c.tool, sa.func.count())
                .where(archive.APPROVALS.c.status == "completed")
                .group_by(archive.APPROVALS.c.tool)
            ).all()
            grouped = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        assert opened.load(some) is not None and opened.audit_trail(some)
        loaded = (time.perf_counter() - started) * 1000
    finally:
        opened.close()
    return {
        "archived": count,
        "count_ms": round(counted, 1),
        "completed_by_tool_ms": round(grouped, 1),
        "completed_by_tool": [list(row) for row in by_tool],
        "show_one_ms": round(loaded, 1),
    }
