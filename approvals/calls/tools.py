"""Finding tools again in another process.

The worker re-imports each tool by its dotted path (``module:qualname``), so tools must be
module-level functions, or methods of an ``llm.Toolbox`` subclass defined at module level,
which the worker builds again from the constructor arguments llm records (JSON, never a
pickle). The tool's JSON schema is saved at the pause and compared at the resume: a resume
never runs a tool whose arguments changed meaning since it was approved.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import logging
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import llm
from llm.models import ToolDef

from approvals.calls.gate import (
    applied_gates,
    apply_gate,
    gate_from_dict,
    gate_methods,
    gate_of,
    gate_to_dict,
    is_applied,
    tool_function,
)
from approvals.errors import CorruptRecord, GateError, ResumeError
from approvals.models import ToolRef
from approvals.models.options import dotted_path

#: What an agent's ``tools=`` holds once read: functions and toolbox instances.
AgentTool = Callable[..., Any] | llm.Toolbox

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1024)
def describe_tool(tool: Callable[..., Any]) -> llm.Tool:
    """llm's view of a tool function: its name and the JSON schema the model sees.

    Cached: building the schema (a pydantic model per call) cost milliseconds per tool on
    every pause, and a function's signature does not change while it exists.
    """
    return llm.Tool.function(tool)  # type: ignore[no-untyped-call,no-any-return]


def agent_tools(tools: Sequence[Any]) -> list[AgentTool]:
    """The tools as given to ``run_agent``, with each ``llm.Tool`` (a plugin's, from
    ``llm.get_tools()``) read as the function behind it; ``GateError`` for what a worker
    could never find again."""
    found: list[AgentTool] = []
    for tool in tools:
        if isinstance(tool, llm.Toolbox):
            found.append(tool)
        elif isinstance(tool, llm.Tool):
            function = tool_function(tool)
            if function is None:
                raise GateError(
                    f"tool {tool.name}: a worker finds tools by their function; pass an llm.Tool "
                    "whose name is its function's name, or the function itself"
                )
            found.append(function)
        elif isinstance(tool, type) and issubclass(tool, llm.Toolbox):
            raise GateError(f"{tool.__name__} is a toolbox class: pass an instance of it")
        else:
            found.append(tool)
    return found


def llm_tools(tools: Sequence[AgentTool]) -> list[ToolDef]:
    """The tools as llm sees them, from the cache (llm would rebuild each schema per prompt)."""
    return [tool if isinstance(tool, llm.Toolbox) else describe_tool(tool) for tool in tools]


def tool_named(tools: Sequence[AgentTool], name: str) -> llm.Tool | None:
    """The llm tool called ``name`` among the agent's tools (toolbox methods included)."""
    for tool in tools:
        if isinstance(tool, llm.Toolbox):
            for method in tool.tools():
                if method.name == name:
                    return method
        elif describe_tool(tool).name == name:
            return describe_tool(tool)
    return None


def tool_refs(tools: Sequence[AgentTool]) -> list[ToolRef]:
    """References a worker can import; ``GateError`` for tools it could never find."""
    refs: list[ToolRef] = []
    for tool in tools:
        if isinstance(tool, llm.Toolbox):
            refs.extend(_toolbox_refs(tool))
        else:
            refs.append(_ref(tool))
    return refs


def _ref(tool: Callable[..., Any]) -> ToolRef:
    if isinstance(tool, llm.Tool) or not callable(tool):
        raise GateError(
            f"{tool!r}: pass plain module-level functions as tools (the worker imports them)"
        )
    path = _dotted_path(tool, "tool")
    definition = describe_tool(tool)
    applied = gate_of(tool) if is_applied(tool) else None
    return ToolRef(
        name=definition.name,
        path=path,
        schema=definition.input_schema,
        gate=None if applied is None else gate_to_dict(applied),
    )


def _dotted_path(target: Any, kind: str) -> str:
    return dotted_path(target, kind, GateError)


def _toolbox_refs(toolbox: llm.Toolbox) -> list[ToolRef]:
    """One reference per method tool, each carrying how to build the toolbox again.

    Tools added with ``add_tool`` are not listed: the worker's toolbox gets them again from
    its ``prepare()``, which llm calls before the resumed calls run.
    """
    cls = type(toolbox)
    path = _dotted_path(cls, "toolbox")
    config = _json_config(toolbox)
    applied = applied_gates(toolbox)
    refs = []
    for tool in toolbox.tools():
        if getattr(tool.implementation, "__self__", None) is not toolbox:
            continue  # added with add_tool
        method = tool.name.removeprefix(cls.__name__ + "_")
        gate = applied.get(method)
        refs.append(
            ToolRef(
                name=tool.name,
                path=path,
                schema=tool.input_schema,
                method=method,
                config=config,
                gate=None if gate is None else gate_to_dict(gate),
            )
        )
    return refs


def _json_config(toolbox: llm.Toolbox) -> dict[str, Any]:
    config = dict(getattr(toolbox, "_config", {}) or {})
    try:
        if json.loads(json.dumps(config)) == config:
            return config
    except (TypeError, ValueError):
        pass
    raise GateError(
        f"toolbox {type(toolbox).__name__}: its constructor arguments {sorted(config)} must be "
        "JSON values (strings, numbers, lists...): the worker builds the toolbox again from them"
    )


def import_modules(allowed: Sequence[str]) -> None:
    """Import the allowed tool modules now, and describe the functions they define.

    The worker does this before it forks, so every work-horse inherits both the modules and
    llm's description of each tool (a pydantic model built from the signature). A horse's
    cache dies with it: without this, every job would build its tools' schemas again before
    the approved tool could start.
    """
    for name in allowed:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # the resume that needs it reports it on its approval
            log.warning("APPROVALS_TOOL_MODULES: cannot import %s: %s", name, exc)
    for name, module in list(sys.modules.items()):
        if _allowed(name, allowed):  # the submodules the packages imported too
            _describe_functions(module)


def _describe_functions(module: types.ModuleType) -> None:
    for value in list(vars(module).values()):
        # An llm plugin hook beside the tools (``register_models(register)``) is no tool, and
        # pydantic warns about a field named ``register``.
        if hasattr(value, "llm_impl"):
            continue
        if inspect.isfunction(value) and value.__module__ == module.__name__:
            try:
                describe_tool(value)
            except Exception:  # not every function is a tool; a resume reports a bad one
                continue


def import_tools(refs: Sequence[ToolRef], allowed: Sequence[str]) -> list[AgentTool]:
    """Import every tool of a record; ``ResumeError`` when one is missing or has changed.

    Only modules in ``allowed`` (and their submodules) are imported: the record comes from
    Redis, a trust boundary, and must not be able to name arbitrary code. The methods of one
    toolbox (same class, same constructor arguments) come back as one toolbox instance.
    """
    for ref in refs:
        check_allowed(ref, allowed)
    # Grouped in the record's order: a toolbox stands where its first method was listed.
    groups: dict[str | tuple[str, str], list[ToolRef]] = {}
    for index, ref in enumerate(refs):
        key = str(index) if ref.method is None else (ref.path, json.dumps(ref.config or {}))
        groups.setdefault(key, []).append(ref)
    return [
        _import(group[0], allowed) if isinstance(key, str) else _rebuild(group, allowed)
        for key, group in groups.items()
    ]


def _rebuild(refs: list[ToolRef], allowed: Sequence[str]) -> llm.Toolbox:
    """The toolbox again, from its class and the constructor arguments llm recorded."""
    first = refs[0]
    cls = _resolve(first, allowed)
    if not isinstance(cls, type) or not issubclass(cls, llm.Toolbox):
        raise ResumeError(f"{first.path} is not an llm.Toolbox class")
    try:
        toolbox = cls(**(first.config or {}))
    except Exception as exc:  # the toolbox's own constructor, with arguments from the record
        raise ResumeError(
            f"cannot build toolbox {first.path} again from its arguments: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    for ref in refs:
        if ref.gate is not None and ref.method is not None:
            try:
                gate_methods(toolbox, [ref.method], gate_from_dict(ref.gate))
            except (TypeError, CorruptRecord) as exc:
                raise ResumeError(f"tool {ref.name}: {exc}") from None
    methods = {tool.name: tool for tool in toolbox.tools()}
    for ref in refs:
        method = methods.get(ref.name)
        if method is None:
            raise ResumeError(f"toolbox {first.path} has no tool {ref.name} any more")
        if method.input_schema != ref.schema:
            raise _changed(ref)
    return toolbox


def _changed(ref: ToolRef) -> ResumeError:
    return ResumeError(
        f"tool {ref.name} ({ref.path}) changed its arguments since the pause; "
        "refusing to resume with a different schema"
    )


def module_allowed(module: str, allowed: Sequence[str]) -> bool:
    """Whether ``module`` is one of ``allowed`` (APPROVALS_TOOL_MODULES) or inside one."""
    return _allowed(module, allowed)


def _allowed(module: str, allowed: Sequence[str]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in allowed)


def check_allowed(ref: ToolRef, allowed: Sequence[str]) -> None:
    """``ResumeError`` unless the tool's module is in ``allowed`` (APPROVALS_TOOL_MODULES)."""
    module = ref.path.partition(":")[0]
    if not _allowed(module, allowed):
        raise ResumeError(
            f"tool {ref.name} lives in {module}, which is not in APPROVALS_TOOL_MODULES; "
            "refusing to import it"
        )


def _resolve(ref: ToolRef, allowed: Sequence[str]) -> Any:
    """What ``ref.path`` names, if it is defined in an allowed module."""
    module_name, _, qualname = ref.path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
            # A path may not walk through another module (``tools:os.system``).
            if isinstance(target, types.ModuleType):
                raise ResumeError(f"{ref.path} leads through module {target.__name__}")
    except (ImportError, AttributeError, ValueError) as exc:
        raise ResumeError(f"cannot import tool {ref.name} from {ref.path}: {exc}") from None
    defined_in = getattr(target, "__module__", None)
    if not isinstance(defined_in, str) or not _allowed(defined_in, allowed):
        raise ResumeError(
            f"{ref.path} is defined in {defined_in}, which is not in APPROVALS_TOOL_MODULES"
        )
    return target


def _import(ref: ToolRef, allowed: Sequence[str]) -> Callable[..., Any]:
    target = _resolve(ref, allowed)
    if not callable(target) or isinstance(target, type):
        raise ResumeError(f"{ref.path} is not a tool function")
    if ref.gate is not None and gate_of(target) is None:
        try:  # gated from outside its code: the same gate again
            target = apply_gate(target, gate_from_dict(ref.gate))
        except CorruptRecord as exc:
            raise ResumeError(f"tool {ref.name}: {exc}") from None
    try:
        schema = describe_tool(target).input_schema
    except (TypeError, ValueError, AttributeError) as exc:
        raise ResumeError(f"{ref.path} is not a tool function: {exc}") from None
    if schema != ref.schema:
        raise _changed(ref)
    return target  # type: ignore[no-any-return]
