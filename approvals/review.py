"""Deciding an approval: who may, what is valid, and the one atomic step that records it.

The bot's buttons and modals and the CLI's ``approve``/``reject`` all call ``decide``, so a
decision has the same rules and the same effects wherever it comes from.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, UnknownType
from referencing.exceptions import Unresolvable

from approvals import queue, store
from approvals.config import Settings
from approvals.errors import AlreadyDecided, InvalidArguments, NotAllowed, UnknownApproval
from approvals.models import Approval, Decision, DecisionKind, decision_to_dict

CLI_ACTOR_PREFIX = "cli:"


def may_decide(settings: Settings, actor: str) -> bool:
    """Approvers from ``APPROVERS``; anyone when unset; CLI users (they hold Redis access)."""
    if actor.startswith(CLI_ACTOR_PREFIX):
        return True
    return not settings.approvers or actor in settings.approvers


def check_may_decide(conn: redis.Redis, settings: Settings, approval_id: str, actor: str) -> None:
    """Raise ``NotAllowed`` (and record the refusal) when ``actor`` is not an approver."""
    if not may_decide(settings, actor):
        store.audit(conn, approval_id, "refused", actor, reason="not an approver")
        raise NotAllowed(f"you are not an approver for approval {approval_id}")


def validate_arguments(schema: dict[str, Any], arguments: Any) -> None:
    """Check edited arguments against the tool's JSON schema; ``InvalidArguments`` if not."""
    errors: dict[str, str] = {}
    try:
        Draft202012Validator.check_schema(schema)
        found = sorted(Draft202012Validator(schema).iter_errors(arguments), key=str)
    except (SchemaError, UnknownType, Unresolvable) as exc:  # a broken schema cannot be checked
        raise InvalidArguments({"_": f"the tool's schema is invalid: {exc}"}) from None
    for error in found:
        if error.path:
            errors.setdefault(str(error.path[0]), error.message)
        elif error.validator == "required" and isinstance(error.instance, dict):
            for missing in error.validator_value:
                if missing not in error.instance:
                    errors.setdefault(str(missing), f"{missing!r} is a required property")
        else:
            errors.setdefault("_", error.message)
    if errors:
        raise InvalidArguments(errors)


def decide(
    conn: redis.Redis,
    settings: Settings,
    approval_id: str,
    kind: DecisionKind,
    actor: str,
    *,
    actor_name: str | None = None,
    reason: str | None = None,
    arguments: dict[str, Any] | None = None,
) -> Approval:
    """Record a decision and enqueue the resume: exactly once, whoever races.

    Raises:
        UnknownApproval, NotAllowed, InvalidArguments, AlreadyDecided: nothing was changed.
    """
    approval = store.load(conn, approval_id)
    check_may_decide(conn, settings, approval_id, actor)
    if kind is DecisionKind.EDIT:
        if arguments is None:
            raise InvalidArguments({"_": "an edit needs the edited arguments"})
        validate_arguments(approval.tool.schema, arguments)
    decision = Decision(
        kind=kind,
        actor=actor,
        actor_name=actor_name,
        at=time.time(),
        reason=reason or None,
        arguments=arguments if kind is DecisionKind.EDIT else approval.arguments,
    )
    won = store.transition(
        conn,
        approval_id,
        kind.status,
        {"decision": json.dumps(decision_to_dict(decision)), "decided_by": actor},
    )
    if not won.ok:
        if not won.previous:
            raise UnknownApproval(approval_id)
        store.audit(conn, approval_id, "refused", actor, reason=f"already {won.previous}")
        raise AlreadyDecided(approval_id, won.previous, won.decided_by)
    store.audit(
        conn,
        approval_id,
        kind.status.value,
        actor,
        reason=reason or "",
        arguments=decision.arguments,
    )
    queue.enqueue_resume(conn, settings, approval_id)
    approval.status = kind.status
    approval.decision = decision
    return approval
