"""A grant: "approve and remember", as a record. Its scope (this tool for the run, for some
hours, these exact arguments), what it matches, and how it reads on a card.
``approvals.decisions.grants`` creates, takes and revokes them; ``store.grants`` keeps them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from approvals.secrets import DEFAULT_SECRET_NAMES, MASK, mask, secret_names

HOUR = 3600.0
#: A run grant lasts as long as a run may reasonably wait; it matches only its own run.
RUN_GRANT_SECONDS = 24 * HOUR


class Scope(StrEnum):
    CALL = "call"
    RUN = "run"
    HOURS_1 = "1h"
    HOURS_8 = "8h"
    HOURS_24 = "24h"
    ARGUMENTS = "arguments"

    @property
    def label(self) -> str:
        """The option's text on the card (a contract: tools outside read these)."""
        return _LABELS[self]

    @property
    def lasts(self) -> float | None:
        """Seconds a grant of this scope lives (None: until revoked)."""
        return {
            Scope.RUN: RUN_GRANT_SECONDS,
            Scope.HOURS_1: HOUR,
            Scope.HOURS_8: 8 * HOUR,
            Scope.HOURS_24: 24 * HOUR,
        }.get(self)


_LABELS = {
    Scope.CALL: "Just this call",
    Scope.RUN: "This tool, this run",
    Scope.HOURS_1: "This tool for 1 hour",
    Scope.HOURS_8: "This tool for 8 hours",
    Scope.HOURS_24: "This tool for 24 hours",
    Scope.ARGUMENTS: "These exact arguments",
}


@dataclass(frozen=True)
class Grant:
    id: str
    scope: Scope
    tool: str
    agent: str
    #: The person the agent acts for ("" when the run named none).
    requester: str
    created_by: str
    created_at: float
    #: The approval whose card it was made from.
    approval_id: str
    #: For ``run``: the run it is limited to.
    run_id: str | None = None
    #: For ``arguments``: the exact arguments, as canonical JSON.
    arguments: str | None = None
    #: None: until revoked.
    expires_at: float | None = None
    created_by_name: str | None = None
    uses: int = 0
    revoked_by: str | None = None
    revoked_at: float | None = None

    def live(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def matches(self, call: Call) -> bool:
        """Whether this grant covers the call (liveness is checked apart, atomically)."""
        if (call.tool, call.agent, call.requester) != (self.tool, self.agent, self.requester):
            return False
        if self.scope is Scope.RUN:
            return call.run_id is not None and call.run_id == self.run_id
        if self.scope is Scope.ARGUMENTS:
            return canonical(call.arguments) == self.arguments
        return True

    def describe(self) -> str:
        """What it lets through, in words."""
        what = f"`{self.tool}` for agent {self.agent}"
        if self.requester:
            what += f" acting for <@{self.requester}>"
        if self.scope is Scope.RUN:
            what += f", run {self.run_id}"
        if self.scope is Scope.ARGUMENTS:
            what += f", arguments {_shown(self.arguments)}"
        return what


def _shown(arguments: str | None) -> str:
    """A grant's arguments as people may see them (it keeps no record of which were secret,
    so names are matched against the default list)."""
    try:
        loaded = json.loads(arguments or "")
    except ValueError:
        return MASK
    if not isinstance(loaded, dict):
        return MASK
    return canonical(mask(loaded, secret_names(loaded, DEFAULT_SECRET_NAMES)))


@dataclass(frozen=True)
class Call:
    """What a grant is matched against: the gated call about to pause."""

    tool: str
    agent: str
    requester: str
    arguments: Mapping[str, Any]
    run_id: str | None = None


def canonical(arguments: Mapping[str, Any]) -> str:
    """One spelling per set of arguments, so "these exact arguments" compares values."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
