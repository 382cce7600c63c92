"""The archive: finished approvals, their audit trails and their runs' outcomes, in SQL.

Redis holds what is waiting and what finished recently; with ``APPROVALS_ARCHIVE_URL`` set
(``sqlite:///path`` or ``postgresql://...``), the retention sweep copies a finished approval
here before Redis lets it go, and a run's outcome soon after the run ends. Through SQLAlchemy
Core, so SQLite and PostgreSQL share one code path; the schema is created and changed by
Alembic (``approvals archive upgrade``), never by this module.

Three tables, meant to be queried by people (times are Unix seconds):

- ``approvals``: one row per approval: who asked, the tool, the arguments as proposed and as
  approved, the decision and who made it, the outcome, the timings, and ``record``, the whole
  stored state, from which ``approvals show`` rebuilds it.
- ``events``: the audit trail, one row per event, in order; ``line`` is the event exactly as
  Redis held it, byte for byte, so whatever is computed over the trail can be computed again.
- ``runs``: each ended run's outcome, as ``approvals.wait`` returned it.

The archive never holds a pending approval (only finished ones are copied), and nothing in
it is needed to pause, decide or resume: losing it loses no pause.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from approvals.config import safe_url
from approvals.errors import ArchiveError, CorruptRecord
from approvals.models import Approval, approval_from_parts, decision_to_dict, result_to_dict
from approvals.store.audit import parse_audit_line
from approvals.store.retention import Finished

METADATA = sa.MetaData()

APPROVALS = sa.Table(
    "approvals",
    METADATA,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("run_id", sa.String(64), index=True),
    sa.Column("agent", sa.String(255), nullable=False),
    sa.Column("requested_by", sa.String(255)),
    sa.Column("tool", sa.String(255), nullable=False),
    sa.Column("arguments", sa.JSON, nullable=False),
    sa.Column("approved_arguments", sa.JSON),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("decision", sa.String(16)),
    sa.Column("decided_by", sa.String(255)),
    sa.Column("decided_by_name", sa.String(255)),
    sa.Column("reason", sa.Text),
    sa.Column("outcome", sa.Text),
    sa.Column("tool_output", sa.Text),
    sa.Column("channel", sa.String(64)),
    sa.Column("created_at", sa.Float, nullable=False, index=True),
    sa.Column("decided_at", sa.Float),
    sa.Column("tool_started_at", sa.Float),
    sa.Column("tool_finished_at", sa.Float),
    sa.Column("finished_at", sa.Float),
    sa.Column("archived_at", sa.Float, nullable=False),
    sa.Column("record", sa.JSON, nullable=False),
)

EVENTS = sa.Table(
    "events",
    METADATA,
    sa.Column("approval_id", sa.String(64), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("at", sa.Float, nullable=False, index=True),
    sa.Column("event", sa.String(64), nullable=False),
    sa.Column("actor", sa.String(255), nullable=False),
    sa.Column("details", sa.JSON, nullable=False),
    sa.Column("line", sa.Text, nullable=False),
)

RUNS = sa.Table(
    "runs",
    METADATA,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("ended_at", sa.Float, nullable=False, index=True),
    sa.Column("outcome", sa.JSON, nullable=False),
)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def engine_url(url: str) -> str:
    """``postgresql://`` names psycopg 3 (the driver installed with the ``postgresql`` extra);
    SQLAlchemy would otherwise look for psycopg2."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url[len(plain) :]
    return url


def _alembic(connection: sa.Connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def upgrade(url: str) -> str:
    """Create or migrate the archive's schema to the newest revision; returns it."""
    engine = sa.create_engine(engine_url(url))
    try:
        with engine.begin() as connection:
            command.upgrade(_alembic(connection), "head")
            return str(MigrationContext.configure(connection).get_current_revision())
    finally:
        engine.dispose()


def _scripts() -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(config)


def head_revision() -> str:
    """The schema this version of approvals reads and writes (Alembic's head)."""
    return str(_scripts().get_current_head())


def schema_problem(url: str) -> str | None:
    """Why the archive at ``url`` cannot be used, in one line that says what to run; None
    when it answers at this version's schema. What ``approvals doctor`` and a starting
    worker say, and what ``Archive.open`` refuses with."""
    engine = sa.create_engine(engine_url(url))
    try:
        return _problem(engine, url)
    finally:
        engine.dispose()


def _problem(engine: sa.Engine, url: str) -> str | None:
    where = safe_url(url, hide_query=True)  # libpq takes a password in the query too
    try:
        with engine.connect() as connection:
            found = MigrationContext.configure(connection).get_current_revision()
    except sa.exc.SQLAlchemyError as exc:
        return (
            f"cannot reach the archive at {where}: {_first_line(exc)}; check "
            "APPROVALS_ARCHIVE_URL and that the database is up"
        )
    head = head_revision()
    if found == head:
        return None
    if found is None:
        return (
            f"the archive at {where} has no tables: run `approvals archive upgrade` "
            "(with the same APPROVALS_ARCHIVE_URL) to create them"
        )
    if found in {script.revision for script in _scripts().walk_revisions()}:
        return (
            f"the archive at {where} is at schema {found}, behind this version's {head}: "
            "run `approvals archive upgrade` to migrate it"
        )
    return (
        f"the archive at {where} is at schema {found}, which this version does not know "
        "(a newer approvals migrated it): run the newer version here too"
    )


@dataclass
class Archive:
    """A connection pool to one archive, checked to be at the newest schema."""

    engine: sa.Engine

    @classmethod
    def open(cls, url: str) -> Archive:
        """``ArchiveError`` (saying what to do) when it cannot be reached or its schema is
        not this version's."""
        engine = sa.create_engine(engine_url(url), pool_pre_ping=True)
        problem = _problem(engine, url)
        if problem is not None:
            engine.dispose()
            raise ArchiveError(problem)
        return cls(engine)

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------------ writing

    def save_approvals(self, finished: list[Finished], finished_at: dict[str, float]) -> None:
        """Write these approvals and their audit trails, replacing earlier copies, in one
        transaction: a copy is whole or absent."""
        if not finished:
            return
        ids = [f.approval.id for f in finished]
        rows = [_approval_row(f.approval, finished_at.get(f.approval.id)) for f in finished]
        events = [row for f in finished for row in _event_rows(f)]
        with self.engine.begin() as connection:
            connection.execute(EVENTS.delete().where(EVENTS.c.approval_id.in_(ids)))
            connection.execute(APPROVALS.delete().where(APPROVALS.c.id.in_(ids)))
            connection.execute(APPROVALS.insert(), rows)
            if events:
                connection.execute(EVENTS.insert(), events)

    def save_runs(self, runs: list[tuple[str, dict[str, Any], float]]) -> None:
        """Write ended runs' outcomes (run id, outcome, when it ended), replacing copies."""
        if not runs:
            return
        rows = [
            {"run_id": r, "status": str(o.get("status", "")), "ended_at": at, "outcome": o}
            for r, o, at in runs
        ]
        with self.engine.begin() as connection:
            connection.execute(RUNS.delete().where(RUNS.c.run_id.in_([r for r, _, _ in runs])))
            connection.execute(RUNS.insert(), rows)

    # ------------------------------------------------------------------------ reading

    def load(self, approval_id: str) -> Approval | None:
        """An archived approval, rebuilt as Redis held it; None when it is not here."""
        with self.engine.connect() as connection:
            row = connection.execute(
                sa.select(APPROVALS.c.record).where(APPROVALS.c.id == approval_id)
            ).first()
        return None if row is None else _approval_of(row.record)

    def run_of(self, run_id: str) -> list[Approval]:
        """The archived approvals of a run, oldest first."""
        query = (
            sa.select(APPROVALS.c.record)
            .where(APPROVALS.c.run_id == run_id)
            .order_by(APPROVALS.c.created_at)
        )
        with self.engine.connect() as connection:
            return [_approval_of(row.record) for row in connection.execute(query)]

    def outcome(self, run_id: str) -> dict[str, Any] | None:
        """An ended run's outcome as stored (``Outcome.to_dict``); None when not here."""
        with self.engine.connect() as connection:
            row = connection.execute(
                sa.select(RUNS.c.outcome).where(RUNS.c.run_id == run_id)
            ).first()
        return None if row is None else dict(row.outcome)

    def audit_trail(self, approval_id: str) -> list[dict[str, str]]:
        """An archived approval's audit events, oldest first, as ``store.audit.audit_trail``."""
        return [parse_audit_line(line) for line in self.audit_lines(approval_id)]

    def audit_lines(self, approval_id: str) -> list[bytes]:
        """An archived approval's audit entries exactly as Redis held them, oldest first:
        what ``approvals show --verify`` checks the hash chain of."""
        query = sa.select(EVENTS.c.line).where(EVENTS.c.approval_id == approval_id)
        with self.engine.connect() as connection:
            rows = connection.execute(query.order_by(EVENTS.c.seq))
            return [row.line.encode() for row in rows]

    def events_since(self, since: float) -> Iterator[tuple[str, dict[str, str]]]:
        """(approval id, event) of every archived event at or after ``since``, by time."""
        query = (
            sa.select(EVENTS.c.approval_id, EVENTS.c.line)
            .where(EVENTS.c.at >= since)
            .order_by(EVENTS.c.at, EVENTS.c.approval_id, EVENTS.c.seq)
        )
        with self.engine.connect() as connection:
            for row in connection.execution_options(yield_per=1000).execute(query):
                yield row.approval_id, _event_of(row.line)

    def count(self) -> int:
        with self.engine.connect() as connection:
            return int(
                connection.execute(sa.select(sa.func.count()).select_from(APPROVALS)).one()[0]
            )


_opened: dict[str, Archive] = {}
_opening = threading.Lock()


def shared(url: str) -> Archive:
    """One ``Archive`` per URL for the whole process (opened on first use, after any fork)."""
    with _opening:
        found = _opened.get(url)
        if found is None:
            found = _opened[url] = Archive.open(url)
        return found


def close_shared() -> None:
    with _opening:
        while _opened:
            _, archive = _opened.popitem()
            archive.close()


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _state(approval: Approval) -> dict[str, Any]:
    """Everything ``approval_from_parts`` needs to rebuild the approval."""
    return {
        "record": approval.record(),
        "status": approval.status.value,
        "card_ts": approval.card_ts,
        "decision": None if approval.decision is None else decision_to_dict(approval.decision),
        "result": None if approval.result is None else result_to_dict(approval.result),
        "votes": list(approval.votes),
        "marks": {
            name: repr(value)
            for name, value in (
                ("tool_started", approval.tool_started_at),
                ("tool_finished", approval.tool_finished_at),
            )
            if value is not None
        },
    }


def _approval_of(state: Any) -> Approval:
    if not isinstance(state, dict):
        raise CorruptRecord("an archived record is not an object")
    return approval_from_parts(
        record=state.get("record"),
        status=state.get("status"),
        card_ts=state.get("card_ts"),
        decision=state.get("decision"),
        result=state.get("result"),
        votes=state.get("votes"),
        marks=state.get("marks"),
    )


def _approval_row(approval: Approval, finished_at: float | None) -> dict[str, Any]:
    decision, result = approval.decision, approval.result
    outcome = None if result is None else (result.text if result.error is None else result.error)
    return {
        "id": approval.id,
        "run_id": approval.run_id,
        "agent": approval.agent,
        "requested_by": approval.requested_by,
        "tool": approval.tool_name,
        "arguments": approval.arguments,
        "approved_arguments": None if decision is None else decision.arguments,
        "status": approval.status.value,
        "decision": None if decision is None else decision.kind.value,
        "decided_by": None if decision is None else decision.actor,
        "decided_by_name": None if decision is None else decision.actor_name,
        "reason": None if decision is None else decision.reason,
        "outcome": outcome,
        "tool_output": None if result is None else result.tool_output,
        "channel": approval.channel,
        "created_at": approval.created_at,
        "decided_at": None if decision is None else decision.at,
        "tool_started_at": approval.tool_started_at,
        "tool_finished_at": approval.tool_finished_at,
        "finished_at": finished_at,
        "archived_at": time.time(),
        "record": _state(approval),
    }


def _event_rows(finished: Finished) -> list[dict[str, Any]]:
    rows = []
    for seq, raw in enumerate(finished.audit):
        line = raw.decode(errors="replace")
        event = _event_of(line)
        rows.append(
            {
                "approval_id": finished.approval.id,
                "seq": seq,
                "at": _float(event.get("at")),
                "event": event.get("event", "")[:64],
                "actor": event.get("actor", "")[:255],
                "details": {k: v for k, v in event.items() if k not in ("event", "actor", "at")},
                "line": line,
            }
        )
    return rows


def _event_of(line: str) -> dict[str, str]:
    """One stored audit line as ``store.audit.audit_trail`` shows it."""
    return parse_audit_line(line.encode())


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0
