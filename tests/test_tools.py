"""Finding tools again in another process: references at the pause, imports at the resume."""

from __future__ import annotations

from dataclasses import replace

import llm
import pytest

from approvals.errors import GateError, ResumeError
from approvals.models import ToolRef
from approvals.tools import describe_tool, import_tools, tool_refs
from tests.agents.tools import delete_path, list_files, read_file, send_email

AGENT_TOOLS = [list_files, read_file, delete_path, send_email]


def ping(host: str, count: int = 1) -> str:
    """Ping a host."""
    return f"pinged {host} x{count}"


class Network:
    @staticmethod
    def trace(host: str) -> str:
        """Trace the route to a host."""
        return f"traced {host}"


def test_tool_refs_name_module_and_qualname():
    """Each reference is the llm tool name plus an importable module:qualname path."""
    refs = tool_refs([list_files, delete_path, ping, Network.trace])
    assert [(r.name, r.path) for r in refs] == [
        ("list_files", "tests.agents.tools:list_files"),
        ("delete_path", "tests.agents.tools:delete_path"),
        ("ping", "tests.test_tools:ping"),
        ("trace", "tests.test_tools:Network.trace"),
    ]


def test_tool_refs_save_the_schema_the_model_sees():
    """The saved schema is llm's input schema of the tool, without llm_tool_call."""
    ref = tool_refs([delete_path])[0]
    assert ref.schema == describe_tool(delete_path).input_schema
    assert set(ref.schema["properties"]) == {"path", "recursive"}
    assert tool_refs([ping])[0].schema["properties"]["count"] == {
        "default": 1,
        "type": "integer",
    }


def test_a_lambda_is_refused():
    """A lambda cannot be imported by a worker, so it is refused up front."""
    with pytest.raises(GateError, match="module level"):
        tool_refs([lambda path: path])


def test_a_nested_function_is_refused():
    """A function defined inside another cannot be imported by a worker."""

    def inner(path: str) -> str:
        """Nested."""
        return path

    with pytest.raises(GateError, match="inner"):
        tool_refs([list_files, inner])


@pytest.mark.parametrize("tool", [llm.Tool.function(list_files), "list_files", 42])
def test_tool_objects_and_non_callables_are_refused(tool):
    """llm.Tool instances and non-callables are refused: pass the plain function."""
    with pytest.raises(GateError, match="module-level functions"):
        tool_refs([tool])


def test_import_tools_round_trips_the_agent_tools():
    """A worker importing the references gets the very same functions back, in order."""
    imported = import_tools(tool_refs(AGENT_TOOLS))
    assert len(imported) == len(AGENT_TOOLS)
    assert all(got is want for got, want in zip(imported, AGENT_TOOLS, strict=True))


def test_import_tools_follows_dotted_qualnames():
    """A static method reached through its class imports back as the same function."""
    assert import_tools(tool_refs([Network.trace])) == [Network.trace]


@pytest.mark.parametrize(
    "path",
    [
        "tests.agents.nowhere:list_files",
        "no_such_package_xyz:tool",
        "tests.agents.tools:vanished",
        "tests.agents.tools:list_files.nested",
        "tests.agents.tools",
        "",
    ],
)
def test_a_missing_module_or_attribute_is_a_resume_error(path):
    """A tool that cannot be imported any more stops the resume with a ResumeError naming it."""
    ref = ToolRef("list_files", path, {})
    with pytest.raises(ResumeError, match="cannot import tool list_files"):
        import_tools([ref])


def test_a_changed_schema_is_a_resume_error():
    """A tool whose arguments changed since the pause is not run."""
    ref = tool_refs([delete_path])[0]
    changed = replace(
        ref,
        schema={
            **ref.schema,
            "properties": {**ref.schema["properties"], "force": {"type": "boolean"}},
        },
    )
    with pytest.raises(ResumeError, match="changed its arguments"):
        import_tools([tool_refs([list_files])[0], changed])


def test_a_tool_renamed_to_another_function_is_a_resume_error():
    """A path that now names a different tool (other schema) is refused."""
    ref = ToolRef(
        "delete_path", "tests.agents.tools:send_email", tool_refs([delete_path])[0].schema
    )
    with pytest.raises(ResumeError):
        import_tools([ref])


@pytest.mark.parametrize("path", ["tests.agents.tools:json", "tests.agents.tools:os.sep"])
def test_a_path_to_something_not_a_function_is_a_resume_error(path):
    """A path that now names a module or a constant stops the resume with a ResumeError."""
    with pytest.raises(ResumeError):
        import_tools([ToolRef("list_files", path, {})])
