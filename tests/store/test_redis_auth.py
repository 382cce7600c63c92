"""Redis is a trust boundary: ACL users in REDIS_URL work, a wrong password is refused."""

from __future__ import annotations

import os
import subprocess

import pytest
import redis

from approvals import run_agent, store
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.processes import ROOT, approvals_command, bot_url, start_bot


@pytest.fixture
def acl_user(conn):
    """A Redis ACL user limited to this project's keys (approvals:* and RQ's rq:*)."""
    conn.execute_command(
        "ACL",
        "SETUSER",
        "approvals-agent",
        "reset",
        "on",
        ">s3cret",
        "~approvals:*",
        "~rq:*",
        "&*",
        "+@all",
        "-@dangerous",
    )
    yield "approvals-agent", "s3cret"
    conn.execute_command("ACL", "DELUSER", "approvals-agent")


def test_an_acl_user_in_redis_url_pauses_and_stores(env, conn, acl_user, monkeypatch):
    """REDIS_URL=redis://user:password@host/db: the agent pauses through the ACL user."""
    user, password = acl_user
    monkeypatch.setenv(
        "REDIS_URL", env["REDIS_URL"].replace("redis://", f"redis://{user}:{password}@")
    )
    prompt = script(calls(("delete_path", {"path": "x"})), say("ok"))
    outcome = run_agent("scripted", prompt, tools=[delete_path])
    assert outcome.status == "paused"
    assert store.records.load(conn, outcome.pause_id).tool_name == "delete_path"


def test_a_wrong_password_is_refused_and_stores_nothing(env, conn, acl_user, monkeypatch):
    """A bad password fails loudly before anything is written."""
    user, _ = acl_user
    monkeypatch.setenv("REDIS_URL", env["REDIS_URL"].replace("redis://", f"redis://{user}:nope@"))
    prompt = script(calls(("delete_path", {"path": "x"})), say("ok"))
    with pytest.raises(redis.AuthenticationError):
        run_agent("scripted", prompt, tools=[delete_path])
    assert store.pending.pending_count(conn) == 0


def test_the_bot_starts_with_an_acl_user_that_may_not_run_info(env, acl_user, tmp_path):
    """The bot's start-up check of Redis is a PING: a user without @dangerous (INFO is one)
    passes it, and the bot listens."""
    user, password = acl_user
    url = env["REDIS_URL"].replace("redis://", f"redis://{user}:{password}@")
    bot = start_bot({**env, "REDIS_URL": url}, tmp_path / "bot.log")
    try:
        assert bot_url(bot).endswith("/slack/events")
    finally:
        bot.stop()


def test_the_cli_with_a_wrong_password_says_so_in_one_line(env, acl_user):
    """`approvals pending` with a wrong password: one line naming Redis's refusal, where (the
    password hidden) and what to check; exit 1."""
    user, _ = acl_user
    url = env["REDIS_URL"].replace("redis://", f"redis://{user}:wrong-pw@")
    done = subprocess.run(
        approvals_command("pending"),
        env={**os.environ, **env, "REDIS_URL": url, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "wrong-pw" not in done.stderr
    assert f"Redis at {url.replace('wrong-pw', '***')} refused the credentials" in done.stderr
    assert "check the user and password in REDIS_URL" in done.stderr
