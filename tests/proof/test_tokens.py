"""API tokens: shown once, stored as digests, limited to their agent and tools, revocable."""

from __future__ import annotations

import redis
from click.testing import CliRunner

from approvals import store
from approvals.cli.main import cli
from approvals.proof.tokens import create_token, list_tokens, revoke_token, verify_token


def test_only_the_digest_is_stored_and_the_token_verifies(conn: redis.Redis) -> None:
    """Redis never holds the token itself; the token maps back to its agent and tools."""
    _, secret = create_token(conn, "deployer", ("deploy",))
    assert secret.encode() not in b"".join(
        conn.hkeys(store.keys.TOKENS_KEY) + conn.hvals(store.keys.TOKENS_KEY)
    )
    found = verify_token(conn, secret)
    assert found is not None and found.agent == "deployer" and found.tools == ("deploy",)
    assert found.allows_tool("deploy") and not found.allows_tool("drop")
    assert verify_token(conn, secret + "x") is None and verify_token(conn, "") is None


def test_a_corrupt_record_refuses_rather_than_grants(conn: redis.Redis) -> None:
    """Redis is a trust boundary: a record that does not parse is no token."""
    _, secret = create_token(conn, "a")
    for key in conn.hkeys(store.keys.TOKENS_KEY):
        conn.hset(store.keys.TOKENS_KEY, key, b'{"agent": 3}')
    assert verify_token(conn, secret) is None


def test_revoke_ends_a_token(conn: redis.Redis) -> None:
    token, secret = create_token(conn, "a")
    assert [t.id for t in list_tokens(conn)] == [token.id]
    assert revoke_token(conn, token.id) and not revoke_token(conn, token.id)
    assert verify_token(conn, secret) is None


def test_the_cli_prints_the_token_alone_on_its_last_line(env: dict[str, str]) -> None:
    """`approvals tokens create` (the contract: the token alone on the last line), list, revoke."""
    runner = CliRunner()
    made = runner.invoke(cli, ["tokens", "create", "--agent", "ci", "--tools", "deploy, test"])
    assert made.exit_code == 0, made.output
    secret = made.output.strip().splitlines()[-1]
    conn = redis.Redis.from_url(env["REDIS_URL"])
    found = verify_token(conn, secret)
    assert found is not None and found.tools == ("deploy", "test")
    listed = runner.invoke(cli, ["tokens", "list"])
    assert f"{found.id}  ci  deploy,test" in listed.output and secret not in listed.output
    assert runner.invoke(cli, ["tokens", "revoke", found.id]).exit_code == 0
    assert runner.invoke(cli, ["tokens", "revoke", found.id]).exit_code == 1
    conn.close()
