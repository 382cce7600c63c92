"""The ``approvals`` command as a real process: its decisions in plain text and local time, and,
when what it needs is down or refuses it, one line that says what failed, where (no password)
and what to do, and a non-zero exit; never a traceback (against a closed port or the Slack
stand-in refusing the token)."""

from __future__ import annotations

import getpass
import os
import subprocess
import time

import pytest

from approvals import run_agent, store
from tests.agents import tools
from tests.agents.scripted import calls, say, script
from tests.conftest import SIGNING_SECRET
from tests.processes import ROOT, approvals_command, free_port

PASSWORD = "s3cret-pw"


def run(env: dict[str, str], *args: str) -> tuple[int, str]:
    """Run ``approvals ARGS``; its exit code and everything it printed."""
    done = subprocess.run(
        approvals_command(*args),
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


def assert_one_line(code: int, output: str, *expected: str) -> None:
    assert code != 0, output
    assert "Traceback" not in output and "Worker failed to boot" not in output, output
    assert len(output.strip().splitlines()) == 1, output
    assert PASSWORD not in output
    for part in expected:
        assert part in output, output


@pytest.mark.parametrize(
    "args",
    [
        ("pending",),
        ("show", "0000000000000000"),
        ("approve", "0000000000000000"),
        ("tokens", "list"),
        ("worker", "--burst"),
        ("bot", "--port", "0"),
    ],
    ids=lambda args: args[0],
)
def test_with_redis_down_a_command_says_so_in_one_line(env, args):
    """Nothing listens at REDIS_URL: every command names Redis, where it looked (password
    hidden) and what to do, and exits non-zero."""
    port = free_port()
    down = {**env, "REDIS_URL": f"redis://ops:{PASSWORD}@127.0.0.1:{port}/0"}
    code, output = run(down, *args)
    where = f"redis://ops:***@127.0.0.1:{port}/0"
    assert_one_line(code, output, f"cannot reach Redis at {where}", "set REDIS_URL")


def test_the_bot_with_a_token_slack_refuses_says_so_in_one_line(env):
    """The Slack stand-in answers invalid_auth: the bot says which token is wrong, once,
    instead of each gunicorn process's traceback and "Worker failed to boot"."""
    code, output = run({**env, "SLACK_BOT_TOKEN": "xoxb-wrong"}, "bot", "--port", "0")
    assert_one_line(code, output, "the bot cannot start", "invalid_auth", "SLACK_BOT_TOKEN")


def test_the_bot_with_slack_unreachable_says_so_in_one_line(env):
    """Nothing at SLACK_API_URL: the bot names the URL (its password hidden) and what to
    check."""
    port = free_port()
    url = f"http://user:{PASSWORD}@127.0.0.1:{port}/api/"
    code, output = run({**env, "SLACK_API_URL": url}, "bot", "--port", "0")
    where = f"http://user:***@127.0.0.1:{port}/api/"
    assert_one_line(code, output, f"cannot reach Slack at {where}", "SLACK_API_URL")


def test_the_bot_in_socket_mode_with_an_app_token_slack_refuses_says_so_in_one_line(env):
    """A wrong SLACK_APP_TOKEN: apps.connections.open answers invalid_auth, and the bot says
    which token and where to get a right one."""
    socket_env = {**env, "SLACK_APP_TOKEN": "xapp-1-wrong", "SLACK_SIGNING_SECRET": SIGNING_SECRET}
    code, output = run(socket_env, "bot")
    assert_one_line(code, output, "invalid_auth", "SLACK_APP_TOKEN", "connections:write")


#: A zone far from UTC, spelled for the C library (no tz database needed): UTC+05:30.
INDIA = "IST-5:30"


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_a_decision_is_printed_as_plain_text_in_local_time(env, conn, verb):
    """`approvals approve` / `reject` print who decided and when in the terminal's own time
    zone, with no Slack markup (``<!date^…>``, ``<@…>``)."""
    prompt = script(calls(("delete_path", {"path": "build/app.o"})), say("done"))
    pause_id = run_agent("scripted", prompt, tools=[tools.delete_path]).pause_id
    assert pause_id is not None
    reason = ("--reason", "keep it") if verb == "reject" else ()
    code, output = run({**env, "TZ": INDIA}, verb, pause_id, *reason)
    assert code == 0, output
    decision = store.records.load(conn, pause_id).decision
    assert decision is not None
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(decision.at + 5.5 * 3600))
    done = {"approve": "approved", "reject": "rejected"}[verb]
    why = ": keep it" if verb == "reject" else ""
    assert output == f"{pause_id}: {done} by {getpass.getuser()} (CLI) {when} IST{why}\n"
