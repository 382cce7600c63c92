"""The same tool as ``bench.tools.act`` with no gate, for the run that never pauses (B8)
and for the polling design's agent, which runs the tool itself once it sees a decision."""

from __future__ import annotations

import time

import llm

from bench.tools import record


def act(target: str, llm_tool_call: llm.ToolCall | None = None) -> str:
    """Do the action that needs a person's approval."""
    at = time.time()  # the tool's first line
    record("act", at, llm_tool_call, target=target)
    return f"acted on {target}"
