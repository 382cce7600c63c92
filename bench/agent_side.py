"""The agent's side of a pause: B3 (PauseChain raised → ``run_agent`` returns) and B7 (Redis
memory per waiting approval over the bytes of its history)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from approvals import store
from bench.harness import Phase, memory_by_family, used_memory
from bench.loop import pause


@dataclass
class PauseCost:
    size: int
    samples: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    stored_bytes: list[int] = field(default_factory=list)


def run_pause_cost(phase: Phase, size: int, samples: int, previewed: bool = False) -> PauseCost:
    """B3 at one history size, each sample beside one SET of the same bytes (the floor).

    ``previewed``: the gated tool's gate computes a preview (``bench.tools.plan_preview``)
    when it pauses; the floor then also SETs the preview's bytes, in the same round trip.
    """
    result = PauseCost(size)
    for i in range(samples + 1):  # the first one warms up
        approval_id, paused_at, returned_at = pause(phase, size, f"b3-{size}-{i}", previewed)
        history = phase.conn.get(store.keys.history_key(approval_id))
        assert isinstance(history, bytes)
        writes = {"bench:floor": history}
        if previewed:
            preview = phase.conn.get(store.keys.preview_key(approval_id))
            assert isinstance(preview, bytes), "the whole preview is stored apart"
            writes["bench:floor:preview"] = preview
        started = time.perf_counter()
        phase.conn.mset(writes)
        floor = (time.perf_counter() - started) * 1000
        if i:
            result.samples.append((returned_at - paused_at) * 1000)
            result.floor.append(floor)
            result.stored_bytes.append(len(history))
    phase.conn.delete("bench:floor", "bench:floor:preview")
    return result


def run_memory(phase: Phase, count: int, size: int) -> dict[str, Any]:
    """B7: ``count`` approvals paused through ``run_agent`` with their cards posted.

    Returns the growth of Redis's ``used_memory`` per approval over the stored history bytes,
    and ``MEMORY USAGE`` by key family.
    """
    phase.idle()
    before, families_before = used_memory(phase.conn), memory_by_family(phase.conn)
    ids = [pause(phase, size, f"b7-{size}-{i}")[0] for i in range(count)]
    phase.idle(timeout=300)
    after, families = used_memory(phase.conn), memory_by_family(phase.conn)
    stored = sum(int(phase.conn.strlen(store.keys.history_key(i))) for i in ids)
    grown = {k: v - families_before.get(k, 0) for k, v in families.items()}
    per_approval = {k: round(v / count) for k, v in grown.items() if v >= count}
    return {
        "ratio": (after - before) / stored,
        "used_memory_per_approval": round((after - before) / count),
        "history_bytes_per_approval": round(stored / count),
        "memory_usage_per_approval_by_key": per_approval,
    }
