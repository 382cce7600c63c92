"""The benchmark agent's tools. ``act`` is gated; the first thing it does is read the clock.

Every call is appended to the JSONL file named by ``BENCH_TOOL_LOG`` (when set) with its wall
clock time (``time.time()``, the same clock in every process on this machine), its pid and its
``tool_call_id``: that is how the benchmark learns when a gated tool started in the worker.
Without ``BENCH_TOOL_LOG`` the tools do nothing but return, as an "instant tool" should.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

import llm

from approvals import requires_approval

LOG_ENV = "BENCH_TOOL_LOG"


def record(tool: str, at: float, call: llm.ToolCall | None, **arguments: Any) -> None:
    """Append one call to the tool log (a no-op without ``BENCH_TOOL_LOG``)."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    entry = {
        "tool": tool,
        "at": at,
        "call_id": call.tool_call_id if call is not None else None,
        "pid": os.getpid(),
        **arguments,
    }
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def blob(size: int) -> str:
    """Return ``size`` characters (a big tool output, such as a file that was read)."""
    at = time.time()
    record("blob", at, None, size=size)
    return "x" * size


@requires_approval(summary="Act on {target}")
def act(target: str, llm_tool_call: llm.ToolCall | None = None) -> str:
    """Do the action that needs a person's approval."""
    at = time.time()  # the tool's first line: B1 ends here
    record("act", at, llm_tool_call, target=target)
    return f"acted on {target}"


def state_of(target: str) -> str:
    """A fingerprint as a tool's author would write one (B13): the SHA-256 and the mtime of
    the file ``target`` names."""
    with open(target, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    return f"{digest}:{os.stat(target).st_mtime_ns}"
