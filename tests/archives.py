"""Real databases for the archive's tests: SQLite in a temp folder, and PostgreSQL.

PostgreSQL is a private server started in a temp folder with ``initdb`` and ``pg_ctl`` (as
the tests start ``redis-server``). ``initdb`` refuses to run as root, so as root the tests
use the shared server at ``/var/run/postgresql`` instead, in a database of their own with a
unique name, created for one test and dropped after it; they never touch another database.
Without either, the PostgreSQL cases are skipped.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from approvals.ops import archive
from tests.processes import free_port, wait_until

SHARED_SOCKET = "/var/run/postgresql"


def _private_server(folder: Path) -> tuple[str, Path] | None:
    if os.geteuid() == 0 or shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
        return None
    data = folder / "pgdata"
    subprocess.run(
        ["initdb", "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    port = free_port()
    options = f"-p {port} -k {folder} -c listen_addresses=''"
    subprocess.run(
        ["pg_ctl", "-D", str(data), "-o", options, "-w", "-l", str(folder / "pg.log"), "start"],
        check=True,
        capture_output=True,
    )
    return f"postgresql://postgres@/postgres?host={folder}&port={port}", data


def _shared_server() -> str | None:
    if not os.path.exists(SHARED_SOCKET):
        return None
    url = f"postgresql://postgres@/postgres?host={SHARED_SOCKET}"
    engine = sa.create_engine(archive.engine_url(url))
    try:
        with engine.connect() as connection:
            connection.execute(sa.text("select 1"))
    except sa.exc.SQLAlchemyError:
        return None
    finally:
        engine.dispose()
    return url


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """The URL of a PostgreSQL maintenance database to create test databases from."""
    folder = tmp_path_factory.mktemp("pg", numbered=True)
    private = _private_server(folder)
    if private is not None:
        url, data = private
        yield url
        subprocess.run(["pg_ctl", "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        return
    yield _shared_server()


@pytest.fixture(params=["sqlite", "postgresql"])
def archive_url(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_server: str | None
) -> Iterator[str]:
    """An empty archive, migrated to the newest schema: SQLite, then PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'archive.db'}"
        archive.upgrade(url)
        yield url
        archive.close_shared()
        return
    if postgres_server is None:
        pytest.skip("no PostgreSQL server to test against")
    name = f"approvals_test_{os.getpid()}_{secrets.token_hex(4)}"
    admin = sa.create_engine(archive.engine_url(postgres_server), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = postgres_server.replace("/postgres?", f"/{name}?", 1)
    try:
        archive.upgrade(url)
        yield url
    finally:
        archive.close_shared()
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def wait_for_rows(url: str, count: int) -> None:
    """Until the archive holds ``count`` approvals."""
    opened = archive.Archive.open(url)
    try:
        wait_until(lambda: opened.count() >= count, 30, f"{count} approvals archived")
    finally:
        opened.close()


def downgrade(url: str, revision: str = "base") -> None:
    """Take the archive's schema back to ``revision`` with Alembic (``base``: no tables, as
    a database where `approvals archive upgrade` never ran)."""
    engine = sa.create_engine(archive.engine_url(url))
    try:
        with engine.begin() as connection:
            config = Config()
            config.set_main_option("script_location", str(archive.MIGRATIONS))
            config.attributes["connection"] = connection
            command.downgrade(config, revision)
    finally:
        engine.dispose()


def newer_migrations(folder: Path) -> Path:
    """A copy of the archive's migrations with one more revision (``9002``, a table of its
    own) after the head: what a newer version of approvals would ship."""
    copy = folder / "migrations"
    shutil.copytree(archive.MIGRATIONS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    head = archive.head_revision()
    (copy / "versions" / "9002_newer.py").write_text(
        '"""A newer version\'s revision."""\n\n'
        "import sqlalchemy as sa\n"
        "from alembic import op\n\n"
        f'revision = "9002"\ndown_revision = "{head}"\n'
        "branch_labels = None\ndepends_on = None\n\n\n"
        "def upgrade() -> None:\n"
        '    op.create_table("newer", sa.Column("id", sa.Integer, primary_key=True))\n\n\n'
        "def downgrade() -> None:\n"
        '    op.drop_table("newer")\n'
    )
    return copy
