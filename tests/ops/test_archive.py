"""The archive's schema: made and migrated by ``approvals archive upgrade``, checked on use."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from click.testing import CliRunner

from approvals.cli.main import cli
from approvals.errors import ArchiveError
from approvals.ops import archive
from tests.archives import archive_url, postgres_server  # noqa: F401 - fixtures


def test_upgrade_creates_the_tables_once(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    monkeypatch.setenv("APPROVALS_ARCHIVE_URL", url)
    for _ in range(2):
        result = CliRunner().invoke(cli, ["archive", "upgrade"])
        assert result.exit_code == 0, result.output
        assert f"schema {archive.head_revision()}" in result.output
    engine = sa.create_engine(url)
    try:
        tables = set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert {"approvals", "events", "runs", "alembic_version"} <= tables
    archive.Archive.open(url).close()


def test_an_archive_without_the_schema_is_refused_with_what_to_run(tmp_path):
    with pytest.raises(ArchiveError, match="approvals archive upgrade"):
        archive.Archive.open(f"sqlite:///{tmp_path / 'empty.db'}")


def test_upgrade_needs_an_archive_url(monkeypatch):
    monkeypatch.delenv("APPROVALS_ARCHIVE_URL", raising=False)
    result = CliRunner().invoke(cli, ["archive", "upgrade"])
    assert result.exit_code == 1 and "APPROVALS_ARCHIVE_URL" in result.output


def test_postgresql_urls_use_psycopg_3():
    assert archive.engine_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert archive.engine_url("sqlite:///x.db") == "sqlite:///x.db"


def test_the_migrations_make_exactly_the_tables_the_code_uses(archive_url):  # noqa: F811
    """The archive's tables as the migrations made them match ``archive.METADATA``."""
    engine = sa.create_engine(archive.engine_url(archive_url))
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection)
            assert compare_metadata(context, archive.METADATA) == []
    finally:
        engine.dispose()
