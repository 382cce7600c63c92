"""Approval records for unit tests, built directly with the dataclasses (no llm), and one
written to Redis for the store's tests."""

from __future__ import annotations

import copy
from typing import Any

from approvals.models import Approval, Decision, DecisionKind, RunResult, Status, ToolRef

#: ``describe_tool(tests.agents.tools.delete_path).input_schema``, as pydantic emits it.
DELETE_SCHEMA: dict[str, Any] = {
    "properties": {
        "path": {"type": "string"},
        "recursive": {"default": False, "type": "boolean"},
    },
    "required": ["path"],
    "type": "object",
}
DELETE_REF = ToolRef("delete_path", "tests.agents.tools:delete_path", DELETE_SCHEMA)
LIST_REF = ToolRef(
    "list_files",
    "tests.agents.tools:list_files",
    {"properties": {"path": {"type": "string"}}, "required": ["path"], "type": "object"},
)
CREATED_AT = 1_700_000_000.0

#: The llm history a stored approval paused with.
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "parts": [{"type": "text", "text": "Tidy the build folder"}]},
    {"role": "assistant", "parts": [{"type": "tool_call", "name": "delete_path"}]},
]


def make_approval(**overrides: Any) -> Approval:
    """A pending ``delete_path`` approval; any field can be overridden."""
    values: dict[str, Any] = {
        "id": "a1b2c3d4e5f60718",
        "agent": "cleanup-bot",
        "model_id": "scripted",
        "tool_name": "delete_path",
        "tool_call_id": "tc_1",
        "arguments": {"path": "build/app.o"},
        # Fresh copies: a test that changes its approval's schema must not change everyone's.
        "tools": [copy.deepcopy(LIST_REF), copy.deepcopy(DELETE_REF)],
        "channel": "C0CARDS",
        "created_at": CREATED_AT,
    }
    values.update(overrides)
    return Approval(**values)


def make_decision(
    kind: DecisionKind = DecisionKind.APPROVE, actor: str = "UALICE", **overrides: Any
) -> Decision:
    """A decision made a minute after ``CREATED_AT``."""
    return Decision(kind=kind, actor=actor, at=CREATED_AT + 60, **overrides)


def make_decided(
    status: Status, kind: DecisionKind = DecisionKind.APPROVE, **overrides: Any
) -> Approval:
    """An approval that left ``pending`` (and, for finished statuses, has a result)."""
    result = None
    if status is Status.COMPLETED:
        result = RunResult(Status.COMPLETED, text="Done.")
    elif status is Status.FAILED:
        result = RunResult(Status.FAILED, error="ResumeError: tool vanished")
    elif status is Status.PAUSED:
        result = RunResult(Status.PAUSED, next_approval_id="b1b2c3d4e5f60718")
    return make_approval(status=status, decision=make_decision(kind), result=result, **overrides)


def stored_approval(conn: Any, **overrides: Any) -> Approval:
    """``make_approval(**overrides)`` written to Redis with ``HISTORY``, as a pause writes it."""
    from approvals import store

    approval = make_approval(**overrides)
    store.records.create(conn, approval, HISTORY).execute()
    return approval
