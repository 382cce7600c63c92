"""``approvals show``, ``result`` and ``audit export``: Redis first, then the archive."""

from __future__ import annotations

import json
import time

import sqlalchemy as sa
from click.testing import CliRunner

from approvals import store
from approvals.cli.main import cli
from approvals.config import Settings
from approvals.ops import archive, retention
from tests.archives import archive_url, postgres_server  # noqa: F401 - fixtures
from tests.ops.test_retention import DAY, finish, pause


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def archived_run(conn, archive_url: str) -> Settings:  # noqa: F811
    """A run of one approval, finished, its outcome stored, then swept into the archive."""
    settings = Settings.from_env()
    pause(conn, "old1", run_id="run-old")
    finish(conn, "old1")
    store.audit.append(conn, "old1", "note", "UBOB")
    store.runs.finish_run(conn, settings, store.records.load(conn, "old1"))
    arch = Settings(redis_url=settings.redis_url, archive_url=archive_url)
    retention.sweep(conn, arch, now=time.time() + 31 * DAY)
    assert not conn.exists(store.keys.approval_key("old1"))
    return arch


def test_show_and_result_find_an_approval_that_left_redis(env, conn, archive_url, monkeypatch):  # noqa: F811
    archived_run(conn, archive_url)
    conn.delete(store.keys.outcome_key("run-old"))  # expired, as after APPROVALS_RESULT_TTL
    monkeypatch.setenv("APPROVALS_ARCHIVE_URL", archive_url)

    shown = run("show", "old1")
    assert '"status": "completed"' in shown and "note" in shown and "UBOB" in shown
    result = json.loads(run("result", "old1", "--json"))
    assert result["status"] == "completed" and result["run_id"] == "run-old"
    assert json.loads(run("result", "run-old", "--json")) == result


def test_show_verify_checks_the_chain_of_an_archived_trail(env, conn, archive_url, monkeypatch):  # noqa: F811
    """The archive keeps each audit entry exactly as Redis held it, so the hash chain still
    verifies there, and an entry changed in the archive's table is caught (at the next one)."""
    archived_run(conn, archive_url)
    monkeypatch.setenv("APPROVALS_ARCHIVE_URL", archive_url)
    assert "verified: 2 audit entries chained" in run("show", "old1", "--verify")

    engine = sa.create_engine(archive.engine_url(archive_url))
    try:
        with engine.begin() as connection:
            line = connection.execute(
                sa.text("SELECT line FROM events WHERE approval_id = 'old1' AND event = 'paused'")
            ).scalar_one()
            forged = line.replace('"actor": "', '"actor": "UMALLORY-', 1)
            assert forged != line
            connection.execute(
                sa.text(
                    "UPDATE events SET line = :line WHERE approval_id = 'old1' AND event = 'paused'"
                ),
                {"line": forged},
            )
    finally:
        engine.dispose()
    shown = CliRunner().invoke(cli, ["show", "old1", "--verify"])
    assert shown.exit_code == 1
    assert "does not verify" in shown.output


def test_without_an_archive_an_old_approval_is_unknown(env, conn, archive_url):  # noqa: F811
    archived_run(conn, archive_url)
    result = CliRunner().invoke(cli, ["show", "old1"])
    assert result.exit_code == 1 and "old1" in result.output


def test_audit_export_reads_redis_and_the_archive_oldest_first(
    env,
    conn,
    archive_url,  # noqa: F811
    monkeypatch,
):
    archived_run(conn, archive_url)
    pause(conn, "new1")
    monkeypatch.setenv("APPROVALS_ARCHIVE_URL", archive_url)

    lines = [json.loads(line) for line in run("audit", "export", "--since", "1h").splitlines()]

    assert {line["approval_id"] for line in lines} == {"old1", "new1"}
    assert [float(line["at"]) for line in lines] == sorted(float(line["at"]) for line in lines)
    old = [line["event"] for line in lines if line["approval_id"] == "old1"]
    assert old == ["paused", "note"]
    assert run("audit", "export", "--since", "2999-01-01") == ""
