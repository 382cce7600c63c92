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
from dataclasses import asdict
from typing import Any

import redis

from approvals import store
from approvals.config import Settings
from approvals.decisions.review import GroupMembers, _no_groups, decide, precheck
from approvals.errors import CorruptRecord, NotAllowed
from approvals.models import Approval, DecisionKind
from approvals.models.grant import Call, Grant, Scope, canonical


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
    store.audit.append(conn, approval_id, "grant_created", actor, grant=grant.id, scope=scope.value)
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
    store.grants.save_grant(conn, grant.id, record, grant.tool, now, grant.expires_at)
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
    return next(
        (g for g in _live_for(conn, call, now) if store.grants.use_grant(conn, g.id, now)), None
    )


def covering(conn: redis.Redis, call: Call, now: float | None = None) -> Grant | None:
    """The first live grant that covers ``call``, taking nothing: whether ``take`` would let
    it through now (a pause looks ahead at the later calls of its turn with it)."""
    return next(_live_for(conn, call, time.time() if now is None else now), None)


def _live_for(conn: redis.Redis, call: Call, now: float) -> Iterator[Grant]:
    """The live grants of ``call``'s tool that cover it, in the stored order; the ids of
    grants that are gone are forgotten on the way."""
    ids = store.grants.grant_ids(conn, call.tool)
    found = store.grants.load_grants(conn, ids)
    gone = set(ids) - {grant_id for grant_id, _ in found}
    store.grants.forget_grants(conn, call.tool, sorted(gone))
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
    for grant_id, raw in store.grants.load_grants(conn, store.grants.grant_ids(conn)):
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
    found = store.grants.load_grants(conn, [grant_id])
    if not found:
        raise NotAllowed(f"there is no grant {grant_id}")
    grant = _from_hash(*found[0])
    if not (is_operator or actor == grant.created_by or actor in settings.approvers):
        raise NotAllowed("only the grant's creator or an approver may revoke it")
    if store.grants.revoke_grant(conn, grant_id, actor) != 1:
        raise NotAllowed(f"grant {grant_id} was revoked already")
    store.audit.append(conn, grant.approval_id, "grant_revoked", actor, grant=grant_id)
    return _from_hash(*store.grants.load_grants(conn, [grant_id])[0])


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
