"""B13: what checking a decided call's state again (its gate's ``fingerprint``) adds to a
resume, measured where the worker does it: after the claim, before the tool."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from approvals.calls import resume
from approvals.config import Settings
from approvals.models import Approval, Decision, DecisionKind, GateOptions, ToolRef
from bench.tools import state_of

#: The file the fingerprint reads: a few kilobytes, as a config file or a migration would be.
STATE_BYTES = 4096


def run_stale_check(folder: Path, samples: int) -> tuple[list[float], list[float]]:
    """Milliseconds of the worker's check of one approved call (``resume._changed``: finding
    the fingerprint function, computing it with its time limit, comparing), each beside the
    fingerprint function called directly (the floor: the state must be read anyway)."""
    target = folder / "b11-state.txt"
    target.write_bytes(b"x" * STATE_BYTES)
    settings = dataclasses.replace(Settings.from_env({}), tool_modules=("bench",))
    approval = _approved(str(target))
    checks: list[float] = []
    floor: list[float] = []
    for i in range(samples + 1):  # the first one warms up
        started = time.perf_counter()
        changed = resume._changed(settings, approval)
        checked = time.perf_counter()
        state_of(str(target))
        done = time.perf_counter()
        assert changed == [], changed
        if i:
            checks.append((checked - started) * 1000)
            floor.append((done - checked) * 1000)
    return checks, floor


def _approved(target: str) -> Approval:
    """An approved call whose gate names ``bench.tools:state_of`` as its fingerprint."""
    arguments = {"target": target}
    return Approval(
        id="b11",
        agent="bench",
        model_id="scripted",
        tool_name="act",
        tool_call_id="tc_b11",
        arguments=arguments,
        tools=[ToolRef("act", "bench.tools:act", {})],
        channel="C0BENCH",
        policy=GateOptions(fingerprint="bench.tools:state_of"),
        fingerprint=state_of(target),
        decision=Decision(DecisionKind.APPROVE, "UBENCH", time.time(), arguments=arguments),
    )
