"""``approvals hook claude-code`` fed Claude Code's documented PreToolUse input, end to end through
the real API, bot, worker and Slack stand-in; its output is checked against the documented
hook output (``hookSpecificOutput.permissionDecision``)."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

from api.claude_code import HookRules, run_hook
from approvals.config import Settings
from tests.api.conftest import Stack
from tests.e2e import card_of, click, submit_edit, submit_reject
from tests.processes import ROOT, approvals_command, free_port, wait_until


def _event(command: str, tool: str = "Bash", **extra: Any) -> dict[str, Any]:
    """A PreToolUse hook input as Claude Code documents it."""
    return {
        "session_id": "sess-1",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/work/project",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {"command": command, "description": "clean up"},
        "tool_use_id": f"toolu_{abs(hash(command))}",
        **extra,
    }


def _hook(
    stack: Stack, token: str, event: dict[str, Any], *args: str, url: str | None = None
) -> subprocess.Popen[str]:
    """``approvals hook claude-code`` as Claude Code runs it: the event on stdin."""
    env = {**stack.env, "APPROVALS_API_URL": url or stack.api_url, "APPROVALS_API_TOKEN": token}
    process = subprocess.Popen(
        approvals_command("hook", "claude-code", *args),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert process.stdin is not None
    process.stdin.write(json.dumps(event))
    process.stdin.close()
    return process


def _output(process: subprocess.Popen[str]) -> dict[str, Any]:
    assert process.stdout is not None
    with process.stdout:
        out = process.stdout.read()
    assert process.wait(30) == 0
    decided: dict[str, Any] = json.loads(out)["hookSpecificOutput"]
    assert decided["hookEventName"] == "PreToolUse"
    return decided


def test_decisions_in_slack_become_the_hooks_allow_or_deny(stack: Stack) -> None:
    """Approve: allow; Edit: allow with the edited input; Reject: deny with the reason."""
    token = stack.token("claude-code")
    client = stack.client(token)
    hooks = {
        cmd: _hook(stack, token, _event(cmd), "--timeout", "30")
        for cmd in ("rm -rf build", "rm -rf dist", "git push --force")
    }
    found = wait_until(lambda: len(client.pending()) == 3 and client.pending(), 20, "3 cards")
    by_command = {a["id"]: a for a in found}
    ids = {}
    for approval_id in by_command:
        card = card_of(stack.slack, approval_id)
        ids[next(c for c in hooks if c in str(card.blocks))] = (approval_id, card)
    approval_id, card = ids["rm -rf build"]
    click(stack.slack, stack.bot_url, "approve", approval_id, card_ts=card.ts)
    approval_id, card = ids["rm -rf dist"]
    click(stack.slack, stack.bot_url, "edit", approval_id, card_ts=card.ts)
    edit = submit_edit(
        stack.bot_url, approval_id, {"command": "rm -rf dist/tmp", "description": "x"}
    )
    assert edit == (200, ""), edit
    approval_id, _ = ids["git push --force"]
    submit_reject(stack.bot_url, approval_id, "never force-push main")

    allowed = _output(hooks["rm -rf build"])
    assert allowed["permissionDecision"] == "allow"
    assert allowed["permissionDecisionReason"].startswith("approved in Slack by")
    edited = _output(hooks["rm -rf dist"])
    assert edited["permissionDecision"] == "allow", edited
    assert edited["updatedInput"]["command"] == "rm -rf dist/tmp"
    denied = _output(hooks["git push --force"])
    assert denied["permissionDecision"] == "deny"
    assert denied["permissionDecisionReason"].endswith("never force-push main")


def test_it_denies_when_the_api_cannot_be_reached(stack: Stack) -> None:
    """Fail closed: no API, no decision, no run."""
    token = stack.token("claude-code-offline")
    offline = _hook(stack, token, _event("rm -rf ~"), url=f"http://127.0.0.1:{free_port()}")
    decided = _output(offline)
    assert decided["permissionDecision"] == "deny"
    assert "denied to be safe" in decided["permissionDecisionReason"]


def test_rules_timeout_and_bad_input(stack: Stack) -> None:
    """Unpicked tools and unmatched commands pass (no output); no decision in time denies;
    input that is not the hook's JSON denies."""
    token = stack.token("claude-code-rules")
    settings = Settings.from_env(
        {**stack.env, "APPROVALS_API_URL": stack.api_url, "APPROVALS_API_TOKEN": token}
    )
    rules = HookRules(re.compile("Bash|Write"), re.compile(r"\brm\b"), project_writes_pass=True)
    assert run_hook(json.dumps(_event("ls -la")), settings, rules, 5) == ""
    read = _event("x", tool="Read")
    assert run_hook(json.dumps(read), settings, rules, 5) == ""
    inside = {**_event("x", tool="Write"), "tool_input": {"file_path": "/work/project/a.py"}}
    assert run_hook(json.dumps(inside), settings, rules, 5) == ""
    late = json.loads(run_hook(json.dumps(_event("rm -rf cache")), settings, rules, 1))
    assert late["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "in time" in late["hookSpecificOutput"]["permissionDecisionReason"]
    for garbage in ("not json", "[1, 2]", ""):
        bad = json.loads(run_hook(garbage, settings, rules, 1))
        assert bad["hookSpecificOutput"]["permissionDecision"] == "deny"
