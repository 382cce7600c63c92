"""``approvals hook claude-code`` fed Claude Code's documented PreToolUse input, end to end through
the real API, bot, worker and Slack stand-in; its output is checked against the documented
hook output (``hookSpecificOutput.permissionDecision``)."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

from approvals import store
from approvals.api.claude_code import (
    REPORT_LIMIT,
    HookRules,
    clip,
    cut_lines,
    idempotency_key_of,
    run_hook,
)
from approvals.config import Settings
from approvals.models import Status
from tests.api.conftest import Stack
from tests.e2e import (
    block_text,
    card_of,
    click,
    reply_containing,
    submit_edit,
    submit_reject,
    wait_status,
)
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


def _post(
    stack: Stack, token: str, event: dict[str, Any], *args: str, url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``approvals hook claude-code`` run as Claude Code's PostToolUse hook (it must exit 0)."""
    env = {**stack.env, "APPROVALS_API_URL": url or stack.api_url, "APPROVALS_API_TOKEN": token}
    done = subprocess.run(
        approvals_command("hook", "claude-code", *args),
        input=json.dumps(event),
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (0, ""), done
    return done


def _after(event: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The PostToolUse (or PostToolUseFailure) input for the call ``event`` asked about."""
    return {**event, "hook_event_name": "PostToolUse", **fields}


def test_post_tool_use_reports_what_the_approved_command_did(stack: Stack) -> None:
    """After an approved command ran, PostToolUse posts its output (clipped: beginning and
    end) as the result: it shows in the card's thread and the audit trail, once."""
    token = stack.token("claude-code-post")
    asked = _event("rm -rf build/cache", session_id="sess-post")
    hook = _hook(stack, token, asked)
    found = wait_until(lambda: stack.client(token).pending(), 20, "the card")
    card = card_of(stack.slack, found[0]["id"])
    click(stack.slack, stack.bot_url, "approve", found[0]["id"], card_ts=card.ts)
    assert _output(hook)["permissionDecision"] == "allow"

    listing = "".join(f"removed build/cache/file{n}.o\n" for n in range(500))
    response = {"stdout": listing + "removed 500 files", "stderr": "", "interrupted": False}
    _post(stack, token, _after(asked, tool_response=response))
    reply = reply_containing(stack.slack, card.ts, "removed 500 files")
    assert "characters left out" in block_text(reply)
    approval = store.records.load(stack.conn, found[0]["id"])
    assert approval.status is Status.COMPLETED
    assert approval.result is not None and len(approval.result.tool_output or "") <= REPORT_LIMIT
    (reported,) = [
        e
        for e in store.audit.audit_trail(stack.conn, approval.id)
        if e["event"] == "result_reported"
    ]
    assert reported["ok"] == "true"  # audit details are text
    again = _post(stack, token, _after(asked, tool_response=response))  # Claude Code retried
    assert again.stderr == ""  # reported already: left alone, quietly
    assert store.records.load(stack.conn, approval.id).status is Status.COMPLETED


def test_post_tool_use_failure_reports_an_error(stack: Stack) -> None:
    """PostToolUseFailure after an approved command: reported as failed, with the error."""
    token = stack.token("claude-code-post-failure")
    asked = _event("rm -rf /var/cache/app", session_id="sess-fail")
    hook = _hook(stack, token, asked)
    found = wait_until(lambda: stack.client(token).pending(), 20, "the card")
    card = card_of(stack.slack, found[0]["id"])
    click(stack.slack, stack.bot_url, "approve", found[0]["id"], card_ts=card.ts)
    assert _output(hook)["permissionDecision"] == "allow"
    failed = {**asked, "hook_event_name": "PostToolUseFailure", "error": "Permission denied"}
    _post(stack, token, failed)
    reply_containing(stack.slack, card.ts, "Permission denied")
    assert wait_status(stack.conn, found[0]["id"], Status.FAILED).result is not None


def test_post_tool_use_never_stands_in_the_way(stack: Stack) -> None:
    """A call that needed no approval, one never asked about, and an API that is down: exit
    0 with no output every time, nothing asked or reported, and the reason on stderr."""
    token = stack.token("claude-code-post-quiet")
    client = stack.client(token)
    unneeded = _after(_event("ls -la"), tool_response={"stdout": "a b", "stderr": ""})
    assert _post(stack, token, unneeded, "--command-pattern", r"\brm\b").stderr == ""
    never_asked = _after(_event("rm -rf nothing"), tool_response={"stdout": "", "stderr": ""})
    assert _post(stack, token, never_asked).stderr == ""
    down = _post(stack, token, never_asked, url=f"http://127.0.0.1:{free_port()}")
    assert "could not report the result" in down.stderr
    bad_option = _post(stack, token, never_asked, "--tools", "(")
    assert "misconfigured" in bad_option.stderr
    assert client.pending() == [] and client.find("claude-code:sess-1:x") is None


def test_clip_keeps_the_beginning_and_the_end() -> None:
    """Long output is cut to REPORT_LIMIT, keeping both ends; the key is per session and call."""
    text = "a" * 3000 + "b" * 3000
    clipped = clip(text)
    assert len(clipped) <= REPORT_LIMIT
    assert clipped.startswith("a" * (REPORT_LIMIT // 4))
    assert clipped.endswith("b" * (REPORT_LIMIT // 2))
    assert clip("short") == "short"
    assert idempotency_key_of({"session_id": "s", "tool_use_id": "t"}) == "claude-code:s:t"
    assert idempotency_key_of({"session_id": "s"}) is None


def test_the_card_shows_the_real_diff_of_the_file_and_the_command(stack: Stack, tmp_path) -> None:
    """Edit, MultiEdit and Write: the card shows the unified diff of the file as Claude Code is
    about to change it (the file read, the edits applied), as a code block with its +/- lines;
    Bash: the command as a code block. The file is untouched until Claude Code runs it."""
    token = stack.token("claude-code-diffs")
    source = tmp_path / "app.py"
    source.write_text("DEBUG = True\nPORT = 80\nNAME = 'a'\n", encoding="utf-8")
    events = {
        "Edit": _event("", "Edit", cwd=str(tmp_path), tool_input={
            "file_path": "app.py", "old_string": "DEBUG = True", "new_string": "DEBUG = False"}),
        "MultiEdit": _event("", "MultiEdit", cwd=str(tmp_path), tool_input={
            "file_path": str(source), "edits": [
                {"old_string": "PORT = 80", "new_string": "PORT = 8080"},
                {"old_string": "NAME = 'a'", "new_string": "NAME = 'b'"}]}),
        "Write": _event("", "Write", cwd=str(tmp_path), tool_input={
            "file_path": str(tmp_path / "new.txt"), "content": "hello\n"}),
        "Bash": _event("rm -rf build && echo '<done>'", cwd=str(tmp_path)),
    }  # fmt: skip
    for number, event in enumerate(events.values()):
        event["tool_use_id"] = f"toolu_diff_{number}"
    hooks = {tool: _hook(stack, token, event, "--timeout", "30") for tool, event in events.items()}
    client = stack.client(token)
    found = wait_until(lambda: len(client.pending()) == 4 and client.pending(), 20, "4 cards")
    cards = {a["tool"]: card_of(stack.slack, a["id"]) for a in found}
    edit = block_text(cards["Edit"])
    assert "```" in edit and "-DEBUG = True" in edit and "+DEBUG = False" in edit
    assert "PORT = 80" in edit  # the diff's context lines
    multi = block_text(cards["MultiEdit"])
    assert all(line in multi.splitlines() for line in
               ("-PORT = 80", "+PORT = 8080", "-NAME = 'a'", "+NAME = 'b'"))  # fmt: skip
    assert "+hello" in block_text(cards["Write"]) and "/dev/null" in block_text(cards["Write"])
    bash = block_text(cards["Bash"])
    assert "```\nrm -rf build &amp;&amp; echo '&lt;done&gt;'\n```" in bash
    assert source.read_text(encoding="utf-8").startswith("DEBUG = True")
    stored = store.records.load(stack.conn, next(a["id"] for a in found if a["tool"] == "Edit"))
    assert stored.preview_kind == "diff" and stored.preview_sha256
    for approval in found:
        click(
            stack.slack,
            stack.bot_url,
            "approve",
            approval["id"],
            card_ts=cards[approval["tool"]].ts,
        )
    for process in hooks.values():
        assert _output(process)["permissionDecision"] == "allow"


def test_a_long_diff_is_cut_after_a_whole_line_within_the_apis_limit() -> None:
    """A preview longer than the API takes keeps whole lines and says how many are left."""
    diff = "--- a/x\n+++ b/x\n@@ -0,0 +1,3000 @@\n" + "".join(f"+line {n}\n" for n in range(3000))
    cut = cut_lines(diff, 10_000)
    kept = cut.splitlines()
    assert len(cut) <= 10_000 and kept[-2].startswith("+line ")
    shown = int(kept[-2].removeprefix("+line ")) + 1
    assert kept[-1] == f"… ({3000 - shown} more lines not shown)"
    assert cut_lines("short", 10) == "short"
