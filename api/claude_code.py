"""``approvals hook claude-code``: Claude Code's risky steps approved in Slack.

Claude Code runs a ``PreToolUse`` command hook before each tool call: the call arrives as JSON
on stdin (``tool_name``, ``tool_input``, ``tool_use_id``, ``session_id``, ``cwd``...), and the
hook answers on stdout with ``{"hookSpecificOutput": {"hookEventName": "PreToolUse",
"permissionDecision": "allow" | "deny", "permissionDecisionReason": ..., "updatedInput": ...}}``
(a deny's reason is shown to the model). Printing nothing leaves the call to Claude Code's
own permission rules.

Calls the rules pick (``--tools``, narrowed for ``Bash`` by ``--command-pattern``) are asked
through ``approvals api`` and wait for a person. Every failure denies: bad input, the API
unreachable or refusing, no decision in time. A hook that allowed on error would let the very
command someone meant to stop run while Slack was down.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from approvals.client import Client
from approvals.config import Settings

DEFAULT_TOOLS = "Bash|Write|Edit|MultiEdit"
#: Tools whose input names a file they write.
WRITERS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})


@dataclass(frozen=True)
class HookRules:
    """Which calls need a person."""

    tools: re.Pattern[str]
    command_pattern: re.Pattern[str] | None = None
    #: Writes inside the session's working directory pass; only writes outside it ask.
    project_writes_pass: bool = False

    def needs_person(self, event: dict[str, Any]) -> bool:
        name = str(event.get("tool_name", ""))
        if not self.tools.fullmatch(name):
            return False
        tool_input = event.get("tool_input")
        if not isinstance(tool_input, dict):
            return True  # a picked tool with odd input still asks
        if name == "Bash" and self.command_pattern is not None:
            return bool(self.command_pattern.search(str(tool_input.get("command", ""))))
        if name in WRITERS and self.project_writes_pass:
            return not _inside(str(tool_input.get("file_path", "")), str(event.get("cwd", "")))
        return True


def _inside(path: str, project: str) -> bool:
    if not path or not project:
        return False
    real, root = os.path.realpath(path), os.path.realpath(project)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def run_hook(raw: str, settings: Settings, rules: HookRules, timeout: float) -> str:
    """The hook's stdout for one call (empty: not ours to decide). Never raises: denies."""
    try:
        event = json.loads(raw)
        if not isinstance(event, dict):
            raise ValueError("the hook input is not a JSON object")
        if not rules.needs_person(event):
            return ""
        return json.dumps(_ask(event, settings, timeout))
    except Exception as exc:
        return json.dumps(deny(f"approvals could not get a decision ({exc}); denied to be safe"))


def _ask(event: dict[str, Any], settings: Settings, timeout: float) -> dict[str, Any]:
    if not settings.api_token:
        raise ValueError("APPROVALS_API_TOKEN is not set")
    tool = str(event.get("tool_name", ""))
    tool_input = event.get("tool_input")
    arguments = tool_input if isinstance(tool_input, dict) else {"input": tool_input}
    with Client(settings.api_url, settings.api_token) as client:
        made = client.request(
            _tool_name(tool),
            arguments,
            summary=_summary(tool, arguments)[:500],
            preview=_preview(event)[:10_000],
            schema=schema_of(arguments),
            expires_in=max(timeout, 1.0),
            idempotency_key=str(event.get("tool_use_id") or "") or None,
        )
        answer = client.wait(made["id"], timeout=timeout)
    return decision_output(answer, arguments)


def schema_of(arguments: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema typing each input as its value is, so the Edit modal offers a text box for
    a command or a path (an untyped argument is edited as JSON)."""
    kinds = {str: "string", bool: "boolean", int: "integer", float: "number"}
    properties = {
        name: {"type": kinds[type(value)]}
        for name, value in arguments.items()
        if type(value) in kinds
    }
    return {"type": "object", "properties": properties}


def _tool_name(tool: str) -> str:
    """Claude Code's tool names (``mcp__server__tool`` too) within the API's character set."""
    return re.sub(r"[^A-Za-z0-9_.:/-]", "_", tool)[:200] or "unknown"


def _summary(tool: str, arguments: dict[str, Any]) -> str:
    if tool == "Bash":
        return f"Claude Code wants to run: {arguments.get('command', '')}"
    if "file_path" in arguments:
        return f"Claude Code wants to {tool.lower()} {arguments['file_path']}"
    return f"Claude Code wants to use {tool}"


def _preview(event: dict[str, Any]) -> str:
    lines = [f"*Working directory:* `{event.get('cwd', '?')}`"]
    if event.get("session_id"):
        lines.append(f"*Session:* `{event['session_id']}`")
    return "\n".join(lines)


def decision_output(answer: dict[str, Any], proposed: dict[str, Any]) -> dict[str, Any]:
    """The hook's answer for a decided (or still pending) approval."""
    decision = answer.get("decision") or {}
    who = decision.get("actor_name") or decision.get("actor") or "a reviewer"
    status = answer.get("status")
    if status == "approved":
        return allow(f"approved in Slack by {who}")
    if status == "edited":
        return allow(f"approved in Slack by {who}, edited", decision.get("arguments") or proposed)
    if status == "rejected":
        reason = decision.get("reason")
        return deny(f"rejected in Slack by {who}" + (f": {reason}" if reason else ""))
    if status == "responded":
        return deny(f"not run; {who} answered instead: {decision.get('response', '')}")
    if status == "expired" or status == "pending":
        return deny("nobody approved this in time; it was not run")
    return deny(f"this request is {status}; it was not run")


def allow(reason: str, updated_input: dict[str, Any] | None = None) -> dict[str, Any]:
    output: dict[str, Any] = {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": reason,
    }
    if updated_input is not None:
        output["updatedInput"] = updated_input
    return {"hookSpecificOutput": output}


def deny(reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }
