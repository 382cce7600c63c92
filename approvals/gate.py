"""The gate: ``@requires_approval`` marks a tool whose calls wait for a person.

A gated tool raises ``llm.PauseChain`` unless its call was released by a decision. Decisions
are keyed by the call's ``tool_call_id`` (llm hands it to tools that declare ``llm_tool_call``),
never by argument values, so an approval can only ever release the one call it was made for.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import llm

from approvals.models import OnReject, Policy

F = TypeVar("F", bound=Callable[..., Any])

GATE_ATTRIBUTE = "__approval_gate__"

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
    expires_in: float | None = None
    policy: Policy = field(default_factory=Policy)

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
    expires_in: float | None = None,
    approvers: Iterable[str] | None = None,
    approver_groups: Iterable[str] | None = None,
    allow_self_approval: bool = False,
    approvals_required: int = 1,
    webhook: str | None = None,
) -> Callable[[F], F]: ...


def requires_approval(
    fn: F | None = None,
    *,
    channel: str | None = None,
    summary: str | None = None,
    editable: Iterable[str] | None = None,
    reason_required: bool = False,
    on_reject: str = "resume",
    expires_in: float | None = None,
    approvers: Iterable[str] | None = None,
    approver_groups: Iterable[str] | None = None,
    allow_self_approval: bool = False,
    approvals_required: int = 1,
    webhook: str | None = None,
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
            ``APPROVALS_EXPIRES_IN``, 24 h).
        approvers, approver_groups: Slack user ids / user group ids allowed to decide,
            instead of ``APPROVERS`` / ``APPROVER_GROUPS``.
        allow_self_approval: the person the agent acts for (``requested_by``) may decide.
        approvals_required: distinct approvals needed; one rejection still ends it.
        webhook: a URL that also receives this tool's state changes, signed with
            ``APPROVALS_WEBHOOK_SECRET`` like those of ``APPROVALS_WEBHOOK_URLS``.
    """
    if approvals_required < 1:
        raise ValueError("approvals_required must be at least 1")
    if expires_in is not None and expires_in <= 0:
        raise ValueError("expires_in must be a positive number of seconds")
    approvers, approver_groups, editable = (
        _names(approvers, "approvers"),
        _names(approver_groups, "approver_groups"),
        _names(editable, "editable"),
    )
    gate = Gate(
        channel=channel,
        summary=summary,
        expires_in=expires_in,
        policy=Policy(
            approvers=approvers,
            approver_groups=approver_groups,
            allow_self_approval=allow_self_approval,
            approvals_required=approvals_required,
            editable=editable,
            reason_required=reason_required,
            on_reject=OnReject(on_reject),
            webhook=webhook,
        ),
    )

    def decorate(func: F) -> F:
        return _gated(func, gate)

    return decorate(fn) if fn is not None else decorate


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


def idempotency_key() -> str | None:
    """The id of the approval a gated tool is running for (None outside a resume).

    It is the same on every attempt for one decision (a Retry after an interrupted run
    included), so a tool that can be idempotent can use it to do its work once.
    """
    return _approval.get()


def _gated(func: F, gate: Gate) -> F:
    signature = inspect.signature(func)
    wants_call = "llm_tool_call" in signature.parameters

    @functools.wraps(func)
    def gated(*args: Any, llm_tool_call: llm.ToolCall | None = None, **kwargs: Any) -> Any:
        call_id = llm_tool_call.tool_call_id if llm_tool_call is not None else None
        release = _released.get() or {}
        if call_id is None or call_id not in release:
            raise llm.PauseChain(f"{func.__name__} needs approval")
        response = release[call_id]
        if response is not None:
            return response
        if wants_call:
            kwargs["llm_tool_call"] = llm_tool_call
        return func(*args, **kwargs)

    if not wants_call:
        # llm passes the ToolCall only to tools whose signature declares it.
        gated.__signature__ = _with_tool_call(signature)  # type: ignore[attr-defined]
    setattr(gated, GATE_ATTRIBUTE, gate)
    return gated  # type: ignore[return-value]


def _with_tool_call(signature: inspect.Signature) -> inspect.Signature:
    extra = inspect.Parameter(
        "llm_tool_call", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=llm.ToolCall
    )
    params = list(signature.parameters.values())
    # Keyword-only parameters must come before **kwargs.
    at = len(params) - 1 if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD else None
    params.insert(len(params) if at is None else at, extra)
    return signature.replace(parameters=params)
