"""Finding tools again in another process: references at the pause, imports at the resume."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import llm
import pytest

from approvals.calls.tools import (
    check_allowed,
    describe_tool,
    import_modules,
    import_tools,
    tool_refs,
)
from approvals.errors import GateError, ResumeError
from approvals.models import ToolRef
from tests.agents.tools import delete_path, list_files, read_file, send_email

AGENT_TOOLS = [list_files, read_file, delete_path, send_email]
#: What a worker of the test agents allows (APPROVALS_TOOL_MODULES in tests/conftest.py).
ALLOWED = ["tests.agents"]


def ping(host: str, count: int = 1) -> str:
    """Ping a host."""
    return f"pinged {host} x{count}"


class Network:
    @staticmethod
    def trace(host: str) -> str:
        """Trace the route to a host."""
        return f"traced {host}"


def test_importing_the_tool_modules_describes_their_tools_ahead_of_any_resume():
    """The worker imports its tool modules before it forks; each work-horse then finds its
    tools' schemas built, instead of building them again for every job."""
    describe_tool.cache_clear()
    import_modules(ALLOWED)
    before = describe_tool.cache_info()
    assert import_tools(tool_refs(AGENT_TOOLS), ALLOWED) == AGENT_TOOLS
    after = describe_tool.cache_info()
    assert after.misses == before.misses  # nothing described again
    assert after.hits > before.hits


def test_tool_refs_name_module_and_qualname():
    """Each reference is the llm tool name plus an importable module:qualname path."""
    refs = tool_refs([list_files, delete_path, ping, Network.trace])
    assert [(r.name, r.path) for r in refs] == [
        ("list_files", "tests.agents.tools:list_files"),
        ("delete_path", "tests.agents.tools:delete_path"),
        ("ping", "tests.calls.test_tools:ping"),
        ("trace", "tests.calls.test_tools:Network.trace"),
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
    with pytest.raises(GateError, match="module-level"):
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
    imported = import_tools(tool_refs(AGENT_TOOLS), ALLOWED)
    assert len(imported) == len(AGENT_TOOLS)
    assert all(got is want for got, want in zip(imported, AGENT_TOOLS, strict=True))


def test_import_tools_follows_dotted_qualnames():
    """A static method reached through its class imports back as the same function."""
    assert import_tools(tool_refs([Network.trace]), ["tests.calls.test_tools"]) == [Network.trace]


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
    allowed = [path.partition(":")[0]]  # allowed, so that the import itself is what fails
    with pytest.raises(ResumeError, match="cannot import tool list_files"):
        import_tools([ref], allowed)


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
        import_tools([tool_refs([list_files])[0], changed], ALLOWED)


def test_a_tool_renamed_to_another_function_is_a_resume_error():
    """A path that now names a different tool (other schema) is refused."""
    ref = ToolRef(
        "delete_path", "tests.agents.tools:send_email", tool_refs([delete_path])[0].schema
    )
    with pytest.raises(ResumeError):
        import_tools([ref], ALLOWED)


@pytest.mark.parametrize("path", ["tests.agents.tools:json", "tests.agents.tools:os.sep"])
def test_a_path_to_something_not_a_function_is_a_resume_error(path):
    """A path that now names a module or a constant stops the resume with a ResumeError."""
    with pytest.raises(ResumeError):
        import_tools([ToolRef("list_files", path, {})], ALLOWED)


# --- which modules a worker may import tools from ----------------------------------------------


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("tests.agents.tools:list_files", ["tests.agents"]),
        ("tests.agents.tools:list_files", ["tests.agents.tools"]),
        ("tests.agents.tools:list_files", ["tests"]),
        ("tests.agents.tools:list_files", ["myagents", "tests.agents"]),
    ],
)
def test_a_tool_in_an_allowed_module_or_its_submodules_is_imported(path, allowed):
    """A module named in APPROVALS_TOOL_MODULES, or any module under it, may be imported."""
    ref = replace(tool_refs([list_files])[0], path=path)
    check_allowed(ref, allowed)
    assert import_tools([ref], allowed) == [list_files]


@pytest.mark.parametrize(
    "allowed",
    [[], ["myagents"], ["tests.agent"], ["tests.agents.tool"], ["tests.agents.tools.sub"]],
)
def test_a_tool_outside_the_allowed_modules_is_refused(allowed):
    """Anything but an allowed module or a submodule of one (not a mere prefix) is refused."""
    ref = tool_refs([list_files])[0]
    with pytest.raises(ResumeError, match="not in APPROVALS_TOOL_MODULES"):
        check_allowed(ref, allowed)
    with pytest.raises(ResumeError, match="not in APPROVALS_TOOL_MODULES"):
        import_tools([ref], allowed)


def test_a_refused_module_is_never_imported():
    """The allow-list is checked before any import, for every tool of the record."""
    refs = [tool_refs([list_files])[0], ToolRef("evil", "no_such_package_xyz.payload:run", {})]
    with pytest.raises(ResumeError, match="not in APPROVALS_TOOL_MODULES") as refused:
        import_tools(refs, ALLOWED)
    assert "no_such_package_xyz.payload" in str(refused.value)


@pytest.mark.parametrize(
    ("qualname", "target"),
    [("os.system", os.system), ("os.remove", os.remove), ("json.dump", json.dump)],
    ids=["os.system", "os.remove", "json.dump"],
)
def test_an_allowed_module_cannot_lead_to_functions_of_other_modules(qualname, target):
    """A qualname reaching through a module the allowed one imported is refused.

    The record comes from Redis; with a schema copied from the target it passes every check.
    """
    schema = describe_tool(target).input_schema
    ref = ToolRef("delete_path", f"tests.agents.tools:{qualname}", schema)
    with pytest.raises(ResumeError):
        import_tools([ref], ALLOWED)


# --- toolboxes and tools gated from outside ----------------------------------------------------

NOTES_ALLOWED = ["tests.agents"]


class Opaque(llm.Toolbox):
    """A toolbox whose constructor takes something that is not JSON."""

    def __init__(self, handle: object) -> None:
        self.handle = handle

    def peek(self) -> str:
        """Peek."""
        return "peeked"


def test_a_toolbox_comes_back_as_one_instance_built_from_its_config(tmp_path):
    from tests.agents.toolboxes import Notes

    refs = tool_refs([list_files, Notes(str(tmp_path), owner="ops")])
    assert [r.name for r in refs] == [
        "list_files",
        "Notes_delete_note",
        "Notes_list_notes",
        "Notes_write_note",
    ]
    imported = import_tools(refs, NOTES_ALLOWED)
    assert imported[0] is list_files and len(imported) == 2
    rebuilt = imported[1]
    assert isinstance(rebuilt, Notes) and (rebuilt.root, rebuilt.owner) == (str(tmp_path), "ops")


def test_a_toolbox_whose_config_is_not_json_is_refused_before_the_run():
    with pytest.raises(GateError, match="must be JSON values"):
        tool_refs([Opaque(object())])


def test_a_toolbox_class_instead_of_an_instance_is_refused():
    from approvals.calls.tools import agent_tools
    from tests.agents.toolboxes import Notes

    with pytest.raises(GateError, match="toolbox class"):
        agent_tools([Notes])


def test_a_record_naming_a_class_that_is_not_a_toolbox_is_refused(tmp_path):
    from tests.agents.toolboxes import Notes

    ref = tool_refs([Notes(str(tmp_path))])[0]
    forged = replace(ref, path="tests.agents.scripted:Scripted")
    with pytest.raises(ResumeError, match=r"not an llm\.Toolbox"):
        import_tools([forged], NOTES_ALLOWED)


def test_a_toolbox_method_whose_schema_changed_is_refused(tmp_path):
    from tests.agents.toolboxes import Notes

    ref = tool_refs([Notes(str(tmp_path))])[0]
    changed = replace(ref, schema={"type": "object", "properties": {"path": {"type": "string"}}})
    with pytest.raises(ResumeError, match="changed its arguments"):
        import_tools([changed], NOTES_ALLOWED)


def test_a_toolbox_whose_constructor_fails_on_the_recorded_config_is_a_resume_error(tmp_path):
    from tests.agents.toolboxes import Notes

    ref = tool_refs([Notes(str(tmp_path))])[0]
    with pytest.raises(ResumeError, match="cannot build toolbox"):
        import_tools([replace(ref, config={"no_such_argument": 1})], NOTES_ALLOWED)


def test_the_gate_of_a_function_gated_from_outside_is_recorded_and_put_back():
    from approvals.calls.gate import gate_of
    from tests.agents import vendor
    from tests.agents.gated import archive_bucket

    (ref,) = tool_refs([archive_bucket])
    assert ref.path == "tests.agents.vendor:archive_bucket" and ref.gate is not None
    (imported,) = import_tools([ref], ALLOWED)
    assert imported is not vendor.archive_bucket  # the original, gated again
    assert gate_of(imported) == gate_of(archive_bucket)
    # A recorded gate that is not one fails the resume (Redis is a trust boundary).
    with pytest.raises(ResumeError, match="wrong type"):
        import_tools([replace(ref, gate={"summary": 3, "policy": {}})], ALLOWED)


def test_a_plugin_tool_from_llm_get_tools_is_found_by_its_function():
    from approvals.calls.tools import agent_tools

    tool = llm.get_tools()["llm_time"]
    (found,) = agent_tools([tool])
    (ref,) = tool_refs([found])
    assert ref.name == "llm_time" and ref.path.endswith(":llm_time")
    renamed = llm.Tool.function(ping, name="ping_host")
    with pytest.raises(GateError, match="name is its function's name"):
        agent_tools([renamed])


def test_a_toolbox_class_outside_the_allowed_modules_is_refused_before_any_import(tmp_path):
    """The allow-list covers toolbox classes: a record naming one elsewhere is refused, and
    its module is never imported."""
    from tests.agents.toolboxes import Notes

    ref = tool_refs([Notes(str(tmp_path))])[0]
    forged = replace(ref, path="no_such_toolbox_pkg.boxes:Notes")
    with pytest.raises(ResumeError, match="not in APPROVALS_TOOL_MODULES") as refused:
        import_tools([forged], NOTES_ALLOWED)
    assert "no_such_toolbox_pkg" in str(refused.value)
    sqlite_ref = replace(ref, path="llm_tools_sqlite:SQLite", config={"path": str(tmp_path)})
    with pytest.raises(ResumeError, match="not in APPROVALS_TOOL_MODULES"):
        import_tools([sqlite_ref], NOTES_ALLOWED)


def test_an_allowed_module_cannot_lead_to_a_toolbox_class_of_another_module(tmp_path):
    """A path through an allowed module to a class defined elsewhere (llm's own Toolbox,
    reached as an attribute) is refused: the class's own module must be allowed."""
    from tests.agents.toolboxes import Notes

    ref = tool_refs([Notes(str(tmp_path))])[0]
    forged = replace(ref, path="tests.agents.toolboxes:Notes.__base__", config={})
    with pytest.raises(ResumeError, match="not in APPROVALS_TOOL_MODULES"):
        import_tools([forged], NOTES_ALLOWED)
