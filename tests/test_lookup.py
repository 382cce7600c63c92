"""``approvals show``, ``result`` and ``audit export``: Redis first, then the archive."""

from __future__ import annotations

import json
import time

from click.testing import CliRunner

from approvals import outcomes, retention, store
from approvals.cli import cli
from approvals.config import Settings
from tests.archives import archive_url, postgres_server  # noqa: F401 - fixtures
from tests.test_retention import DAY, finish, pause


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def archived_run(conn, archive_url: str) -> Settings:  # noqa: F811
    """A run of one approval, finished, its outcome stored, then swept into the archive."""
    settings = Settings.from_env()
    pause(conn, "old1", run_id="run-old")
    finish(conn, "old1")
    store.audit(conn, "old1", "note", "UBOB")
    outcomes.finish_run(conn, settings, store.load(conn, "old1"))
    arch = Settings(redis_url=settings.redis_url, archive_url=archive_url)
    retention.sweep(conn, arch, now=time.time() + 31 * DAY)
    assert not conn.exists(store.approval_key("old1"))
    return arch


def test_show_and_result_find_an_approval_that_left_redis(env, conn, archive_url, monkeypatch):  # noqa: F811
    archived_run(conn, archive_url)
    conn.delete(store.outcome_key("run-old"))  # expired, as after APPROVALS_RESULT_TTL
    monkeypatch.setenv("APPROVALS_ARCHIVE_URL", archive_url)

    shown = run("show", "old1")
    assert '"status": "completed"' in shown and "note" in shown and "UBOB" in shown
    result = json.loads(run("result", "old1", "--json"))
    assert result["status"] == "completed" and result["run_id"] == "run-old"
    assert json.loads(run("result", "run-old", "--json")) == result


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
