"""Alembic's environment: migrations run on the connection ``approvals.ops.archive`` hands over."""

from __future__ import annotations

from alembic import context

from approvals.ops.archive import METADATA

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=METADATA)
with context.begin_transaction():
    context.run_migrations()
