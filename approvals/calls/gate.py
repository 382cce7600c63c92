"""The gate: ``@requires_approval`` marks a tool whose calls wait for a person.

A gated tool raises ``llm.PauseChain`` unless its call was released by a decision. Decisions
are keyed by the call's ``tool_call_id`` (llm hands it to tools that declare ``llm_tool_call``),
never by argument values, so an approval can only ever release the one call it was made for.

``gate()`` does the same for code one cannot decorate: a plugin's tool, a third-party
function, or chosen methods of an ``llm.Toolbox`` instance. Such a gate is recorded with the
pause (``gate_to_dict``) so that the worker, which imports the original, can put it back.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, TypeVar, overload

import llm

from approvals.decisions import ijson
from approvals.errors import CorruptRecord
from approvals.models import OnReject, Policy, policy_from_dict, policy_to_dict
from approvals.proof import receipts

F = TypeVar("F", bound=Callable[..., Any])


class _Unset(Enum):
    """The default of ``expires_in``: the setting applies (``None`` means "never expire")."""

    TOKEN = 0


UNSET: Literal[_Unset.TOKEN] = _Unset.TOKEN
#: What ``expires_in`` accepts: seconds, None (wait indefinitely) or the default.
ExpiresIn = float | None | Literal[_Unset.TOKEN]

GATE_ATTRIBUTE = "__approval_gate__"

#: Set on what ``gate()`` wrapped: the gate is not in the original's code, so the pause
#: records it and the worker applies it again.
APPLIED_ATTRIBUTE = "__approval_gate_applied__"

#: On a toolbox instance ``gate()`` changed: method name → its gate.
TOOLBOX_GATES_ATTRIBUTE = "__approval_gates__"

#: Calls the running resume may complete: id → None (run the tool) or the reviewer's response
#: (return it instead of running). llm runs sync tools in the caller's context.
_released: ContextVar[Mapping[str, str | None] | None] = ContextVar(
    "approvals_released", default=None
)


@dataclass(frozen=True)
class Gate:
    """How a gated tool asks for approval (see ``requires_approval`` for each option)."""

    channel: str | None = None
    summary: str | None = None
    #: None: ``APPROVALS_EXPIRES_IN`` (unless ``waits_forever``).
    expires_in: float | None = None
    policy: Policy = field(default_factory=Policy)
    #: ``expires_in=None`` was given: the approval never expires.
    waits_forever: bool = False
    #: None: the settings (``APPROVALS_REMIND_AFTER`` and so on); 0: off.
    remind_after: float | None = None
    escalate_after: float | None = None
    escalate_to: tuple[str, ...] | None = None

    def describe(self, arguments: dict[str, Any]) -> str | None:
        """The summary with the arguments filled in; the raw template if they do not fit."""
        if self.summary is None:
            return None
        try:
            return self.summary.format_map(arguments)
        except (KeyError, IndexError, ValueError, AttributeError, TypeError):
            return self.summary


@overload
def requires_approval(fn: F) -> F: ...
@overload
def requires_approval(
    *,
    channel: str | None = None,
    summary: str | None = None,
    editable: Iterable[str] | None = None,
    reason_required: bool = False,
    on_reject: str = "resume",
    expires_in: ExpiresIn = UNSET,
    approvers: Iterable[str] | None = None,
    approver_groups: Iterable[str] | None = None,
    allow_self_approval: bool = False,
    approvals_required: int = 1,
    webhook: str | None = None,
    grantable: bool = True,
    remind_after: float | None = None,
    escalate_after: float | None = None,
    escalate_to: Iterable[str] | None = None,
) -> Callable[[F], F]: ...


def requires_approval(
    fn: F | None = None,
    *,
    channel: str | None = None,
    summary: str | None = None,
    editable: Iterable[str] | None = None,
    reason_required: bool = False,
    on_reject: str = "resume",
    expires_in: ExpiresIn = UNSET,
    approvers: Iterable[str] | None = None,
    approver_groups: Iterable[str] | None = None,
    allow_self_approval: bool = False,
    approvals_required: int = 1,
    webhook: str | None = None,
    grantable: bool = True,
    remind_after: float | None = None,
    escalate_after: float | None = None,
    escalate_to: Iterable[str] | None = None,
) -> F | Callable[[F], F]:
    """Mark a tool as needing approval; usable bare or with options.

    Args:
        channel: post this tool's cards to this channel id instead of ``APPROVALS_CHANNEL``.
        summary: a one-line description for the card, e.g. ``"Delete {path}"``.
        editable: the arguments a reviewer may edit (default: all).
        reason_required: a rejection must say why.
        on_reject: ``"resume"`` (the model is told and re-plans) or ``"stop"`` (the run ends).
            Also applies when the approval expires.
        expires_in: seconds until an undecided approval expires (default
            ``APPROVALS_EXPIRES_IN``, 24 h); ``None`` waits indefinitely. Expiry never approves.
        remind_after: seconds before the approvers are reminded, and between reminders (at
            most three; default ``APPROVALS_REMIND_AFTER``, 1 h; 0: none).
        escalate_after, escalate_to: seconds after which the card is also posted to these
            channel ids and user group ids, whose members may then decide too (defaults
            ``APPROVALS_ESCALATE_AFTER``, ``APPROVALS_ESCALATE_TO``).
        approvers, approver_groups: Slack user ids / user group ids allowed to decide,
            instead of ``APPROVERS`` / ``APPROVER_GROUPS``.
        allow_self_approval: the person the agent acts for (``requested_by``) may decide.
        approvals_required: distinct approvals needed; one rejection still ends it.
        webhook: a URL that also receives this tool's state changes, signed with
            ``APPROVALS_WEBHOOK_SECRET`` like those of ``APPROVALS_WEBHOOK_URLS``.
        grantable: an approver may approve with a wider scope (a grant: this tool for the
            run, for some hours, or these exact arguments); never with a quorum.
    """
    gate = _make_gate(
        channel=channel,
        summary=summary,
        editable=editable,
        reason_required=reason_required,
        on_reject=on_reject,
        expires_in=expires_in,
        approvers=approvers,
        approver_groups=approver_groups,
        allow_self_approval=allow_self_approval,
        approvals_required=approvals_required,
        webhook=webhook,
        grantable=grantable,
        remind_after=remind_after,
        escalate_after=escalate_after,
        escalate_to=escalate_to,
    )

    def decorate(func: F) -> F:
        return _gated(func, gate)

    return decorate(fn) if fn is not None else decorate


def _make_gate(
    *,
    channel: str | None = None,
    summary: str | None = None,
    editable: Iterable[str] | None = None,
    reason_required: bool = False,
    on_reject: str = "resume",
    expires_in: ExpiresIn = UNSET,
    approvers: Iterable[str] | None = None,
    approver_groups: Iterable[str] | None = None,
    allow_self_approval: bool = False,
    approvals_required: int = 1,
    webhook: str | None = None,
    grantable: bool = True,
    remind_after: float | None = None,
    escalate_after: float | None = None,
    escalate_to: Iterable[str] | None = None,
) -> Gate:
    """A ``Gate`` from ``requires_approval``'s options (``gate()`` takes the same)."""
    if approvals_required < 1:
        raise ValueError("approvals_required must be at least 1")
    if isinstance(expires_in, int | float) and expires_in <= 0:
        raise ValueError("expires_in must be a positive number of seconds")
    for name, value in (("remind_after", remind_after), ("escalate_after", escalate_after)):
        if value is not None and value < 0:
            raise ValueError(f"{name} must be a number of seconds (0: off)")
    return Gate(
        channel=channel,
        summary=summary,
        expires_in=None if expires_in is None or expires_in is UNSET else float(expires_in),
        waits_forever=expires_in is None,
        remind_after=remind_after,
        escalate_after=escalate_after,
        escalate_to=_names(escalate_to, "escalate_to"),
        policy=Policy(
            approvers=_names(approvers, "approvers"),
            approver_groups=_names(approver_groups, "approver_groups"),
            allow_self_approval=allow_self_approval,
            approvals_required=approvals_required,
            editable=_names(editable, "editable"),
            reason_required=reason_required,
            on_reject=OnReject(on_reject),
            webhook=webhook,
            grantable=grantable,
        ),
    )


T = TypeVar("T")


def gate(target: T, *, methods: Iterable[str] | None = None, **options: Any) -> T:
    """Gate a tool without editing its source; ``options`` are ``requires_approval``'s.

    ``target`` is a function (a third-party one, or a plugin's, e.g. from ``llm.get_tools()``),
    an ``llm.Tool`` wrapping such a function, or an ``llm.Toolbox`` instance, with ``methods``
    naming the methods that wait for a person (the others stay free). A function or tool
    comes back gated; a toolbox is gated in place and returned. The worker imports the
    original again by its own dotted path (its module must be in ``APPROVALS_TOOL_MODULES``)
    and applies the same gate, recorded with the pause.
    """
    chosen = _make_gate(**options)  # an unknown option is a TypeError, as for any call
    if isinstance(target, llm.Toolbox):
        if methods is None:
            raise TypeError("gate(toolbox) needs methods=[...]: the methods that wait for a person")
        gate_methods(target, _names(methods, "methods") or (), chosen)
        return target
    if methods is not None:
        raise TypeError("methods= is for toolboxes; a function is gated as a whole")
    function = tool_function(target)
    if function is None:
        raise TypeError(
            f"cannot gate {target!r}: expected a function, an llm.Tool or an llm.Toolbox"
        )
    return apply_gate(function, chosen)  # type: ignore[return-value]


def tool_function(target: Any) -> Callable[..., Any] | None:
    """The plain function behind a tool: itself, or the implementation of an ``llm.Tool``
    whose name is the function's own (the name the worker will find it by)."""
    if isinstance(target, llm.Tool):
        implementation = target.implementation
        if implementation is None or getattr(implementation, "__name__", None) != target.name:
            return None
        return implementation
    if inspect.isfunction(target):
        return target
    return None


def apply_gate(function: Callable[..., Any], options: Gate) -> Callable[..., Any]:
    """``function`` gated from outside its code: the pause records the gate."""
    gated = _gated(function, options)
    setattr(gated, APPLIED_ATTRIBUTE, True)
    return gated


def gate_methods(toolbox: llm.Toolbox, methods: Iterable[str], options: Gate) -> None:
    """Gate these methods of one toolbox instance (its class is left alone)."""
    gates: dict[str, Gate] = dict(getattr(toolbox, TOOLBOX_GATES_ATTRIBUTE, {}))
    cls = type(toolbox)
    for name in methods:
        function = getattr(cls, name, None)
        if name.startswith("_") or not inspect.isfunction(function):
            raise TypeError(f"{cls.__name__} has no tool method {name!r}")
        if gate_of(function) is None:  # a method gated in its own code keeps that gate
            toolbox.__dict__[name] = types.MethodType(_gated(function, options), toolbox)
            gates[name] = options
    toolbox.__dict__[TOOLBOX_GATES_ATTRIBUTE] = gates


def applied_gates(toolbox: llm.Toolbox) -> Mapping[str, Gate]:
    """The methods ``gate()`` gated on this instance, and how."""
    gates = getattr(toolbox, TOOLBOX_GATES_ATTRIBUTE, None)
    return gates if isinstance(gates, dict) else {}


def is_applied(tool: Any) -> bool:
    """Whether this gated function was gated by ``gate()`` rather than in its own code."""
    return getattr(tool, APPLIED_ATTRIBUTE, False) is True


def gate_to_dict(options: Gate) -> dict[str, Any]:
    """A gate as JSON-ready data, for a pause that must tell the worker how to gate again."""
    return {
        "channel": options.channel,
        "summary": options.summary,
        "expires_in": options.expires_in,
        "policy": policy_to_dict(options.policy),
        "waits_forever": options.waits_forever,
        "remind_after": options.remind_after,
        "escalate_after": options.escalate_after,
        "escalate_to": None if options.escalate_to is None else list(options.escalate_to),
    }


def gate_from_dict(data: Mapping[str, Any]) -> Gate:
    """The gate a pause recorded (``CorruptRecord`` when the data is not one)."""
    channel, summary, expires_in = data.get("channel"), data.get("summary"), data.get("expires_in")
    if not (
        (channel is None or isinstance(channel, str))
        and (summary is None or isinstance(summary, str))
        and (expires_in is None or isinstance(expires_in, int | float))
    ):
        raise CorruptRecord("a recorded gate has fields of the wrong type")
    remind, escalate, targets = (data.get(k) for k in ("remind_after", "escalate_after",
                                                        "escalate_to"))  # fmt: skip
    if not (
        all(v is None or (isinstance(v, int | float) and not isinstance(v, bool))
            for v in (remind, escalate))
        and (targets is None or (isinstance(targets, list)
                                 and all(isinstance(t, str) for t in targets)))
    ):  # fmt: skip
        raise CorruptRecord("a recorded gate has reminder fields of the wrong type")
    return Gate(
        channel=channel,
        summary=summary,
        expires_in=None if expires_in is None else float(expires_in),
        policy=policy_from_dict(data.get("policy")),
        waits_forever=data.get("waits_forever") is True,
        remind_after=None if remind is None else float(remind),
        escalate_after=None if escalate is None else float(escalate),
        escalate_to=None if targets is None else tuple(targets),
    )


def _names(value: Iterable[str] | None, option: str) -> tuple[str, ...] | None:
    """A tuple of names; a bare string is refused (it would be read letter by letter)."""
    if value is None:
        return None
    if isinstance(value, str):
        raise TypeError(f"{option} must be a list of names, not the string {value!r}")
    return tuple(value)


def gate_of(tool: Any) -> Gate | None:
    """The ``Gate`` of a tool function, or None when it is not gated."""
    gate = getattr(tool, GATE_ATTRIBUTE, None)
    return gate if isinstance(gate, Gate) else None


_approval: ContextVar[str | None] = ContextVar("approvals_current", default=None)


@dataclass(frozen=True)
class Screening:
    """What was decided about a gated call at the moment it would pause (a policy rule).

    ``run``: the call runs at once; ``output``: the model receives this instead of a run (a
    refusal); neither: the call pauses for a person.
    """

    run: bool = False
    output: str | None = None


#: Decides a gated call before it pauses; the agent sets one while it drives a chain.
Screen = Callable[[llm.ToolCall, "Gate"], Screening]

_screen: ContextVar[Screen | None] = ContextVar("approvals_screen", default=None)


@contextmanager
def screened(screen: Screen) -> Iterator[None]:
    """Inside the block, gated calls no decision released are first put to ``screen``."""
    token = _screen.set(screen)
    try:
        yield
    finally:
        _screen.reset(token)


@contextmanager
def released(calls: Mapping[str, str | None], approval_id: str | None = None) -> Iterator[None]:
    """Inside the block, let these gated calls complete (used when resuming).

    Each id maps to None (run the tool) or to a reviewer's response (return it, run nothing).
    """
    token = _released.set(dict(calls))
    current = _approval.set(approval_id)
    try:
        yield
    finally:
        _approval.reset(current)
        _released.reset(token)


def current_approval(approval_id: str, receipt: str | None) -> None:
    """Say which approval the call about to run belongs to (``idempotency_key()``) and hand
    its receipt on (``approvals.receipt()``): a turn's calls each have their own. Called from
    the resume's ``before_call``, in the context the tool then runs in; ``released`` and the
    worker's ``receipts.holding`` put the previous values back when the resume ends."""
    _approval.set(approval_id)
    receipts.hold(receipt)


def idempotency_key() -> str | None:
    """The id of the approval a gated tool is running for (None outside a resume).

    It is the same on every attempt for one decision (a Retry after an interrupted run
    included), so a tool that can be idempotent can use it to do its work once.
    """
    return _approval.get()


def _gated(func: F, gate: Gate) -> F:
    signature = inspect.signature(func)
    wants_call = "llm_tool_call" in signature.parameters

    def release_of(llm_tool_call: llm.ToolCall | None) -> str | None:
        """The reviewer's response to return instead of running (None: run the tool);
        pauses the chain when no decision released this call."""
        call_id = llm_tool_call.tool_call_id if llm_tool_call is not None else None
        release = _released.get() or {}
        if call_id is not None and call_id in release:
            return release[call_id]
        if llm_tool_call is not None:
            # Arguments that are not I-JSON could never be signed for: refused before any
            # rule, grant or card sees them. llm hands the model this error as the tool's
            # result ("Error: ..."), so it can call again with, say, an id as a string.
            ijson.check_arguments(llm_tool_call.arguments)
        screen = _screen.get()
        if screen is not None and llm_tool_call is not None and call_id is not None:
            screening = screen(llm_tool_call, gate)
            if screening.output is not None:
                return screening.output
            if screening.run:
                return None
        raise llm.PauseChain(f"{func.__name__} needs approval")

    if inspect.iscoroutinefunction(func):
        # llm awaits coroutine tools (and runs them concurrently in async chains): the gate
        # must be a coroutine function too, or llm would take it for a sync tool.
        @functools.wraps(func)
        async def gated_async(
            *args: Any, llm_tool_call: llm.ToolCall | None = None, **kwargs: Any
        ) -> Any:
            response = release_of(llm_tool_call)
            if response is not None:
                return response
            if wants_call:
                kwargs["llm_tool_call"] = llm_tool_call
            return await func(*args, **kwargs)

        gated: Any = gated_async
    else:

        @functools.wraps(func)
        def gated_sync(*args: Any, llm_tool_call: llm.ToolCall | None = None, **kwargs: Any) -> Any:
            response = release_of(llm_tool_call)
            if response is not None:
                return response
            if wants_call:
                kwargs["llm_tool_call"] = llm_tool_call
            return func(*args, **kwargs)

        gated = gated_sync

    if not wants_call:
        # llm passes the ToolCall only to tools whose signature declares it.
        gated.__signature__ = _with_tool_call(signature)
    setattr(gated, GATE_ATTRIBUTE, gate)
    return gated  # type: ignore[no-any-return]


def _with_tool_call(signature: inspect.Signature) -> inspect.Signature:
    extra = inspect.Parameter(
        "llm_tool_call", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=llm.ToolCall
    )
    params = list(signature.parameters.values())
    # Keyword-only parameters must come before **kwargs.
    at = len(params) - 1 if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD else None
    params.insert(len(params) if at is None else at, extra)
    return signature.replace(parameters=params)
