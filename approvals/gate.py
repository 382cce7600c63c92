"""The gate: ``@requires_approval`` marks a tool whose calls wait for a person.

A gated tool raises ``llm.PauseChain`` unless its call was approved. The decision is keyed by
the call's ``tool_call_id`` (llm hands it to tools that declare ``llm_tool_call``), never by
argument values, so an approval can only ever release the one call it was given for.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import llm

F = TypeVar("F", bound=Callable[..., Any])

GATE_ATTRIBUTE = "__approval_gate__"

#: Tool call ids the running resume may execute; llm runs sync tools in the caller's context.
_released: ContextVar[frozenset[str]] = ContextVar("approvals_released", default=frozenset())


@dataclass(frozen=True)
class Gate:
    """How a gated tool asks for approval."""

    #: Channel for this tool's cards, instead of ``APPROVALS_CHANNEL``.
    channel: str | None = None
    #: One line for the card, formatted with the call's arguments: ``"Delete {path}"``.
    summary: str | None = None

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
    *, channel: str | None = None, summary: str | None = None
) -> Callable[[F], F]: ...


def requires_approval(
    fn: F | None = None, *, channel: str | None = None, summary: str | None = None
) -> F | Callable[[F], F]:
    """Mark a tool as needing approval; usable bare or with options.

    Args:
        channel: post this tool's cards to this channel id instead of ``APPROVALS_CHANNEL``.
        summary: a one-line description for the card, e.g. ``"Delete {path}"``.
    """
    gate = Gate(channel=channel, summary=summary)

    def decorate(func: F) -> F:
        return _gated(func, gate)

    return decorate(fn) if fn is not None else decorate


def gate_of(tool: Any) -> Gate | None:
    """The ``Gate`` of a tool function, or None when it is not gated."""
    gate = getattr(tool, GATE_ATTRIBUTE, None)
    return gate if isinstance(gate, Gate) else None


@contextmanager
def released(tool_call_ids: Iterable[str]) -> Iterator[None]:
    """Let gated calls with these ids run inside the block (used when resuming)."""
    token = _released.set(frozenset(tool_call_ids))
    try:
        yield
    finally:
        _released.reset(token)


def _gated(func: F, gate: Gate) -> F:
    signature = inspect.signature(func)
    wants_call = "llm_tool_call" in signature.parameters

    @functools.wraps(func)
    def gated(*args: Any, llm_tool_call: llm.ToolCall | None = None, **kwargs: Any) -> Any:
        call_id = llm_tool_call.tool_call_id if llm_tool_call is not None else None
        if call_id is None or call_id not in _released.get():
            raise llm.PauseChain(f"{func.__name__} needs approval")
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
