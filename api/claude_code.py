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

The same command also serves ``PostToolUse`` (and ``PostToolUseFailure``): after an approved
call ran, Claude Code sends the same fields plus ``tool_response`` (or ``error``), and the
hook reports it with ``POST /v1/approvals/{id}/result``, shown in the card's thread. It finds
the approval by the idempotency key the ``PreToolUse`` ask used, built from ``session_id`` and
``tool_use_id``, so no state is kept between the two runs. Reporting never stands in the
agent's way: a call that needed no approval is left alone, and any failure is written to
stderr and the hook exits 0 with no output.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from approvals import previews
from approvals.client import Client
from approvals.config import Settings
from approvals.models.preview import CALLER_PREVIEW_CHARS
from approvals.slack.limits import SECTION_TEXT

DEFAULT_TOOLS = "Bash|Write|Edit|MultiEdit"
#: The events after a call ran: reported, never decided.
POST_EVENTS = frozenset({"PostToolUse", "PostToolUseFailure"})
#: The most of a call's output reported (its beginning and its end): the card's thread shows
#: a result cut to one section, so a report within it shows both ends there.
REPORT_LIMIT = SECTION_TEXT - 500
#: Statuses of an approval whose call Claude Code was allowed to run.
ALLOWED = ("approved", "edited")
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
    """The hook's stdout for one call (empty: not ours to decide). Never raises: a
    ``PreToolUse`` that fails denies; a ``PostToolUse`` that fails only logs to stderr."""
    event = _event(raw)
    if event is not None and _is_post(event):
        report_hook(event, settings, rules)
        return ""
    try:
        if event is None:
            raise ValueError("the hook input is not a JSON object")
        if not rules.needs_person(event):
            return ""
        return json.dumps(_ask(event, settings, timeout))
    except Exception as exc:
        return json.dumps(deny(f"approvals could not get a decision ({exc}); denied to be safe"))


def failure_output(raw: str, problem: str) -> str:
    """What the hook prints when it cannot even start (a bad option): a ``PreToolUse`` denies,
    a ``PostToolUse`` prints nothing and says why on stderr."""
    event = _event(raw)
    if event is not None and _is_post(event):
        _log(f"the approvals hook is misconfigured ({problem}); the result was not reported")
        return ""
    return json.dumps(deny(f"the approvals hook is misconfigured ({problem}); denied"))


def _event(raw: str) -> dict[str, Any] | None:
    """The hook's input, or None when it is not a JSON object."""
    try:
        event = json.loads(raw)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _is_post(event: dict[str, Any]) -> bool:
    """Whether the input is a ``PostToolUse``/``PostToolUseFailure`` event (anything else,
    unreadable input included, is treated as ``PreToolUse``: it denies)."""
    return event.get("hook_event_name") in POST_EVENTS


def report_hook(event: dict[str, Any], settings: Settings, rules: HookRules) -> None:
    """Report what an approved call did to its approval. Never raises, never blocks the agent:
    a call that needed no approval, or whose approval is not found, is left alone."""
    try:
        if not rules.needs_person(event):
            return  # never asked: nothing to report (and no request to the API)
        key = idempotency_key_of(event)
        if key is None:
            return
        if not settings.api_token:
            raise ValueError("APPROVALS_API_TOKEN is not set")
        ok, output = outcome_of(event)
        with Client(settings.api_url, settings.api_token) as client:
            found = client.find(key)
            if found is None or found.get("status") not in ALLOWED:
                return  # asked under other rules, or reported already: not ours now
            client.report(found["id"], ok=ok, output=output)
    except Exception as exc:
        call = f"{event.get('tool_name', 'a tool')} ({event.get('tool_use_id', '?')})"
        _log(f"could not report the result of {call} to approvals: {exc}")


def idempotency_key_of(event: dict[str, Any]) -> str | None:
    """The approval's idempotency key: one per call of one session (None: no call id)."""
    tool_use_id = str(event.get("tool_use_id") or "")
    if not tool_use_id:
        return None
    return f"claude-code:{event.get('session_id') or ''}:{tool_use_id}"[:200]


def outcome_of(event: dict[str, Any]) -> tuple[bool, str]:
    """Whether the call went well, and its output as text, cut to ``REPORT_LIMIT``."""
    if event.get("hook_event_name") == "PostToolUseFailure":
        interrupted = " (interrupted)" if event.get("is_interrupt") else ""
        return False, clip(f"{event.get('error') or 'the tool failed'}{interrupted}")
    response = event.get("tool_response")
    ok = True
    if isinstance(response, dict):
        ok = not response.get("interrupted") and response.get("success", True) is not False
        if "stdout" in response or "stderr" in response:
            text = str(response.get("stdout") or "")
            if response.get("stderr"):
                text += ("\n" if text else "") + f"[stderr]\n{response['stderr']}"
            return ok, clip(text)
    if isinstance(response, str):
        return ok, clip(response)
    return ok, clip(json.dumps(response, ensure_ascii=False))


def clip(text: str, limit: int = REPORT_LIMIT) -> str:
    """``text`` within ``limit`` characters: its beginning and its end (where a command's
    error usually is), with how much was left out between them."""
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head - 60  # room for the marker
    marker = f"\n[... {len(text) - head - tail} characters left out ...]\n"
    return text[:head] + marker + text[-tail:]


def _log(message: str) -> None:
    sys.stderr.write(f"approvals hook: {message}\n")


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
            preview=cut_lines(_preview(event), CALLER_PREVIEW_CHARS),
            schema=schema_of(arguments),
            expires_in=max(timeout, 1.0),
            idempotency_key=idempotency_key_of(event),
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
    """What the call will do, for the card: the real diff of the file as Claude Code is about
    to change it (``Write``, ``Edit``, ``MultiEdit``), the command (``Bash``), else where it
    runs. A diff is sent as it is (the card shows it as one, ``approvals.previews``)."""
    tool_input = event.get("tool_input")
    arguments = tool_input if isinstance(tool_input, dict) else {}
    diff = file_change(str(event.get("tool_name", "")), arguments, str(event.get("cwd") or "."))
    if diff is not None:
        return diff
    lines = [f"*Working directory:* `{event.get('cwd', '?')}`"]
    if event.get("session_id"):
        lines.append(f"*Session:* `{event['session_id']}`")
    command = arguments.get("command")
    if event.get("tool_name") == "Bash" and isinstance(command, str):
        escaped = command.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        fenced = escaped.replace("```", "`\u200b``")  # Slack's escapes; no fence of its own
        lines.append(f"```\n{fenced}\n```")
    return "\n".join(lines)


def cut_lines(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, cut after a whole line, saying how many are left
    (a cut diff still reads as one)."""
    if len(text) <= limit:
        return text
    note = "\n… ({} more lines not shown)"
    kept = text[: text.rfind("\n", 0, limit - len(note) - 10) + 1] or text[: limit // 2]
    return kept.rstrip("\n") + note.format(len(text[len(kept) :].splitlines()))


def file_change(tool: str, arguments: dict[str, Any], cwd: str) -> str | None:
    """The unified diff a ``Write``, ``Edit`` or ``MultiEdit`` would make to its file (read
    now, the edits applied as Claude Code applies them), or why there is none; None for
    other tools."""
    path = arguments.get("file_path")
    if tool not in ("Write", "Edit", "MultiEdit") or not isinstance(path, str):
        return None
    target = Path(cwd, path)
    try:
        old = target.read_text(encoding="utf-8") if target.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        return f"{path}: cannot be read to show the change ({type(exc).__name__})"
    new = _edited(tool, arguments, old)
    if isinstance(new, _Refused):
        return f"{path}: {new.why}; Claude Code will refuse this edit"
    return previews.text_diff(str(target), old, new).text


@dataclass(frozen=True)
class _Refused:
    why: str


def _edited(tool: str, arguments: dict[str, Any], old: str) -> str | _Refused:
    """The file's text after the call (``_Refused`` where Claude Code would refuse it)."""
    if tool == "Write":
        content = arguments.get("content")
        return content if isinstance(content, str) else _Refused("no content to write")
    edits = arguments.get("edits") if tool == "MultiEdit" else [arguments]
    text = old
    for edit in edits if isinstance(edits, list) else []:
        if not isinstance(edit, dict):
            return _Refused("an edit is not an object")
        before, after = edit.get("old_string"), edit.get("new_string")
        if not isinstance(before, str) or not isinstance(after, str):
            return _Refused("an edit has no old_string or new_string")
        if before == "" and text == "":  # an edit that creates the file
            text = after
            continue
        count = text.count(before) if before else 0
        if count == 0:
            return _Refused("old_string is not in the file")
        if count > 1 and edit.get("replace_all") is not True:
            return _Refused(f"old_string is in the file {count} times (replace_all is not set)")
        text = text.replace(before, after, -1 if edit.get("replace_all") is True else 1)
    return text


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
