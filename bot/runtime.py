"""What every listener needs (settings, Redis, the Slack client), handed over by middleware."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import redis
from slack_sdk import WebClient

from approvals.config import Settings
from approvals.slack import web as slack


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    conn: redis.Redis
    client: WebClient

    def __deepcopy__(self, memo: dict[int, Any]) -> Runtime:
        """Shared, not copied: Bolt deep-copies a request's context for each lazy listener,
        and the clients here are thread-safe and meant to be shared by every request."""
        return self

    def members_of(self, target: str) -> Collection[str]:
        """Members of a Slack user group or channel (cached in Redis, shared by all replicas)."""
        return slack.members(self.client, self.conn, target)


def runtime_of(context: Any) -> Runtime:
    """The ``Runtime`` the app's middleware put in Bolt's request context."""
    runtime = context["runtime"]
    assert isinstance(runtime, Runtime)
    return runtime
