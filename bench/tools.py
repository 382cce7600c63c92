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


#: The characters of ``act_previewed``'s preview (B3 preview).
PREVIEW_CHARS = 10 * 1024


def plan_preview(target: str) -> str:
    """What ``act_previewed`` would do: a unified diff of ``PREVIEW_CHARS`` characters."""
    head = f"--- a/{target}\n+++ b/{target}\n@@ -1,200 +1,200 @@\n"
    body = "".join(f"-old line {n}\n+new line {n}\n" for n in range(1000))
    return (head + body)[:PREVIEW_CHARS]


@requires_approval(summary="Act on {target}", preview=plan_preview)
def act_previewed(target: str) -> str:
    """``act`` with a preview: what it would do, computed when it pauses."""
    return f"acted on {target}"
