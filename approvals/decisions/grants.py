"""Grants: "approve and remember", chosen on the card beside Approve.

An approver who trusts more than one call approves with a wider scope: this tool for the rest
of this run, this tool for this agent and requester for some hours, or these exact arguments
from now on. The approval itself is decided as usual (``review.decide``); the grant is written
next to it, with its scope, matcher, expiry, creator and the approval it came from.

A grant is checked where a call is asked for (``automatic.take_grant``: in the agent's
process, where a call would pause, and in the API for its requests), only when no policy rule
decided and the gate (or the API request's ``grantable``) allows grants: a live matching
grant lets the call run at once and takes one use in one atomic step, and the call is recorded
as an approval decided by "grant G of <person>". Only someone who may decide the call may
create a grant; a gate can forbid grants (``grantable=False``), and quorum gates never allow
them. Revoked or expired grants match nothing.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import redis

from approvals import store
from approvals.config import Settings
from approvals.decisions.review import GroupMembers, _no_groups, decide, precheck
from approvals.errors import CorruptRecord, NotAllowed
from approvals.models import Approval, DecisionKind
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


def check_grantable(approval: Approval, scope: Scope) -> None:
    """Raise ``NotAllowed`` when this approval's gate does not allow a grant of ``scope``."""
    if scope is Scope.CALL:
        return
    if approval.policy.approvals_required > 1:
        raise NotAllowed("a request that needs several approvals cannot be approved for later")
    if not approval.policy.grantable:
        raise NotAllowed("this tool's gate allows approving only one call at a time")
    if scope is Scope.RUN and approval.run_id is None:
        raise NotAllowed("this request has no run to approve the tool for")


def approve_with_scope(
    conn: redis.Redis,
    settings: Settings,
    approval_id: str,
    scope: Scope,
    actor: str,
    *,
    actor_name: str | None = None,
    members_of: GroupMembers = _no_groups,
) -> tuple[Approval, Grant | None]:
    """Approve the call and, for a scope wider than the call, grant what the scope covers.

    Who may decide is checked first (``review.precheck``): only they may create a grant.

    Raises:
        UnknownApproval, AlreadyDecided, NotAllowed: nothing was changed.
    """
    approval = precheck(conn, settings, approval_id, DecisionKind.APPROVE, actor, members_of)
    check_grantable(approval, scope)
    decided = decide(
        conn, settings, approval_id, DecisionKind.APPROVE, actor,
        actor_name=actor_name, members_of=members_of,
    )  # fmt: skip
    if scope is Scope.CALL:
        return decided, None
    grant = _create(conn, approval, scope, actor, actor_name)
    store.audit(conn, approval_id, "grant_created", actor, grant=grant.id, scope=scope.value)
    return decided, grant


def _create(
    conn: redis.Redis, approval: Approval, scope: Scope, actor: str, actor_name: str | None
) -> Grant:
    now = time.time()
    lasts = scope.lasts
    grant = Grant(
        id="g" + secrets.token_hex(6),
        scope=scope,
        tool=approval.tool_name,
        agent=approval.agent,
        requester=approval.requested_by or "",
        created_by=actor,
        created_by_name=actor_name,
        created_at=now,
        approval_id=approval.id,
        run_id=approval.run_id if scope is Scope.RUN else None,
        arguments=canonical(approval.arguments) if scope is Scope.ARGUMENTS else None,
        expires_at=None if lasts is None else now + lasts,
    )
    record = json.dumps(_record(grant), separators=(",", ":"))
    store.save_grant(conn, grant.id, record, grant.tool, now, grant.expires_at)
    return grant


def _record(grant: Grant) -> dict[str, Any]:
    data = asdict(grant)
    for mutable in ("uses", "revoked_by", "revoked_at"):
        data.pop(mutable)
    data["scope"] = grant.scope.value
    return data


def take(conn: redis.Redis, call: Call, now: float | None = None) -> Grant | None:
    """The first live grant that covers ``call``, with one use taken atomically (or None)."""
    now = time.time() if now is None else now
    return next((g for g in _live_for(conn, call, now) if store.use_grant(conn, g.id, now)), None)


def covering(conn: redis.Redis, call: Call, now: float | None = None) -> Grant | None:
    """The first live grant that covers ``call``, taking nothing: whether ``take`` would let
    it through now (a pause looks ahead at the later calls of its turn with it)."""
    return next(_live_for(conn, call, time.time() if now is None else now), None)


def _live_for(conn: redis.Redis, call: Call, now: float) -> Iterator[Grant]:
    """The live grants of ``call``'s tool that cover it, in the stored order; the ids of
    grants that are gone are forgotten on the way."""
    ids = store.grant_ids(conn, call.tool)
    found = store.load_grants(conn, ids)
    gone = set(ids) - {grant_id for grant_id, _ in found}
    store.forget_grants(conn, call.tool, sorted(gone))
    for grant_id, raw in found:
        try:
            grant = _from_hash(grant_id, raw)
        except CorruptRecord:
            continue  # Redis is a trust boundary: a damaged grant lets nothing through
        if grant.live(now) and grant.matches(call):
            yield grant


def list_grants(conn: redis.Redis) -> list[Grant]:
    """Every stored grant, newest first (revoked and expired ones included, until dropped)."""
    grants = []
    for grant_id, raw in store.load_grants(conn, store.grant_ids(conn)):
        try:
            grants.append(_from_hash(grant_id, raw))
        except CorruptRecord:
            continue
    return grants


def revoke(
    conn: redis.Redis, settings: Settings, grant_id: str, actor: str, is_operator: bool = False
) -> Grant:
    """Revoke a grant: its creator, an operator (the CLI) or one of ``APPROVERS`` may.

    Raises:
        NotAllowed: the grant does not exist, was revoked already, or ``actor`` may not.
    """
    found = store.load_grants(conn, [grant_id])
    if not found:
        raise NotAllowed(f"there is no grant {grant_id}")
    grant = _from_hash(*found[0])
    if not (is_operator or actor == grant.created_by or actor in settings.approvers):
        raise NotAllowed("only the grant's creator or an approver may revoke it")
    if store.revoke_grant(conn, grant_id, actor) != 1:
        raise NotAllowed(f"grant {grant_id} was revoked already")
    store.audit(conn, grant.approval_id, "grant_revoked", actor, grant=grant_id)
    return _from_hash(*store.load_grants(conn, [grant_id])[0])


def to_dict(grant: Grant) -> dict[str, Any]:
    """A grant as JSON-ready data (``approvals grants list --json``)."""
    data = asdict(grant)
    data["scope"] = grant.scope.value
    return data


def _from_hash(grant_id: str, raw: Mapping[str, str]) -> Grant:
    try:
        data = json.loads(raw.get("record", ""))
        grant = Grant(
            id=str(data["id"]),
            scope=Scope(data["scope"]),
            tool=str(data["tool"]),
            agent=str(data["agent"]),
            requester=str(data["requester"]),
            created_by=str(data["created_by"]),
            created_at=float(data["created_at"]),
            approval_id=str(data["approval_id"]),
            run_id=_optional(data.get("run_id")),
            arguments=_optional(data.get("arguments")),
            expires_at=None if data.get("expires_at") is None else float(data["expires_at"]),
            created_by_name=_optional(data.get("created_by_name")),
            uses=int(raw.get("uses") or 0),
            revoked_by=raw.get("revoked_by") or None,
            revoked_at=float(raw["revoked_at"]) if raw.get("revoked_at") else None,
        )
    except (ValueError, KeyError, TypeError):
        raise CorruptRecord(f"grant {grant_id} is damaged") from None
    if grant.id != grant_id:
        raise CorruptRecord(f"grant {grant_id} holds the record of {grant.id}")
    return grant


def _optional(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value
