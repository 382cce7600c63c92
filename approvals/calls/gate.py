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
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar, cast, overload

import attrs
import llm

from approvals.decisions import ijson
from approvals.errors import CorruptRecord
from approvals.models import UNSET, GateOptions, options_from_dict, options_to_dict
from approvals.models.options import options_doc
from approvals.proof import receipts

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")

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


@dataclass(frozen=True, init=False)
class Gate:
    """How a gated tool asks for approval: its options (``GateOptions``), kept on the tool."""

    options: GateOptions

    def __init__(self, options: GateOptions | None = None, /, **named: Any) -> None:
        """``Gate(options)``, or the options by name (as ``requires_approval`` takes them;
        ``policy=`` gives those an approval carries to its decision as one)."""
        start = named.pop("policy", None) or options or GateOptions()
        object.__setattr__(self, "options", attrs.evolve(start, **named) if named else start)

    # How a gate reads to someone looking at one (``gate_of(tool).policy`` and so on).

    @property
    def policy(self) -> GateOptions:
        """The options its approvals carry to their decision."""
        return self.options.policy

    @property
    def expires_in(self) -> float | None:
        """Its own expiry in seconds (None: the setting's, or none: ``waits_forever``)."""
        expires_in = self.options.expires_in
        return None if expires_in is UNSET else expires_in

    @property
    def waits_forever(self) -> bool:
        """``expires_in=None`` was given: its approvals never expire."""
        return self.options.expires_in is None

    def describe(self, arguments: dict[str, Any]) -> str | None:
        return describe(self.options.summary, arguments)


def describe(summary: str | None, arguments: dict[str, Any]) -> str | None:
    """``summary`` with the arguments filled in; the raw template if they do not fit."""
    if summary is None:
        return None
    try:
        return summary.format_map(arguments)
    except (KeyError, IndexError, ValueError, AttributeError, TypeError):
        return summary


class _Decorator(Protocol[P]):
    """``requires_approval``'s type: bare on a function, or called with the options ``P``."""

    @overload
    def __call__(self, fn: F, /) -> F: ...
    @overload
    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Callable[[F], F]: ...


def _taking(options: Callable[P, GateOptions]) -> Callable[[Callable[..., Any]], _Decorator[P]]:
    """Type a decorator as taking ``options``' keyword arguments, and say so to ``help()``
    and ``inspect.signature``: its docstring gains their docs (the function is unchanged)."""

    def typed(function: Callable[..., Any]) -> _Decorator[P]:
        bare = inspect.Parameter("fn", inspect.Parameter.POSITIONAL_ONLY, default=None)
        taken = inspect.signature(options).parameters.values()
        function.__signature__ = inspect.Signature([bare, *taken])  # type: ignore[attr-defined]
        function.__doc__ = f"{inspect.cleandoc(function.__doc__ or '')}\n\n{options_doc()}"
        return cast(_Decorator[P], function)

    return typed


@_taking(GateOptions)
def requires_approval(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Mark a tool as needing approval; usable bare (``@requires_approval``) or with options
    (``@requires_approval(summary="Delete {path}", approvals_required=2)``).

    The options are the fields of ``approvals.models.GateOptions``, each with its doc below;
    one it does not know is a TypeError, an impossible value a TypeError or a ValueError,
    raised here before any function is decorated.
    """
    chosen = Gate(GateOptions(**options))

    def decorate(func: F) -> F:
        return _gated(func, chosen)

    return decorate(fn) if fn is not None else decorate


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
    chosen = Gate(GateOptions(**options))  # an unknown option is a TypeError, as for any call
    if isinstance(target, llm.Toolbox):
        if methods is None:
            raise TypeError("gate(toolbox) needs methods=[...]: the methods that wait for a person")
        gate_methods(target, _names(methods, "methods"), chosen)
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
    return options_to_dict(options.options)


def gate_from_dict(data: Mapping[str, Any]) -> Gate:
    """The gate a pause recorded, in this version's form or the previous one's
    (``CorruptRecord`` when the data is not one)."""
    return Gate(options_from_dict(_flattened(data)))


def _flattened(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A gate as the previous version recorded it, with the options read when someone
    decides nested in ``policy`` and ``waits_forever`` beside ``expires_in`` (null: the
    setting), in this version's form: the options side by side (``expires_in`` null: never
    expire, left out: the setting). This version's form passes unchanged."""
    if not isinstance(data, dict) or "waits_forever" not in data:
        return data
    policy = data.get("policy")
    if not isinstance(policy, dict):
        raise CorruptRecord("a recorded gate has no policy")
    flat = {**policy, **{k: v for k, v in data.items() if k not in ("policy", "waits_forever")}}
    if data["waits_forever"] is True:
        flat["expires_in"] = None
    elif flat.get("expires_in") is None:
        flat.pop("expires_in", None)
    return flat


def _names(value: Iterable[str], option: str) -> tuple[str, ...]:
    """A tuple of names; a bare string is refused (it would be read letter by letter)."""
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
