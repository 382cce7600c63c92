"""Decisions made the moment a call is asked for: by a policy rule or by a grant.

Both ways of asking use this one module, so a rule or a grant means the same thing for a
paused ``llm`` call (``agent.py``, where the call would pause) and for a request through the
HTTP API (``external.py``): the same verdict, the same audit lines, the same record already
decided, the same changes a ``require`` rule makes to the approval.

A rule or grant decision is carried out by whoever asked, at once: no card, no deadline and
no resume job are written. Nobody who holds the signing key witnessed it, so it carries no
signed receipt (``receipts.py``): its record says ``decided_by`` rule or grant instead.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from approvals import store
from approvals.config import Settings
from approvals.decisions import grants, policy
from approvals.models import (
    Approval,
    DecidedBy,
    Decision,
    DecisionKind,
    GateOptions,
    decision_to_dict,
)
from approvals.models.grant import Call, Grant
from approvals.store import queue

log = logging.getLogger(__name__)

#: How an automatic decision's actor is written (``rule:<id>``, ``grant:<id>``), beside Slack
#: ids and ``cli:``.
RULE_ACTOR_PREFIX = "rule:"
GRANT_ACTOR_PREFIX = "grant:"


def judge(rules: Sequence[policy.Rule], call: policy.Call) -> policy.Verdict:
    """The rules' verdict on one call; a rule that failed is logged (a person then decides)."""
    verdict = policy.evaluate(rules, call)
    if verdict.error is not None:
        log.warning("policy rule failed on %s, asking a person: %s", call.tool, verdict.error)
    return verdict


def decides(verdict: policy.Verdict | None) -> bool:
    """Whether an enforcing rule approved or rejected the call outright."""
    return (
        verdict is not None
        and verdict.rule is not None
        and verdict.action in (policy.Action.APPROVE, policy.Action.REJECT)
    )


def grants_may_decide(verdict: policy.Verdict | None) -> bool:
    """Grants are looked at only when no rule had a say: not after a ``require`` rule (a
    stricter review) nor after a rule that failed (fail closed: a person is asked)."""
    return verdict is None or (verdict.action is policy.Action.ASK and verdict.error is None)


def take_grant(conn: redis.Redis, approval: Approval, arguments: Mapping[str, Any]) -> Grant | None:
    """A live grant covering the call, with one use taken atomically (None: none, or the
    approval's policy allows no grants)."""
    if not approval.policy.allows_grants:
        return None
    wanted = Call(
        tool=approval.tool_name,
        agent=approval.agent,
        requester=approval.requested_by or "",
        arguments=arguments,
        run_id=approval.run_id,
    )
    return grants.take(conn, wanted)


def record_rule_decision(
    conn: redis.Redis, approval: Approval, verdict: policy.Verdict
) -> Decision:
    """Write ``approval`` already decided by the verdict's rule (audited with the rule's id)."""
    rule = verdict.rule
    assert rule is not None and decides(verdict)
    approve = verdict.action is policy.Action.APPROVE
    decision = Decision(
        kind=DecisionKind.APPROVE if approve else DecisionKind.REJECT,
        actor=RULE_ACTOR_PREFIX + rule.id,
        actor_name=f"rule {rule.id}",
        at=time.time(),
        reason=None if approve else rule.reason,
        arguments=dict(approval.arguments),
        decided_by=DecidedBy.RULE,
        rule_id=rule.id,
    )
    approval.rule_id = rule.id
    event = store.audit.audit_entry(
        decision.kind.status.value, decision.actor, rule=rule.id, reason=decision.reason or ""
    )
    _record(conn, approval, decision, [*verdict_events(verdict), event])
    return decision


def record_grant_decision(
    conn: redis.Redis,
    settings: Settings,
    approval: Approval,
    grant: Grant,
    verdict: policy.Verdict | None,
) -> Decision:
    """Write ``approval`` already approved by ``grant`` (audited with the grant and its
    creator), and queue the compact channel line when ``APPROVALS_GRANT_NOTICE`` says so."""
    decision = Decision(
        kind=DecisionKind.APPROVE,
        actor=GRANT_ACTOR_PREFIX + grant.id,
        actor_name=f"grant {grant.id} of {grant.created_by_name or grant.created_by}",
        at=time.time(),
        arguments=dict(approval.arguments),
        decided_by=DecidedBy.GRANT,
        grant_id=grant.id,
        grant_creator=grant.created_by,
    )
    events = verdict_events(verdict) if verdict is not None else []
    events.append(
        store.audit.audit_entry("approved", decision.actor, grant=grant.id,
                          grant_creator=grant.created_by, scope=grant.scope.value)
    )  # fmt: skip
    _record(conn, approval, decision, events)
    if settings.grant_notice == "line" and approval.channel:
        queue.enqueue_grant_line(conn, settings, approval.id)
    return decision


def _record(conn: redis.Redis, approval: Approval, decision: Decision, events: list[str]) -> None:
    approval.decision = decision
    approval.status = decision.kind.status
    approval.expires_at = approval.created_at
    first = store.audit.audit_entry("paused", approval.agent, tool=approval.tool_name)
    encoded = json.dumps(decision_to_dict(decision))
    store.records.record_automatic(conn, approval, decision.kind.status, encoded, [first, *events])


def verdict_events(verdict: policy.Verdict) -> list[str]:
    """Audit lines for what the shadow rules would have done, for a rule that failed, and for
    a ``require`` rule that set the review."""
    events = [
        store.audit.audit_entry(
            "rule_shadow", RULE_ACTOR_PREFIX + r.id, rule=r.id, would=r.action.value
        )
        for r in verdict.shadows
    ]
    if verdict.error is not None:
        events.append(store.audit.audit_entry("rule_failed", "system", error=verdict.error))
    if verdict.rule is not None and verdict.action is policy.Action.REQUIRE:
        events.append(
            store.audit.audit_entry("rule_required", RULE_ACTOR_PREFIX + verdict.rule.id,
                              rule=verdict.rule.id)
        )  # fmt: skip
    return events


def apply_requirement(
    options: GateOptions, verdict: policy.Verdict | None
) -> tuple[GateOptions, str | None]:
    """The options a call is asked with once the rules had their say: a ``require`` rule's
    own (approvers, groups, quorum, expiry, channel...) replace the asker's. Returns them, and
    the id of the rule that required them (None: no rule did)."""
    rule = verdict.rule if verdict is not None else None
    if verdict is None or rule is None or rule.require is None:
        return options, None
    if verdict.action is not policy.Action.REQUIRE:
        return options, None
    return rule.require.apply(options), rule.id
