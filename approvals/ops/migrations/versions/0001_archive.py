"""The archive's first schema: approvals, events (their audit trails) and runs.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("run_id", sa.String(64)),
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
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("decided_at", sa.Float),
        sa.Column("tool_started_at", sa.Float),
        sa.Column("tool_finished_at", sa.Float),
        sa.Column("finished_at", sa.Float),
        sa.Column("archived_at", sa.Float, nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
    )
    op.create_index("ix_approvals_run_id", "approvals", ["run_id"])
    op.create_index("ix_approvals_created_at", "approvals", ["created_at"])
    op.create_table(
        "events",
        sa.Column("approval_id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
        sa.Column("line", sa.Text, nullable=False),
    )
    op.create_index("ix_events_at", "events", ["at"])
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("ended_at", sa.Float, nullable=False),
        sa.Column("outcome", sa.JSON, nullable=False),
    )
    op.create_index("ix_runs_ended_at", "runs", ["ended_at"])


def downgrade() -> None:
    op.drop_table("runs")
    op.drop_table("events")
    op.drop_table("approvals")
