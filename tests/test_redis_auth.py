"""Redis is a trust boundary: ACL users in REDIS_URL work, a wrong password is refused."""

from __future__ import annotations

import pytest
import redis

from approvals import run_agent, store
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path


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
    assert store.load(conn, outcome.pause_id).tool_name == "delete_path"


def test_a_wrong_password_is_refused_and_stores_nothing(env, conn, acl_user, monkeypatch):
    """A bad password fails loudly before anything is written."""
    user, _ = acl_user
    monkeypatch.setenv("REDIS_URL", env["REDIS_URL"].replace("redis://", f"redis://{user}:nope@"))
    prompt = script(calls(("delete_path", {"path": "x"})), say("ok"))
    with pytest.raises(redis.AuthenticationError):
        run_agent("scripted", prompt, tools=[delete_path])
    assert store.pending_count(conn) == 0
