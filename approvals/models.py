"""The approval record and its state machine.

An approval is one paused tool call waiting for a person. Its life::

                 ┌──────────► approved ──┐
    pending ─────┼──────────► edited ────┼──► running ──┬──► completed
                 └──────────► rejected ──┘              ├──► paused     (the resumed agent paused
                                                        │                again: a new approval)
                                                        └──► failed

``TRANSITIONS`` is the only statement of which moves are legal; ``store.transition`` applies
one atomically (a compare-and-set in Redis), so two clicks can never both leave ``pending``.
Records are JSON; ``from_dict`` checks every field because Redis is a trust boundary.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from approvals.errors import CorruptRecord


class Status(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    EDITED = "edited"
    REJECTED = "rejected"
    RUNNING = "running"
    COMPLETED = "completed"
    PAUSED = "paused"
    FAILED = "failed"


DECIDED = frozenset({Status.APPROVED, Status.EDITED, Status.REJECTED})
FINISHED = frozenset({Status.COMPLETED, Status.PAUSED, Status.FAILED})

TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PENDING: DECIDED,
    Status.APPROVED: frozenset({Status.RUNNING}),
    Status.EDITED: frozenset({Status.RUNNING}),
    Status.REJECTED: frozenset({Status.RUNNING}),
    Status.RUNNING: FINISHED,
    Status.COMPLETED: frozenset(),
    Status.PAUSED: frozenset(),
    Status.FAILED: frozenset(),
}


def sources_of(target: Status) -> list[Status]:
    """The statuses from which ``target`` may be entered."""
    return [source for source, targets in TRANSITIONS.items() if target in targets]


class DecisionKind(StrEnum):
    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"

    @property
    def status(self) -> Status:
        return {
            DecisionKind.APPROVE: Status.APPROVED,
            DecisionKind.EDIT: Status.EDITED,
            DecisionKind.REJECT: Status.REJECTED,
        }[self]


@dataclass(frozen=True)
class ToolRef:
    """How a worker finds a tool again: its llm name, import path and JSON schema."""

    name: str
    path: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class SiblingResult:
    """A call of the paused turn that already ran; shown on the card, never run again."""

    name: str
    output: str


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    #: Slack user id (``U123``) or ``cli:<login>``.
    actor: str
    at: float
    reason: str | None = None
    #: How people and the model are told who decided (a Slack display name).
    actor_name: str | None = None
    #: The arguments approved to run; for ``edit`` they differ from the proposed ones.
    arguments: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunResult:
    """What the resumed run ended with."""

    status: Status
    text: str | None = None
    error: str | None = None
    next_approval_id: str | None = None


@dataclass
class Approval:
    id: str
    agent: str
    model_id: str
    tool_name: str
    tool_call_id: str
    #: The arguments exactly as the model proposed them.
    arguments: dict[str, Any]
    tools: list[ToolRef]
    channel: str
    system: str | None = None
    summary: str | None = None
    siblings: list[SiblingResult] = field(default_factory=list)
    requested_by: str | None = None
    chain_limit: int = 25
    parent_id: str | None = None
    #: Thread the card belongs in: set when a resumed agent pauses again.
    thread_ts: str | None = None
    created_at: float = field(default_factory=time.time)
    status: Status = Status.PENDING
    card_ts: str | None = None
    decision: Decision | None = None
    result: RunResult | None = None

    @property
    def tool(self) -> ToolRef:
        """The gated tool's reference."""
        for ref in self.tools:
            if ref.name == self.tool_name:
                return ref
        raise CorruptRecord(f"approval {self.id} does not list its own tool {self.tool_name!r}")

    def record(self) -> dict[str, Any]:
        """The immutable part, as JSON-ready data (status, card, decision, result live apart)."""
        data = asdict(self)
        for mutable in ("status", "card_ts", "decision", "result"):
            data.pop(mutable)
        return data


def decision_to_dict(decision: Decision) -> dict[str, Any]:
    data = asdict(decision)
    data["kind"] = decision.kind.value
    return data


def result_to_dict(result: RunResult) -> dict[str, Any]:
    data = asdict(result)
    data["status"] = result.status.value
    return data


# --- loading: every field checked, anything else is CorruptRecord -----------------------------


def _get(data: Any, name: str, kind: type | tuple[type, ...], optional: bool = False) -> Any:
    if not isinstance(data, dict):
        raise CorruptRecord(f"expected an object, got {type(data).__name__}")
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise CorruptRecord(f"field {name!r} is missing or has the wrong type")
    return value


def _time(data: Any, name: str) -> float:
    value = _get(data, name, (int, float))
    try:
        return float(value)
    except OverflowError:
        raise CorruptRecord(f"field {name!r} is out of range") from None


def _enum(enum: type[Status] | type[DecisionKind], raw: Any) -> Any:
    try:
        return enum(raw)
    except ValueError:
        raise CorruptRecord(f"unknown {enum.__name__} {raw!r}") from None


def approval_from_parts(
    record: Any, status: Any, card_ts: Any, decision: Any, result: Any
) -> Approval:
    """Build an ``Approval`` from its stored parts (already JSON-decoded)."""
    return Approval(
        id=_get(record, "id", str),
        agent=_get(record, "agent", str),
        model_id=_get(record, "model_id", str),
        tool_name=_get(record, "tool_name", str),
        tool_call_id=_get(record, "tool_call_id", str),
        arguments=_get(record, "arguments", dict),
        tools=[
            ToolRef(_get(t, "name", str), _get(t, "path", str), _get(t, "schema", dict))
            for t in _get(record, "tools", list)
        ],
        channel=_get(record, "channel", str),
        system=_get(record, "system", str, optional=True),
        summary=_get(record, "summary", str, optional=True),
        siblings=[
            SiblingResult(_get(s, "name", str), _get(s, "output", str))
            for s in _get(record, "siblings", list)
        ],
        requested_by=_get(record, "requested_by", str, optional=True),
        chain_limit=_get(record, "chain_limit", int),
        parent_id=_get(record, "parent_id", str, optional=True),
        thread_ts=_get(record, "thread_ts", str, optional=True),
        created_at=_time(record, "created_at"),
        status=_enum(Status, status),
        card_ts=card_ts if isinstance(card_ts, str) else None,
        decision=None if decision is None else _decision_from_dict(decision),
        result=None if result is None else _result_from_dict(result),
    )


def _decision_from_dict(data: Any) -> Decision:
    return Decision(
        kind=_enum(DecisionKind, _get(data, "kind", str)),
        actor=_get(data, "actor", str),
        at=_time(data, "at"),
        reason=_get(data, "reason", str, optional=True),
        actor_name=_get(data, "actor_name", str, optional=True),
        arguments=_get(data, "arguments", dict, optional=True),
    )


def _result_from_dict(data: Any) -> RunResult:
    return RunResult(
        status=_enum(Status, _get(data, "status", str)),
        text=_get(data, "text", str, optional=True),
        error=_get(data, "error", str, optional=True),
        next_approval_id=_get(data, "next_approval_id", str, optional=True),
    )
