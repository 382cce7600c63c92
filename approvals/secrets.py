"""Which arguments are secrets, so their values never reach Slack.

Names are matched by their parts (``github_token``, ``apiKey``, ``db-password``), so
``key`` masks ``api_key`` but not ``keyboard``. The record keeps the real values: the tool
needs them, and operators can read them with ``approvals show``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

DEFAULT_SECRET_NAMES = ("token", "password", "passwd", "secret", "key", "credential", "auth")
MASK = "••••••"


def _parts(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [part for part in re.split(r"[^a-zA-Z0-9]+", spaced.lower()) if part]


def is_secret(name: str, patterns: Iterable[str]) -> bool:
    """Whether an argument name looks secret: one of its parts is a pattern (or all of it)."""
    parts = _parts(name)
    joined = "_".join(parts)
    return any(p.lower() in parts or joined == p.lower() for p in patterns)


def secret_names(names: Iterable[str], patterns: Iterable[str]) -> tuple[str, ...]:
    wanted = tuple(patterns)
    return tuple(sorted({name for name in names if is_secret(name, wanted)}))


def mask(arguments: dict[str, Any], secret: Iterable[str]) -> dict[str, Any]:
    """The arguments with every secret value replaced by a mask, for showing to people."""
    hidden = set(secret)
    return {k: (MASK if k in hidden and v is not None else v) for k, v in arguments.items()}
