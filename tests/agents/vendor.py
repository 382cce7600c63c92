"""A third-party module: tools nobody here may edit, so they carry no decorator.

Tests gate them from outside with ``approvals.calls.gate``; the worker imports these originals
again and applies the gate recorded with the pause.
"""

from __future__ import annotations

from tests.agents.tools import _record


def archive_bucket(bucket: str, days: int = 30) -> str:
    """Archive a storage bucket's objects older than ``days``."""
    _record("archive_bucket", bucket=bucket, days=days)
    return f"archived {bucket} (older than {days} days)"
