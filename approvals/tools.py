"""Finding tools again in another process.

The worker re-imports each tool by its dotted path (``module:qualname``), so tools must be
module-level functions. The tool's JSON schema is saved at the pause and compared at the
resume: a resume never runs a tool whose arguments changed meaning since it was approved.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import llm
from llm.models import ToolDef

from approvals.errors import GateError, ResumeError
from approvals.models import ToolRef

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1024)
def describe_tool(tool: Callable[..., Any]) -> llm.Tool:
    """llm's view of a tool function: its name and the JSON schema the model sees.

    Cached: building the schema (a pydantic model per call) cost milliseconds per tool on
    every pause, and a function's signature does not change while it exists.
    """
    return llm.Tool.function(tool)  # type: ignore[no-untyped-call,no-any-return]


def llm_tools(tools: Sequence[Callable[..., Any]]) -> list[ToolDef]:
    """The tools as llm sees them, from the cache (llm would rebuild each schema per prompt)."""
    return [describe_tool(tool) for tool in tools]


def tool_refs(tools: Sequence[Callable[..., Any]]) -> list[ToolRef]:
    """References a worker can import; ``GateError`` for tools it could never find."""
    return [_ref(tool) for tool in tools]


def _ref(tool: Callable[..., Any]) -> ToolRef:
    if isinstance(tool, llm.Tool) or not callable(tool):
        raise GateError(
            f"{tool!r}: pass plain module-level functions as tools (the worker imports them)"
        )
    module, qualname = tool.__module__, tool.__qualname__
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise GateError(f"tool {qualname} must be defined at module level, not inside a function")
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is None:
            raise GateError(
                f"tool {qualname} is defined in a script run as __main__; a worker cannot "
                "import it. Move the tools into a module (or run the script with python -m)."
            )
        module = spec.name
    definition = describe_tool(tool)
    return ToolRef(
        name=definition.name, path=f"{module}:{qualname}", schema=definition.input_schema
    )


def import_modules(allowed: Sequence[str]) -> None:
    """Import the allowed tool modules now (the worker does, so work-horses inherit them)."""
    for name in allowed:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # the resume that needs it reports it on its approval
            log.warning("APPROVALS_TOOL_MODULES: cannot import %s: %s", name, exc)


def import_tools(refs: Sequence[ToolRef], allowed: Sequence[str]) -> list[Callable[..., Any]]:
    """Import every tool of a record; ``ResumeError`` when one is missing or has changed.

    Only modules in ``allowed`` (and their submodules) are imported: the record comes from
    Redis, a trust boundary, and must not be able to name arbitrary code.
    """
    for ref in refs:
        check_allowed(ref, allowed)
    return [_import(ref, allowed) for ref in refs]


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


def _import(ref: ToolRef, allowed: Sequence[str]) -> Callable[..., Any]:
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
    if not callable(target) or isinstance(target, type):
        raise ResumeError(f"{ref.path} is not a tool function")
    try:
        schema = describe_tool(target).input_schema
    except (TypeError, ValueError, AttributeError) as exc:
        raise ResumeError(f"{ref.path} is not a tool function: {exc}") from None
    if schema != ref.schema:
        raise ResumeError(
            f"tool {ref.name} ({ref.path}) changed its arguments since the pause; "
            "refusing to resume with a different schema"
        )
    return target  # type: ignore[no-any-return]
