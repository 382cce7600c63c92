"""Alembic's migrations of the archive (``approvals archive upgrade`` runs them)."""
