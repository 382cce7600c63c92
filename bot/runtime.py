"""What every listener needs (settings and the Redis connection), handed over by middleware."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from approvals.config import Settings


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    conn: redis.Redis


def runtime_of(context: Any) -> Runtime:
    """The ``Runtime`` the app's middleware put in Bolt's request context."""
    runtime = context["runtime"]
    assert isinstance(runtime, Runtime)
    return runtime
