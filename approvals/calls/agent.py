"""Running an agent until it finishes or pauses, and resuming it after a decision.

``run_agent`` (``run_agent_async`` for llm's async models) is what agent code calls. When a
gated tool pauses the chain, the history is saved to Redis with the sibling results of the
paused turn (so nothing that ran runs again) and a card job is enqueued in the same
transaction. ``resume`` is what the worker calls: it rebuilds the chain from the saved
history, with the API the run started on, and lets llm execute the pending calls first.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import logging
import secrets
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import llm
import redis
from llm.parts import Message, ToolCallPart, ToolResultPart

from approvals import store
from approvals.calls import fingerprints, llm_log, outcomes
from approvals.calls.gate import (
    Gate,
    Screening,
    current_approval,
    describe,
    gate_of,
    released,
    screened,
)
from approvals.calls.plugins import (
    AsyncModel,
    SyncModel,
    load_plugins,
    resolve_async_model,
    resolve_model,
)
from approvals.calls.previews import compute_preview
from approvals.calls.tools import (
    AgentTool,
    agent_tools,
    check_allowed,
    import_tools,
    llm_tools,
    module_allowed,
    tool_named,
    tool_refs,
)
from approvals.config import Settings
from approvals.decisions import automatic, deadlines, grants, ijson, policy
from approvals.errors import (
    ConfigError,
    CorruptRecord,
    GateError,
    NotReplicated,
    ResumeError,
    ToolAlreadyStarted,
)
from approvals.models import (
    Approval,
    Decision,
    DecisionKind,
    GateOptions,
    SiblingResult,
    ToolRef,
)
from approvals.models.grant import Call
from approvals.models.outcome import Outcome
from approvals.models.preview import Preview
from approvals.proof import receipts
from approvals.secrets import mask_text, secret_names
from approvals.slack.limits import SIBLING_PREVIEW
from approvals.store import queue

_LLM_VERSION = importlib.metadata.version("llm")

log = logging.getLogger(__name__)


__all__ = ["Outcome", "Resumed", "resume", "run_agent", "run_agent_async"]


@dataclass(frozen=True)
class _RunContext:
    """What a pause needs to know about the run it interrupts."""

    conn: redis.Redis
    settings: Settings
    model_id: str
    agent: str
    system: str | None
    tools: Sequence[AgentTool]
    chain_limit: int
    channel: str | None = None
    requested_by: str | None = None
    parent_id: str | None = None
    thread_ts: str | None = None
    run_id: str | None = None
    on_finish: str | None = None
    asynchronous: bool = False
    llm_log: bool = False
    #: The policy rules in force (``APPROVALS_POLICY``), read when the run or resume starts.
    rules: Sequence[policy.Rule] = ()
    #: What the rules said about calls that then paused (tool call id → verdict).
    verdicts: dict[str, policy.Verdict] = field(default_factory=dict)


def run_agent(
    model: SyncModel | str,
    prompt: str,
    *,
    tools: Sequence[Any],
    system: str | None = None,
    agent: str = "agent",
    channel: str | None = None,
    requested_by: str | None = None,
    chain_limit: int | None = None,
    settings: Settings | None = None,
    wait: bool = False,
    timeout: float | None = None,
    on_finish: str | None = None,
    log: bool | None = None,
) -> Outcome:
    """Run a tool-calling chain until it completes or a gated tool pauses it.

    With ``wait=True`` it then blocks, like ``approvals.wait``, until the run has ended
    (through every later pause) or ``timeout`` seconds passed, and returns that outcome. The
    resumes still run in a worker: an approved tool runs where the worker runs, not here.

    Args:
        model: an llm model id (``"gpt-4o-mini"``) or a sync ``llm.Model``.
        tools: module-level functions, ``llm.Toolbox`` instances and plugin tools
            (``llm.get_tools()``); gate the dangerous ones with ``@requires_approval`` or
            ``approvals.calls.gate``.
        agent: a name for people reading the card.
        channel: where cards go; default: the gate's channel, then ``APPROVALS_CHANNEL``.
        requested_by: the Slack user id the agent acts for, shown on the card.
        wait: block until the run ends (see above); ``timeout`` bounds that wait.
        on_finish: ``"module:function"`` (a module in ``APPROVALS_TOOL_MODULES``) that a
            worker calls as ``function(outcome, idempotency_key=run_id)`` once the run ends;
            retried when it raises. A run that never pauses has it called too.
        log: write the run to llm's log database as one conversation whose id is the run
            id, here and in the workers that resume it (default: ``APPROVALS_LLM_LOG``).

    Returns:
        An ``Outcome``; when paused, ``pause_id`` names the approval waiting in Redis.

    Raises:
        GateError: a tool (or ``on_finish``) cannot be found again by a worker (defined in
            ``__main__``, outside ``APPROVALS_TOOL_MODULES``...), or the model does not
            support conversations, so a paused run could never resume.
        ConfigError: ``on_finish`` is given but ``APPROVALS_TOOL_MODULES`` is not set.
    """
    settings = settings or Settings.from_env()
    found = _prepare(settings, tools, on_finish)
    resolved = _resumable(resolve_model(model))
    context = _new_run(
        settings, resolved.model_id, found, system, agent, channel, requested_by, chain_limit,
        on_finish, log, asynchronous=False,
    )  # fmt: skip
    outcome = _drive(_first_chain(resolved, prompt, context), context)
    if outcome.status != "paused":
        _unpaused(context, outcome)
        return outcome
    if wait:
        assert outcome.pause_id is not None
        return outcomes.wait(outcome.pause_id, timeout=timeout, settings=settings)
    return outcome


async def run_agent_async(
    model: AsyncModel | str,
    prompt: str,
    *,
    tools: Sequence[Any],
    system: str | None = None,
    agent: str = "agent",
    channel: str | None = None,
    requested_by: str | None = None,
    chain_limit: int | None = None,
    settings: Settings | None = None,
    wait: bool = False,
    timeout: float | None = None,
    on_finish: str | None = None,
    log: bool | None = None,
) -> Outcome:
    """``run_agent`` for an ``llm.AsyncModel``: the same arguments, the same guarantees.

    Tools may be coroutine functions (llm runs a turn's coroutine calls concurrently) or
    plain functions. The worker resumes the run with llm's async API. Saving a pause and
    ``wait=True`` use Redis's blocking client, from a thread when they may block for long.
    """
    settings = settings or Settings.from_env()
    found = _prepare(settings, tools, on_finish)
    resolved = _resumable(resolve_async_model(model))
    context = _new_run(
        settings, resolved.model_id, found, system, agent, channel, requested_by, chain_limit,
        on_finish, log, asynchronous=True,
    )  # fmt: skip
    outcome = await _drive_async(_first_chain(resolved, prompt, context), context)
    if outcome.status != "paused":
        _unpaused(context, outcome)
        return outcome
    if wait:
        assert outcome.pause_id is not None
        return await asyncio.to_thread(
            outcomes.wait, outcome.pause_id, timeout=timeout, settings=settings
        )
    return outcome


def _prepare(settings: Settings, tools: Sequence[Any], on_finish: str | None) -> list[AgentTool]:
    """Check, before the first model call, that a worker could resume this run."""
    if on_finish is not None:
        outcomes.check_on_finish_early(on_finish, settings)
    load_plugins(settings)
    found = agent_tools(tools)
    refs = tool_refs(found)  # fail before the first model call, not at the pause
    # First: its answer names the command that fixes it.
    _check_workers_allow(settings, refs, on_finish)
    if settings.tool_modules:
        for ref in refs:
            try:
                check_allowed(ref, settings.tool_modules)
            except ResumeError as exc:
                raise GateError(str(exc)) from None
    for gate in _gates(found):
        if gate.options.fingerprint is not None:  # a worker must find it too
            fingerprints.function_at(gate.options.fingerprint, settings.tool_modules)
    return found


def _gates(tools: Sequence[AgentTool]) -> list[Gate]:
    """The gates of the agent's tools (toolbox methods included)."""
    found = []
    for tool in tools:
        functions = (
            [t.implementation for t in tool.tools()] if isinstance(tool, llm.Toolbox) else [tool]
        )
        found += [g for g in map(gate_of, functions) if g is not None]
    return found


def _check_workers_allow(
    settings: Settings, refs: Sequence[ToolRef], on_finish: str | None = None
) -> None:
    """``GateError`` when no live worker on the queue would import one of the tools (or
    ``on_finish``), with the command that fixes it: better now than after a person clicked
    Approve, when the worker's own check (which stays, as the security check) would fail the
    run for good.

    The workers advertise what they allow (``approvals.store.workers``). When none has, an
    older worker or none running yet, nothing is refused here; nor when Redis cannot be read,
    which the pause then reports.
    """
    try:
        conn = store.connection.shared_connection(settings)
        lists = store.workers.allow_lists(conn, settings.queue)
        dev = store.workers.dev_command(conn) if lists else None
    except (redis.RedisError, CorruptRecord):
        return
    if not lists:
        return
    needed: dict[str, list[str]] = {}
    for name, path in [*((ref.name, ref.path) for ref in refs), ("on_finish", on_finish or "")]:
        if path:
            needed.setdefault(path.partition(":")[0], []).append(name)
    refused = [m for m in needed if not any(module_allowed(m, a) for a in lists)]
    if not refused:
        return
    allowed = max(lists, key=len)
    names = ", ".join(dict.fromkeys(n for m in refused for n in needed[m]))
    if dev is not None:
        fix = f"restart approvals dev with it allowed:\n  {dev} --tools {' --tools '.join(refused)}"
    else:
        value = ",".join([*allowed, *refused])
        fix = (
            "add it to APPROVALS_TOOL_MODULES of every approvals worker and restart them:\n"
            f"  APPROVALS_TOOL_MODULES={value} approvals worker"
        )
    raise GateError(
        f"the approvals workers on this Redis import tools only from {', '.join(allowed)}, "
        f"not from {', '.join(refused)} ({names}): a paused run could never resume. To "
        f"fix it, {fix}"
    )


_Model = TypeVar("_Model", SyncModel, AsyncModel)


def _resumable(model: _Model) -> _Model:
    """The model, if a paused run on it can resume: llm refuses a model without
    conversations the history a resume hands it (``ConversationNotSupported``)."""
    if not model.supports_conversation:
        raise GateError(
            f"model {model.model_id} does not support conversations: a run paused on it "
            "could never resume (llm raises ConversationNotSupported for its history)"
        )
    return model


def _new_run(
    settings: Settings,
    model_id: str,
    tools: Sequence[AgentTool],
    system: str | None,
    agent: str,
    channel: str | None,
    requested_by: str | None,
    chain_limit: int | None,
    on_finish: str | None,
    log: bool | None,
    *,
    asynchronous: bool,
) -> _RunContext:
    return _RunContext(
        conn=store.connection.shared_connection(settings),
        settings=settings,
        model_id=model_id,
        agent=agent,
        system=system,
        tools=tools,
        chain_limit=chain_limit or settings.chain_limit,
        channel=channel,
        requested_by=requested_by,
        run_id=outcomes.new_run_id(),
        on_finish=on_finish,
        asynchronous=asynchronous,
        llm_log=settings.llm_log if log is None else log,
        rules=policy.rules_at(settings.policy_path),
    )


def _first_chain(model: SyncModel | AsyncModel, prompt: str, context: _RunContext) -> Any:
    """The run's chain, in a conversation whose id is the run id (one conversation in llm's
    log, from the first turn to the last resume)."""
    conversation = model.conversation(chain_limit=context.chain_limit)
    conversation.id = context.run_id or conversation.id
    return conversation.chain(prompt, system=context.system, tools=llm_tools(context.tools))


def _unpaused(context: _RunContext, outcome: Outcome) -> None:
    if context.on_finish is not None:
        outcomes.record_unpaused(context.conn, context.settings, outcome, context.on_finish)


@dataclass(frozen=True)
class Resumed:
    """How a resume ended, and what the gated call actually ran with and returned."""

    outcome: Outcome
    executed_arguments: dict[str, Any] | None = None
    tool_output: str | None = None
    #: For every call the resume carried out (the turn's, or the one): approval id → (what
    #: its tool ran with, None when it did not run; what it returned or was answered).
    calls: dict[str, tuple[dict[str, Any] | None, str | None]] = field(default_factory=dict)
    #: The gate's preview computed again for the edited arguments, just before the tool ran
    #: (None: not edited, or the gate has no preview).
    preview: Preview | None = None


def resume(
    conn: redis.Redis,
    settings: Settings,
    approval: Approval,
    on_tool_start: Callable[[], None] | None = None,
    saved: list[dict[str, Any]] | None = None,
    stale: Collection[str] = (),
) -> Resumed:
    """Continue a decided approval's chain from its saved history (called by the worker).

    ``on_tool_start`` is called once the gated call is marked started, just before it runs,
    so that work around the run (updating the card) never delays the tool. ``saved`` is the
    history when the caller has read it already (``store.records.load_with_history``). A run started
    with ``run_agent_async`` resumes on llm's async API, in an event loop of its own.
    ``stale``: the approvals whose state changed after their decision and are asked no more;
    their tools do not run, and the model receives ``STALE_REFUSAL`` instead.

    Raises:
        ResumeError: a tool or the model cannot be found, or a tool changed since the pause.
    """
    decision = approval.decision
    assert decision is not None, "resume() needs a decided approval"
    if saved is None:
        saved = store.records.load_history(conn, approval.id)
    history = [Message.from_dict(m) for m in saved]  # type: ignore[arg-type]
    tools = import_tools(approval.tools, settings.tool_modules)
    ran: dict[str, dict[str, Any]] = {}
    turn = _decided_turn(approval)
    before_call, after_call = _decision_hooks(
        conn, turn, on_tool_start, ran, settings.preview_timeout, stale
    )
    context = _RunContext(
        conn=conn,
        settings=settings,
        model_id=approval.model_id,
        agent=approval.agent,
        system=approval.system,
        tools=tools,
        chain_limit=approval.chain_limit,
        channel=approval.channel,
        requested_by=approval.requested_by,
        parent_id=approval.id,
        thread_ts=approval.thread_ts or approval.card_ts,
        run_id=approval.run_id,
        on_finish=approval.on_finish,
        asynchronous=approval.asynchronous,
        llm_log=approval.llm_log,
        rules=_resume_rules(settings),
    )
    model: SyncModel | AsyncModel = (
        resolve_async_model(approval.model_id)
        if approval.asynchronous
        else resolve_model(approval.model_id)
    )
    conversation = model.conversation(chain_limit=approval.chain_limit)
    conversation.id = approval.run_id or conversation.id  # one conversation in llm's log
    chain = conversation.chain(
        messages=history,
        system=approval.system,
        tools=llm_tools(tools),
        before_call=before_call,
        after_call=after_call,
    )
    release: dict[str, str | None] = {}
    for call in turn:
        assert call.decision is not None
        if call.decision.kind.runs_tool:
            release[call.tool_call_id] = None
        elif call.decision.kind is DecisionKind.RESPOND:
            release[call.tool_call_id] = call.decision.response or ""
    with released(release, approval.id):
        if approval.asynchronous:
            outcome = asyncio.run(_drive_async(chain, context))
        else:
            outcome = _drive(chain, context)
    calls = {}
    for call in turn:
        assert call.decision is not None
        mine = ran.get(call.id, {})
        arguments = mine.get("arguments") if call.decision.kind.runs_tool else None
        calls[call.id] = (arguments, mine.get("output"))
    lead_arguments, lead_output = calls[approval.id]
    preview = ran.get(approval.id, {}).get("preview")
    return Resumed(outcome, lead_arguments, lead_output, calls, preview)


def _decided_turn(approval: Approval) -> list[Approval]:
    """The calls this resume carries out as decided: the approval alone, or every call of
    its turn (read with it, ``store.records.load``), each with its own decision."""
    if not approval.in_turn:
        return [approval]
    others = {a.id: a for a in approval.turn_calls if a.id != approval.id}
    turn = [approval] + [others[i] for i in approval.turn[1:] if i in others]
    if len(turn) != len(approval.turn) or any(a.decision is None for a in turn):
        raise ResumeError(f"not every call of the turn of {approval.id} is decided")
    return turn


def _resume_rules(settings: Settings) -> Sequence[policy.Rule]:
    """The policy for a resume; one that does not load fails the run, visibly, rather than
    letting later calls pause without the rules that should have judged them."""
    try:
        return policy.rules_at(settings.policy_path)
    except ConfigError as exc:
        raise ResumeError(str(exc)) from None


def _decision_hooks(
    conn: redis.Redis,
    turn: Sequence[Approval],
    on_tool_start: Callable[[], None] | None,
    ran: dict[str, dict[str, Any]],
    preview_timeout: float,
    stale: Collection[str] = (),
) -> tuple[
    Callable[[llm.Tool | None, llm.ToolCall], None],
    Callable[[llm.Tool, llm.ToolCall, llm.ToolResult], None],
]:
    """llm's ``before_call`` / ``after_call`` hooks that apply each decision to its call
    (one call, or every decided call of a turn); ``ran`` gets, per approval id, what its
    tool ran with and returned, and for an edited call the preview of its edited arguments.

    Plain functions: llm's async chains accept them too, so both APIs share them.
    """
    by_call = {a.tool_call_id: a for a in turn}
    started: list[str] = []

    def before_call(tool: llm.Tool | None, call: llm.ToolCall) -> None:
        approval = by_call.get(call.tool_call_id or "")
        if approval is None or approval.decision is None:
            return
        decision = approval.decision
        refused = STALE_REFUSAL if approval.id in stale else refusal_text(decision)
        if refused is not None:
            raise llm.CancelToolCall(refused)
        if decision.kind is DecisionKind.EDIT and decision.arguments is not None:
            # What the call will now do: people approved it with other arguments. Before the
            # tool is marked started, so a worker dying here leaves it safe to run again.
            preview = _preview_of(tool, decision.arguments, preview_timeout)
            if preview is not None:
                ran.setdefault(approval.id, {})["preview"] = preview
                shown = mask_text(preview.text, approval.arguments, approval.shown_arguments)
                store.audit.append(conn, approval.id, "preview_recomputed", "worker",
                                   preview_sha256=preview.sha256,
                                   preview_head=shown[: store.records.SHOWN_HEAD])  # fmt: skip
        if decision.kind.runs_tool and not store.records.mark_tool_started(conn, approval.id):
            raise ToolAlreadyStarted(f"{approval.tool_name} was already started for {approval.id}")
        if decision.kind.runs_tool and on_tool_start is not None and not started:
            on_tool_start()
        started.append(approval.id)
        # What idempotency_key() and receipt() give this call's tool (each call its own).
        current_approval(approval.id, approval.receipt)
        if decision.kind is DecisionKind.EDIT and decision.arguments is not None:
            # Reassign, never mutate: the dict is shared with the saved history.
            call.arguments = dict(decision.arguments)

    def after_call(tool: llm.Tool, call: llm.ToolCall, result: llm.ToolResult) -> None:
        approval = by_call.get(call.tool_call_id or "")
        if approval is None or approval.decision is None:
            return
        decision = approval.decision
        if decision.kind.runs_tool:
            store.records.mark_tool_finished(conn, approval.id)
            receipts.hold(None)  # the receipt is for this call only, not what the chain does next
        ran.setdefault(approval.id, {}).update(arguments=dict(call.arguments), output=result.output)
        if decision.kind is DecisionKind.EDIT:
            # The model is told the truth: it did not run what it proposed.
            note = edit_note(
                decision.actor_name or decision.actor, approval.arguments, call.arguments
            )
            result.output = note + result.output

    return before_call, after_call


def preview_now(settings: Settings, approval: Approval) -> Preview | None:
    """The gate's preview of the call as proposed, computed again now (the worker, when the
    state changed since the decision: what people decide on again). None when the gate has
    none, or the tool cannot be imported (the resume that runs it says why)."""
    try:
        tools = import_tools(approval.tools, settings.tool_modules)
    except ResumeError:
        return None
    tool = tool_named(tools, approval.tool_name)
    return _preview_of(tool, approval.arguments, settings.preview_timeout)


def _preview_of(tool: llm.Tool | None, arguments: dict[str, Any], timeout: float) -> Preview | None:
    """The tool's gate's preview of a call with ``arguments`` (None: it has none)."""
    gate = gate_of(tool.implementation) if tool is not None else None
    if gate is None or gate.options.preview is None:
        return None
    return compute_preview(gate.options.preview, dict(arguments), timeout)


#: What the model receives (after llm's ``Cancelled: ``) for a call whose state changed after
#: its approval once too often (``APPROVALS_STALE_RETRIES``): it re-plans, as after a rejection.
STALE_REFUSAL = "the state changed after approval"


def refusal_text(decision: Decision) -> str | None:
    """What the model receives instead of running the tool (llm prefixes ``Cancelled: ``)."""
    who = decision.actor_name or decision.actor
    if decision.kind is DecisionKind.REJECT:
        return f"rejected by {who}: {decision.reason}" if decision.reason else f"rejected by {who}"
    if decision.kind is DecisionKind.EXPIRE:
        return "the approval expired without a decision; the tool was not executed"
    return None


def edit_note(actor: str, proposed: dict[str, Any], approved: dict[str, Any]) -> str:
    changes = {
        k: approved.get(k)
        for k in sorted(set(proposed) | set(approved))
        if proposed.get(k) != approved.get(k)
    }
    return f"[{actor} edited the arguments before running: {json.dumps(changes)}]\n"


def _drive(chain: Any, context: _RunContext) -> Outcome:
    """Iterate the chain to its end; on a gated pause, save it and say so."""
    seen: list[llm.Response] = []
    try:
        with screened(lambda call, gate: _screen(context, call, gate)):
            for response in chain.responses():
                seen.append(response)
    except llm.PauseChain as pause:
        if not _ours(pause, context):
            raise  # not ours: a tool (or hook) of the caller's own paused the chain
        last = seen[-1] if seen else None
        base = chain.prompt.messages if last is None else last.prompt.messages + last.messages()
        return _paused(pause, base, context)
    finally:
        if context.llm_log:
            llm_log.write(context.settings, seen)
    return _completed(seen[-1].text() if seen else "", context)


async def _drive_async(chain: Any, context: _RunContext) -> Outcome:
    """``_drive`` for llm's async chains."""
    seen: list[llm.AsyncResponse] = []
    try:
        with screened(lambda call, gate: _screen(context, call, gate)):
            async for response in chain.responses():
                seen.append(response)
    except llm.PauseChain as pause:
        if not _ours(pause, context):
            raise
        last = seen[-1] if seen else None
        base = (
            chain.prompt.messages if last is None else last.prompt.messages + await last.messages()
        )
        return await asyncio.to_thread(_paused, pause, base, context)
    finally:
        if context.llm_log:
            await llm_log.write_async(context.settings, seen)
    return _completed(await seen[-1].text() if seen else "", context)


def _ours(pause: llm.PauseChain, context: _RunContext) -> bool:
    """Whether one of our gates paused the chain (and not a tool of the caller's own)."""
    if pause.tool_call is None:
        return False
    tool = tool_named(context.tools, pause.tool_call.name)
    return tool is not None and gate_of(tool.implementation) is not None


def _paused(pause: llm.PauseChain, base: list[Message], context: _RunContext) -> Outcome:
    pause_id = _save_pause(pause, base, context)
    return Outcome("paused", pause_id=pause_id, run_id=context.run_id)


def _completed(text: str, context: _RunContext) -> Outcome:
    return Outcome("completed", text=text, run_id=context.run_id)


def _screen(context: _RunContext, call: llm.ToolCall, gate: Gate) -> Screening:
    """Put a gated call to the policy rules, then to the grants, where it would pause."""
    if call.tool_call_id is None:
        return Screening()
    if not context.rules:
        return _screen_grants(context, call, gate, None)
    verdict = automatic.judge(context.rules, _facts(context, call, gate))
    if not automatic.decides(verdict):
        context.verdicts[call.tool_call_id] = verdict
        if automatic.grants_may_decide(verdict):
            return _screen_grants(context, call, gate, verdict)
        return Screening()  # a stricter review, or a rule that failed: a person decides
    approval = _new_approval(call, [], context, gate.options, _channel(gate.options, context))
    try:
        decision = automatic.record_rule_decision(context.conn, approval, verdict)
    except redis.RedisError:
        log.exception("could not record rule %s's decision: asking a person", verdict.rule_id)
        return Screening()  # the pause then reports Redis's failure to the caller
    if decision.kind is DecisionKind.APPROVE:
        return Screening(run=True)
    return Screening(output=f"Cancelled: {refusal_text(decision)}")


def _facts(context: _RunContext, call: llm.ToolCall, gate: Gate) -> policy.Call:
    """What the policy rules see of a call."""
    return policy.Call(
        agent=context.agent,
        tool=call.name,
        args=call.arguments,
        requester=context.requested_by or "",
        channel=_channel(gate.options, context),
    )


def _screen_grants(
    context: _RunContext, call: llm.ToolCall, gate: Gate, verdict: policy.Verdict | None
) -> Screening:
    """Let the call run when a live grant covers it (taking one use), else pause."""
    if not gate.options.allows_grants:
        return Screening()
    approval = _new_approval(call, [], context, gate.options, _channel(gate.options, context))
    try:
        grant = automatic.take_grant(context.conn, approval, call.arguments)
        if grant is None:
            return Screening()
        automatic.record_grant_decision(context.conn, context.settings, approval, grant, verdict)
    except redis.RedisError:
        log.exception("could not check the grants of %s: asking a person", call.name)
        return Screening()
    return Screening(run=True)


def _channel(options: GateOptions, context: _RunContext) -> str:
    """Where a call's card goes: its options' channel, else the run's, else the setting's
    ("": none of them says)."""
    return options.channel or context.channel or context.settings.channel or ""


def _save_pause(pause: llm.PauseChain, base: list[Message], context: _RunContext) -> str:
    call = pause.tool_call
    assert call is not None and call.tool_call_id is not None
    tool = tool_named(context.tools, call.name)
    assert tool is not None
    gate = gate_of(tool.implementation)
    assert gate is not None
    history: list[dict[str, Any]] = [dict(m.to_dict()) for m in base]
    if pause.tool_results:
        # Without these, the finished siblings of the paused turn would run again on resume.
        history.append(
            dict(
                Message(role="tool", parts=[_result_part(r) for r in pause.tool_results]).to_dict()
            )
        )
    settings = context.settings
    verdict = context.verdicts.pop(call.tool_call_id, None)
    asked = [(call, gate, verdict), *_waiting_in_turn(pause, base, context)]
    made: list[tuple[Approval, GateOptions, list[str], Preview | None]] = []
    for asked_call, asked_gate, asked_verdict in asked:
        options, rule_id = automatic.apply_requirement(asked_gate.options, asked_verdict)
        channel = _channel(options, context)
        if not channel:
            raise ConfigError(
                "missing required setting APPROVALS_CHANNEL: where should the card go?"
            )
        approval = _new_approval(asked_call, pause.tool_results, context, options, channel)
        approval.rule_id = rule_id
        preview = _preview(asked_gate, asked_call, settings)
        approval.set_preview(preview)
        if options.fingerprint is not None:  # fails closed: nothing pauses on an unknown state
            approval.fingerprint = fingerprints.compute(
                options.fingerprint, asked_call.arguments, settings.tool_modules
            )
        events = automatic.verdict_events(asked_verdict) if asked_verdict is not None else []
        made.append((approval, options, events, preview))
    # One card for the turn: it goes where the lead's goes, and every call of it knows the
    # others (``Approval.turn``). Each call keeps the lead's reminder and escalation times; the
    # first call still waiting acts for the card (``reminders.acts_for_card``).
    lead, card = made[0][0], made[0][1]
    longest = [deadlines.plan(approval, settings, options, card) for approval, options, *_ in made]
    if len(made) > 1:
        turn = tuple(a.id for a, *_ in made)
        for approval, *_ in made:
            approval.turn = turn
            approval.channel = lead.channel
    # One transaction: the approvals exist with the card job and their deadlines, or not at
    # all. The run's stream outlives the longest wait for a decision by the outcome's TTL.
    # With APPROVALS_MIN_REPLICAS, what tells people of the pause (its card job, its
    # webhooks' entries) waits until replicas confirm the pause: unconfirmed, it is withdrawn
    # before anyone heard of it.
    confirm = settings.min_replicas > 0
    held: list[str] | None = [] if confirm else None
    pipe = None
    run_ttl = None if None in longest else int(max(w or 0 for w in longest)) + settings.result_ttl
    for approval, _, events, preview in made:
        # Only the lead is a pause of the run (and holds the history the resume starts from);
        # the outcome finds the others through it.
        pipe = store.records.create(
            context.conn, approval, history if approval is lead else [], run_ttl=run_ttl,
            events=events, pipeline=pipe, in_run=approval is lead, preview=preview, outbox=held,
        )  # fmt: skip
        deadlines.schedule(pipe, settings, approval)
    assert pipe is not None
    if confirm:
        pipe.execute()
        if not store.replication.replicated(context.conn, settings):
            store.records.withdraw(context.conn, [made_one[0] for made_one in made])
            raise NotReplicated(
                f"the pause was not recorded: fewer than {settings.min_replicas} Redis "
                "replica(s) confirmed it in time (APPROVALS_MIN_REPLICAS); nothing is waiting "
                "for a decision, try again"
            )
        pipe = context.conn.pipeline(transaction=True)
        pipe.multi()
        store.records.push_outbox(pipe, held or [])
    queue.enqueue_card(context.conn, settings, lead.id, lead.channel, pipeline=pipe)
    pipe.execute()
    if confirm and not store.replication.replicated(context.conn, settings):
        # The pause itself is on the replicas; a failover now could lose only its card job.
        log.warning("approval %s: replicas did not confirm its card job", lead.id)
    return lead.id


def _preview(gate: Gate, call: llm.ToolCall, settings: Settings) -> Preview | None:
    """What the gate's ``preview=`` says the call would do (None: the gate has none)."""
    fn = gate.options.preview
    if fn is None:
        return None
    return compute_preview(fn, dict(call.arguments), settings.preview_timeout)


def _waiting_in_turn(
    pause: llm.PauseChain, base: list[Message], context: _RunContext
) -> list[tuple[llm.ToolCall, Gate, policy.Verdict | None]]:
    """The later calls of the paused turn that will also wait for a person, in call order.

    A sync chain never started them; an async one started them all, and those that paused
    were put to the rules and the grants already (their verdicts are kept). A call a rule or
    a live grant would settle is left out: it is settled, and recorded, as it runs on resume,
    exactly as today. Ungated calls are left out too: they simply run on resume.
    """
    paused = pause.tool_call
    assert paused is not None
    done = {r.tool_call_id for r in pause.tool_results} | {paused.tool_call_id}
    trailing = base[-1] if base and base[-1].role == "assistant" else None
    if trailing is None:
        return []
    calls = [p for p in trailing.parts if isinstance(p, ToolCallPart) and not p.server_executed]
    ids = [p.tool_call_id for p in calls]
    if paused.tool_call_id not in ids:
        return []
    waiting: list[tuple[llm.ToolCall, Gate, policy.Verdict | None]] = []
    for part in calls[ids.index(paused.tool_call_id) + 1 :]:
        if part.tool_call_id is None or part.tool_call_id in done:
            continue
        tool = tool_named(context.tools, part.name)
        gate = gate_of(tool.implementation) if tool is not None else None
        if gate is None:
            continue
        if not ijson.is_valid(part.arguments):
            continue  # the gate refuses it to the model when the turn resumes: no card
        later = llm.ToolCall(
            name=part.name, arguments=dict(part.arguments), tool_call_id=part.tool_call_id
        )
        if part.tool_call_id in context.verdicts:  # screened already: it waits for a person
            waiting.append((later, gate, context.verdicts.pop(part.tool_call_id)))
            continue
        settles, verdict = _look_ahead(context, later, gate)
        if not settles:
            waiting.append((later, gate, verdict))
    return waiting


def _look_ahead(
    context: _RunContext, call: llm.ToolCall, gate: Gate
) -> tuple[bool, policy.Verdict | None]:
    """What ``_screen`` would find for a call, changing nothing: (True, _) when a rule or a
    live grant would decide it alone, else (False, the rules' verdict, None without rules)."""
    verdict: policy.Verdict | None = None
    if context.rules:
        verdict = policy.evaluate(context.rules, _facts(context, call, gate))
        if automatic.decides(verdict):
            return True, verdict
        if not automatic.grants_may_decide(verdict):
            return False, verdict
    if not gate.options.allows_grants:
        return False, verdict
    wanted = Call(
        tool=call.name,
        agent=context.agent,
        requester=context.requested_by or "",
        arguments=call.arguments,
        run_id=context.run_id,
    )
    try:
        if grants.covering(context.conn, wanted) is not None:
            return True, verdict
    except redis.RedisError:
        log.exception("could not look at the grants of %s: asking a person", call.name)
    return False, verdict


def _new_approval(
    call: llm.ToolCall,
    tool_results: Sequence[llm.ToolResult],
    context: _RunContext,
    options: GateOptions,
    channel: str,
) -> Approval:
    """The record of a gated call, as it is asked for (pending, no expiry yet)."""
    assert call.tool_call_id is not None
    tool = tool_named(context.tools, call.name)
    assert tool is not None
    properties = tool.input_schema.get("properties", {})
    return Approval(
        id=new_approval_id(),
        agent=context.agent,
        model_id=context.model_id,
        tool_name=call.name,
        tool_call_id=call.tool_call_id,
        arguments=dict(call.arguments),
        tools=tool_refs(context.tools),
        channel=channel,
        system=context.system,
        summary=describe(options.summary, call.arguments),
        siblings=[SiblingResult(r.name, r.output[: SIBLING_PREVIEW + 1]) for r in tool_results],
        requested_by=context.requested_by,
        chain_limit=context.chain_limit,
        parent_id=context.parent_id,
        thread_ts=context.thread_ts,
        policy=options.policy,
        secret_arguments=secret_names(
            [*call.arguments, *properties], context.settings.secret_names
        ),
        llm_version=_LLM_VERSION,
        run_id=context.run_id,
        on_finish=context.on_finish,
        asynchronous=context.asynchronous,
        llm_log=context.llm_log,
    )


def _result_part(result: llm.ToolResult) -> ToolResultPart:
    exception = None
    if result.exception is not None:
        exception = f"{result.exception.__class__.__name__}: {result.exception}"
    return ToolResultPart(
        name=result.name,
        output=result.output,
        tool_call_id=result.tool_call_id,
        exception=exception,
    )


def new_approval_id() -> str:
    """Short enough to type in the CLI, random enough not to be guessed (64 bits)."""
    return secrets.token_hex(8)
