"""Reading who sent a payload: Slack signed it, yet a field may still be missing or mistyped."""

from __future__ import annotations

from typing import Any


def actor(body: dict[str, Any]) -> tuple[str, str | None] | None:
    """(user id, display name) of the sender; None when the payload's ``user`` is unreadable."""
    user = body.get("user")
    if not isinstance(user, dict) or not isinstance(user.get("id"), str) or not user["id"]:
        return None
    name = user.get("name") or user.get("username")
    return user["id"], name if isinstance(name, str) else None
