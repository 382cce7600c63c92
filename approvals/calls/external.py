"""Approvals asked from outside an llm chain: the HTTP API, its MCP tool and the Claude Code hook.

An external approval is the same record as a paused llm call, so it gets the same card, the
same rules (approvers and groups, self-approval, quorum, Edit checked against a JSON schema,
Reject with a reason, Respond), the same expiry, reminders and audit trail, and is put to the
same policy rules and grants first (``automatic``), which may decide it at once. Only what follows
a decision differs: there is no chain to resume, so ``review`` wakes the caller waiting for
the answer (``store.callers.wake_caller``) instead of queuing a resume, and the caller
reports what it then did with ``report_result``, which ends the approval and is shown in the
card's thread.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field, replace
from typing import Any

import redis

from approvals import store
from approvals.config import Settings
from approvals.decisions import automatic, deadlines, policy
from approvals.decisions.schemas import validate_arguments
from approvals.errors import ConfigError, NotAllowed, NotReplicated, UnknownApproval
from approvals.models import Approval, DecisionKind, GateOptions, RunResult, Status, ToolRef
from approvals.models import result_to_dict as _result_to_dict
from approvals.models.preview import Preview, PreviewKind, as_preview
from approvals.secrets import secret_names
from approvals.store import queue

#: Stands where a paused llm call names its model: an external approval resumes no model.
EXTERNAL_MODEL = "external"

#: Decided statuses after which the caller may act, and so report what it did.
ACTED_ON = (Status.APPROVED, Status.EDITED, Status.RESPONDED)


@dataclass(frozen=True)
class ExternalRequest:
    """What a caller asks people to decide (the body of ``POST /v1/approvals``)."""

    tool: str
    arguments: dict[str, Any]
    agent: str
    schema: dict[str, Any] | None = None
    preview: str | None = None
    #: The state the decision depends on, named by the caller: signed into the receipt and
    #: given back with the decision, so the service that acts can refuse a changed state.
    fingerprint: str | None = None
    requested_by: str | None = None
    idempotency_key: str | None = None
    #: Groups the requests of one task, for the card's "This tool, this run" grant.
    run_id: str | None = None
    #: How it asks: who may decide, where, how long... (the summary is shown as written).
    options: GateOptions = field(default_factory=GateOptions)


#: An API caller's ``run_id`` is kept per agent, so one agent's run never names another's
#: (nor an ``llm`` run's: those ids are bare hex).
RUN_PREFIX = "api:"


def ask(conn: redis.Redis, settings: Settings, request: ExternalRequest) -> tuple[Approval, bool]:
    """Ask for a decision, as a paused llm call would be: the policy rules first, then the
    grants, else a pending approval with its card job, expiry and reminders, in one transaction.

    A rule that approves or rejects, or a live grant, decides at once: the approval is written
    already decided (no card), and the caller's first answer says so. The same
    ``idempotency_key`` from the same agent returns the approval it created first.

    Returns:
        The approval, and whether this call created it.

    Raises:
        InvalidArguments: the arguments are not I-JSON (``ijson``: a 64-bit integer, NaN,
            a lone surrogate...), the schema is not one, or the arguments do not fit it;
            nothing was written.
        ConfigError: no channel was given and ``APPROVALS_CHANNEL`` is not set; or
            ``APPROVALS_POLICY`` cannot be read (nothing is asked: fail closed).
        ValueError: the options say to wait indefinitely.
    """
    schema = request.schema if request.schema is not None else {"type": "object"}
    validate_arguments(schema, request.arguments)
    if request.options.expires_in is None:  # the API cannot ask it: its callers wait for an end
        raise ValueError("an external approval cannot wait indefinitely (expires_in=None)")
    channel = request.options.channel or settings.channel
    if not channel:
        raise ConfigError("missing required setting APPROVALS_CHANNEL: where should the card go?")
    rules = policy.rules_at(settings.policy_path)
    verdict = None
    if rules:
        facts = policy.Call(
            agent=request.agent,
            tool=request.tool,
            args=request.arguments,
            requester=request.requested_by or "",
            channel=channel,
        )
        verdict = automatic.judge(rules, facts)
    options, rule_id = automatic.apply_requirement(request.options, verdict)
    approval = _new_approval(settings, request, schema, options, options.channel or channel)
    approval.rule_id = rule_id
    # The caller's text is markdown, as it always was; a unified diff is shown as one.
    preview = None if request.preview is None else as_preview(request.preview, PreviewKind.MARKDOWN)
    approval.set_preview(preview)
    deadlines.plan(approval, settings, options)
    digest = _key_digest(request.idempotency_key)
    if digest is not None:
        ttl = _run_ttl(settings, approval)
        first = store.callers.claim_idempotency(conn, request.agent, digest, approval.id, ttl)
        if first is not None:
            return store.records.load(conn, first), False
    try:
        _decide_or_save(conn, settings, approval, verdict, preview)
    except BaseException:
        if digest is not None:  # let a retry of the same key create it
            store.callers.forget_idempotency(conn, request.agent, digest)
        raise
    return approval, True


def _decide_or_save(
    conn: redis.Redis,
    settings: Settings,
    approval: Approval,
    verdict: policy.Verdict | None,
    preview: Preview | None = None,
) -> None:
    if verdict is not None and automatic.decides(verdict):
        automatic.record_rule_decision(conn, approval, verdict)
        return
    if automatic.grants_may_decide(verdict):
        grant = automatic.take_grant(conn, approval, approval.arguments)
        if grant is not None:
            automatic.record_grant_decision(conn, settings, approval, grant, verdict)
            return
    events = automatic.verdict_events(verdict) if verdict is not None else []
    _save(conn, settings, approval, events, preview)


def run_of(approval: Approval) -> str | None:
    """The ``run_id`` the caller gave, without the per-agent prefix it is stored with."""
    if approval.run_id is None:
        return None
    return approval.run_id.removeprefix(f"{RUN_PREFIX}{approval.agent}:")


def _new_approval(
    settings: Settings,
    request: ExternalRequest,
    schema: dict[str, Any],
    options: GateOptions,
    channel: str,
) -> Approval:
    properties = schema.get("properties", {})
    names = [*request.arguments, *(properties if isinstance(properties, dict) else {})]
    return Approval(
        id=secrets.token_hex(8),
        agent=request.agent,
        model_id=EXTERNAL_MODEL,
        tool_name=request.tool,
        tool_call_id="ext_" + secrets.token_hex(8),
        arguments=dict(request.arguments),
        tools=[ToolRef(name=request.tool, path="", schema=schema)],
        channel=channel,
        summary=options.summary,
        fingerprint=request.fingerprint,
        requested_by=request.requested_by,
        policy=options.policy,
        secret_arguments=secret_names(names, settings.secret_names),
        external=True,
        run_id=None if request.run_id is None else f"{RUN_PREFIX}{request.agent}:{request.run_id}",
    )


def _save(
    conn: redis.Redis,
    settings: Settings,
    approval: Approval,
    events: list[str],
    preview: Preview | None = None,
) -> None:
    """The pending approval, its card job and its deadlines: all of them, or none. With
    ``APPROVALS_MIN_REPLICAS``, the card job (and the webhooks' entries) follow only once
    replicas confirm the approval; unconfirmed, it is withdrawn (as ``agent`` does)."""
    held: list[str] | None = [] if settings.min_replicas > 0 else None
    pipe = store.records.create(
        conn,
        approval,
        [],
        run_ttl=_run_ttl(settings, approval),
        events=events,
        preview=preview,
        outbox=held,
    )
    deadlines.schedule(pipe, settings, approval)
    if held is not None:
        pipe.execute()
        if not store.replication.replicated(conn, settings):
            store.records.withdraw(conn, [approval])
            raise NotReplicated(
                f"the approval was not recorded: fewer than {settings.min_replicas} Redis "
                "replica(s) confirmed it in time (APPROVALS_MIN_REPLICAS); try again"
            )
        pipe = conn.pipeline(transaction=True)
        pipe.multi()
        store.records.push_outbox(pipe, held)
    queue.enqueue_card(conn, settings, approval.id, approval.channel, pipeline=pipe)
    pipe.execute()


def _run_ttl(settings: Settings, approval: Approval) -> int:
    return int(approval.expires_at - approval.created_at) + settings.result_ttl


def _key_digest(key: str | None) -> str | None:
    """Idempotency keys are the caller's text: hashed, they make a key name of fixed size."""
    return None if key is None else hashlib.sha256(key.encode()).hexdigest()


def report_result(
    conn: redis.Redis, settings: Settings, approval_id: str, ok: bool, output: str
) -> Approval:
    """Record what the caller did after the decision (once), and show it in the card's thread.

    Raises:
        UnknownApproval: no such approval, or not an external one.
        NotAllowed: it is not decided yet, was rejected or expired, or was reported already.
    """
    approval = store.records.load(conn, approval_id)
    if not approval.external:
        raise UnknownApproval(approval_id)
    if approval.status not in ACTED_ON:
        raise NotAllowed(f"there is nothing to report: this request is {approval.status.value}")
    decision = approval.decision
    ran_with = decision.arguments if decision is not None else approval.arguments
    end = Status.COMPLETED if ok else Status.FAILED
    result = RunResult(
        end,
        error=None if ok else (output or "the caller reported an error"),
        executed_arguments=ran_with,
        tool_output=output,
    )
    # Through ``running``, as every decision that goes ahead: the first report wins that move,
    # and the lease it takes lets recovery settle a reporter that died between the two steps.
    taken = store.transitions.transition(
        conn, approval_id, Status.RUNNING, sources=ACTED_ON, lease=30
    )
    if not taken.ok:
        raise NotAllowed(f"there is nothing to report: this request is {taken.previous}")
    entry = store.audit.audit_entry("result_reported", approval.agent, ok=ok, output=output[:2000])
    fields = {"result": json.dumps(_result_to_dict(result))}
    store.transitions.transition(
        conn, approval_id, end, fields, sources=[Status.RUNNING], event=entry
    )
    if decision is None or not decision.automatic:
        # A rule's or a grant's decision has no card to show it on: the audit trail has it.
        queue.enqueue_publish(conn, settings, approval_id)
    return store.records.load(conn, approval_id)


def as_caller_sees(conn: redis.Redis, approval: Approval) -> Approval:
    """The approval as its caller may see it: a decision whose after-steps are still owed (its
    receipt not yet signed, its audit entry not yet written) still reads as ``pending``.

    A caller acts on what it reads: shown a decision before its receipt exists, it would call
    the downstream service with none and be refused. The wait (``?wait=``) wakes only once the
    after-steps are done, and a plain read agrees with it.
    """
    if approval.status is Status.PENDING or not store.owed.owing(conn, [approval.id]):
        return approval
    return replace(approval, status=Status.PENDING, decision=None, receipt=None)


def answer(approval: Approval) -> dict[str, Any]:
    """The JSON every caller receives (``GET /v1/approvals/{id}``, the MCP tool, the client)."""
    decision = approval.decision
    data: dict[str, Any] = {
        "id": approval.id,
        "status": approval.status.value,
        "tool": approval.tool_name,
        "agent": approval.agent,
        "decision": None,
        # The receipt the decider signed (``approvals.proof.receipts``); None without a key.
        "receipt": approval.receipt,
        "votes": list(approval.votes),
        "expires_at": approval.expires_at,
        "card_url": card_url(approval),
        "run_id": run_of(approval),
    }
    if decision is not None:
        runs = decision.kind in (DecisionKind.APPROVE, DecisionKind.EDIT)
        data["decision"] = {
            "kind": decision.kind.value,
            "actor": decision.actor,
            "actor_name": decision.actor_name,
            "at": decision.at,
            "reason": decision.reason,
            "arguments": decision.arguments if runs else None,
            "response": decision.response,
            # person, rule or grant; a rule's or a grant's decision has no receipt.
            "decided_by": decision.decided_by.value,
            "rule_id": decision.rule_id,
            "grant_id": decision.grant_id,
            # The state it was decided on (the caller's own fingerprint), as the receipt says.
            "fingerprint": approval.fingerprint,
        }
    if approval.result is not None:
        ok = approval.status is Status.COMPLETED
        data["result"] = {"ok": ok, "output": approval.result.tool_output}
    return data


def card_url(approval: Approval) -> str | None:
    """A link to the approval's card in Slack (None until the worker has posted it)."""
    if approval.card_ts is None:
        return None
    return f"https://slack.com/archives/{approval.channel}/p{approval.card_ts.replace('.', '')}"


def by_idempotency_key(conn: redis.Redis, agent: str, key: str) -> Approval | None:
    """The approval ``agent`` created with ``key``, if it is still kept (the Claude Code hook
    finds the approval of a call it reports on this way)."""
    digest = _key_digest(key)
    assert digest is not None
    approval_id = store.callers.idempotent_id(conn, agent, digest)
    if approval_id is None:
        return None
    try:
        approval = store.records.load(conn, approval_id)
    except UnknownApproval:
        return None  # removed by retention, or its creation failed
    return approval if approval.external and approval.agent == agent else None


def pending_of(conn: redis.Redis, agent: str, limit: int = 100) -> list[Approval]:
    """The pending external approvals of one agent, newest first."""
    page = store.pending.pending_page(conn, lambda a: a.external and a.agent == agent, 0, limit)
    return page.approvals
