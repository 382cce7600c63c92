"""The approval record and its state machine.

An approval is one paused tool call waiting for people. Its life::

                 ┌──► approved ──┐
                 ├──► edited ────┤
    pending ─────┼──► responded ─┼──► running ──┬──► completed
                 ├──► rejected ──┤              ├──► paused     (the resumed agent paused
                 └──► expired ───┘              │                again: a new approval)
                        ▲                       ├──► failed
                        └── retry ── interrupted ◄┘  (the worker died while the gated tool
                                                     may have been running)
    running ──► pending   (stale: the state the gate's ``fingerprint`` names changed between
                           the decision and the run; the tool did not run, people decide again)

A rejected or expired approval whose gate says ``on_reject="stop"`` is never resumed: its run
ends there. An *external* approval (asked through the HTTP API, ``approvals.calls.external``) has no
chain to resume: its decision is handed to the caller waiting for it, and the caller's report
of what it then did moves it through ``running`` to ``completed`` or ``failed`` at once.
``TRANSITIONS`` is the only statement of which moves are legal; ``store`` applies them
atomically (a compare-and-set in Redis), so two clicks can never both leave ``pending``.
Records are JSON; loading checks every field because Redis is a trust boundary.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from approvals.errors import CorruptRecord
from approvals.models.options import (
    CARRIED,
    GateOptions,
    OnReject,
    options_from_dict,
    options_to_dict,
)
from approvals.models.preview import Preview, PreviewKind
from approvals.secrets import mask, mask_text


class Status(StrEnum):
    """Where an approval is in its life (the diagram in this module's docstring)."""

    PENDING = "pending"
    APPROVED = "approved"
    EDITED = "edited"
    REJECTED = "rejected"
    RESPONDED = "responded"
    EXPIRED = "expired"
    RUNNING = "running"
    #: The worker died while the gated tool may have been running: a person decides on Retry.
    INTERRUPTED = "interrupted"
    COMPLETED = "completed"
    PAUSED = "paused"
    FAILED = "failed"


DECIDED = frozenset(
    {Status.APPROVED, Status.EDITED, Status.REJECTED, Status.RESPONDED, Status.EXPIRED}
)
FINISHED = frozenset({Status.COMPLETED, Status.PAUSED, Status.FAILED})

TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PENDING: DECIDED,
    **{decided: frozenset({Status.RUNNING}) for decided in DECIDED},
    # Back to the decision when the worker died before the gated tool started (safe to rerun).
    # Back to waiting when the state changed since the decision (``fingerprint``), before
    # the tool started: someone must decide again.
    Status.RUNNING: FINISHED | {Status.INTERRUPTED, Status.PENDING} | DECIDED,
    # Retry restores the original decision, so the resume runs exactly as decided.
    Status.INTERRUPTED: DECIDED,
    Status.COMPLETED: frozenset(),
    Status.PAUSED: frozenset(),
    Status.FAILED: frozenset(),
}


def sources_of(target: Status) -> list[Status]:
    """The statuses from which ``target`` may be entered."""
    return [source for source, targets in TRANSITIONS.items() if target in targets]


class DecisionKind(StrEnum):
    """What a reviewer decided about a paused call."""

    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"
    #: The reviewer wrote the tool's result; the tool does not run.
    RESPOND = "respond"
    #: Nobody decided in time (the actor is ``system``).
    EXPIRE = "expire"

    @property
    def status(self) -> Status:
        return {
            DecisionKind.APPROVE: Status.APPROVED,
            DecisionKind.EDIT: Status.EDITED,
            DecisionKind.REJECT: Status.REJECTED,
            DecisionKind.RESPOND: Status.RESPONDED,
            DecisionKind.EXPIRE: Status.EXPIRED,
        }[self]

    @property
    def runs_tool(self) -> bool:
        """Whether the gated tool runs after this decision."""
        return self in (DecisionKind.APPROVE, DecisionKind.EDIT)


class DecidedBy(StrEnum):
    """What made a decision: the ``decided_by`` a signed receipt of the release can carry."""

    PERSON = "person"
    #: A grant someone made from an earlier card (``Decision.grant_id``).
    GRANT = "grant"
    #: A rule of ``APPROVALS_POLICY`` (``Decision.rule_id``).
    RULE = "rule"


#: Who may decide and how: the gate's options an approval carries to its decision
#: (``GateOptions.policy``). ``None`` means "the deployment's default" (``APPROVERS``,
#: ``APPROVER_GROUPS``), read when someone decides, so changing the defaults applies to
#: approvals already waiting.
Policy = GateOptions


@dataclass(frozen=True)
class ToolRef:
    """How a worker finds a tool again: its llm name, import path and JSON schema.

    A toolbox method's ``path`` names its ``llm.Toolbox`` class, ``method`` the method, and
    ``config`` the constructor arguments llm recorded, from which the worker builds the
    toolbox again. ``gate`` is a gate put on from outside the tool's code
    (``approvals.calls.gate``), which the worker applies again.
    """

    name: str
    path: str
    schema: dict[str, Any]
    method: str | None = None
    config: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None


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
    #: For ``respond``: the text the model receives instead of the tool's result.
    response: str | None = None
    #: A person, a grant or a rule. An automatic decision (grant, rule) is carried out in the
    #: agent's process, at the moment the call would have paused: no worker resumes it.
    decided_by: DecidedBy = DecidedBy.PERSON
    rule_id: str | None = None
    grant_id: str | None = None
    #: Who made the grant that decided (a Slack user id).
    grant_creator: str | None = None

    @property
    def automatic(self) -> bool:
        return self.decided_by is not DecidedBy.PERSON


@dataclass(frozen=True)
class RunResult:
    """What the resumed run ended with."""

    status: Status
    text: str | None = None
    error: str | None = None
    next_approval_id: str | None = None
    #: What actually ran for the gated call, and what it returned (None: it did not run).
    executed_arguments: dict[str, Any] | None = None
    tool_output: str | None = None
    #: The head of the gate's preview for the edited arguments, computed just before the tool
    #: ran (None: not edited, or no preview).
    preview: Preview | None = None


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
    #: When nobody deciding makes it ``expired`` (epoch seconds).
    expires_at: float = 0.0
    #: The gate's options read when someone decides (those spent at the pause are the
    #: channel, summary, expiry, reminder and escalation fields of the approval itself).
    policy: GateOptions = field(default_factory=GateOptions)
    #: Arguments whose values are masked wherever people see them (and cannot be edited).
    secret_arguments: tuple[str, ...] = ()
    #: The llm version that paused the chain (a resume on another version is noted).
    llm_version: str = ""
    #: The same for every pause of one run (``approvals.wait`` follows it); None: older records.
    run_id: str | None = None
    #: ``"module:function"`` the worker calls with the final ``Outcome`` when the run ends.
    on_finish: str | None = None
    #: Paused by ``run_agent_async``: the worker resumes it with llm's async API.
    asynchronous: bool = False
    #: Write the run's turns to llm's log database as they happen (``APPROVALS_LLM_LOG``).
    llm_log: bool = False
    #: Asked through the HTTP API: the decision goes to the waiting caller, nothing resumes.
    external: bool = False
    #: What the call would do, as its tool's ``preview=`` (or an API caller) says: the head
    #: of it (``approvals.models.preview``; the whole is kept apart when longer).
    preview: str | None = None
    #: How ``preview`` is shown (None: a caller's markdown, as older records hold it).
    preview_kind: PreviewKind | None = None
    #: The SHA-256 of the whole preview, and its length in characters.
    preview_sha256: str | None = None
    preview_length: int = 0
    #: The policy rule that required this review, or decided it automatically.
    rule_id: str | None = None
    #: The state the decision depends on, as the gate's ``fingerprint`` named it at the
    #: pause (or an API caller sent it): the worker computes it again before the tool runs.
    fingerprint: str | None = None
    #: Seconds between reminders to the approvers (0: none); at most ``MAX_REMINDERS``.
    remind_after: float = 0.0
    #: Seconds after which the card is escalated to ``escalate_to`` (0: never).
    escalate_after: float = 0.0
    #: Channel ids (``C...``) and user group ids (``S...``) an escalation goes to.
    escalate_to: tuple[str, ...] = ()
    #: The gated calls of one model turn that share one card, in call order: the ids of their
    #: approvals, the paused call's (the turn's lead) first. Empty for a call alone in its turn.
    turn: tuple[str, ...] = ()
    status: Status = Status.PENDING
    card_ts: str | None = None
    decision: Decision | None = None
    result: RunResult | None = None
    #: Everyone who approved, in order (several when the gate requires a quorum).
    votes: tuple[str, ...] = ()
    #: When the gated tool started and finished in the worker (None: not yet, or never).
    tool_started_at: float | None = None
    tool_finished_at: float | None = None
    #: The signed receipt of the decision that released the call (``approvals.proof.receipts``).
    receipt: str | None = None
    #: When the card was escalated (None: not, or not yet).
    escalated_at: float | None = None
    #: How many times the state changed between a decision and its run (each time the
    #: approval went back to waiting).
    stale: int = 0
    #: The turn's approvals as read with this one (``store.records.load``), lead first; never
    #: stored.
    turn_calls: tuple[Approval, ...] = field(default=(), repr=False, compare=False)

    @property
    def turn_lead(self) -> str:
        """The approval whose resume runs the turn: the paused call's (itself when alone)."""
        return self.turn[0] if self.turn else self.id

    @property
    def stops_run(self) -> bool:
        """Rejected or expired, and its gate ends the run there (``on_reject="stop"``)."""
        return (
            self.status in (Status.REJECTED, Status.EXPIRED)
            and self.policy.on_reject is OnReject.STOP
        )

    @property
    def in_turn(self) -> bool:
        """Whether this call shares its card and its resume with other calls of its turn."""
        return len(self.turn) > 1

    @property
    def escalated_groups(self) -> tuple[str, ...]:
        """User groups whose members may decide too, once the card was escalated."""
        if self.escalated_at is None:
            return ()
        return tuple(target for target in self.escalate_to if target.startswith("S"))

    @property
    def escalated_channels(self) -> tuple[str, ...]:
        """Channels whose members may decide too, once the card was posted there."""
        if self.escalated_at is None:
            return ()
        return tuple(target for target in self.escalate_to if not target.startswith("S"))

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
        mutable_fields = (
            "status",
            "card_ts",
            "decision",
            "result",
            "votes",
            "tool_started_at",
            "tool_finished_at",
            "receipt",
            "escalated_at",
            "stale",
            "turn_calls",
        )
        for mutable in mutable_fields:
            data.pop(mutable)
        if not self.turn:  # most calls are alone in their turn: nothing stored for them
            del data["turn"]
        data["policy"] = options_to_dict(self.policy, CARRIED)
        for rare in ("webhook", "fingerprint"):  # most gates have none: not stored for each
            if getattr(self.policy, rare) is None:
                del data["policy"][rare]
        return data

    def stored_record(self) -> str:
        """The record as Redis keeps it: compact JSON without the fields that hold nothing.

        Redis keeps a record for every waiting approval, so its size is Redis's memory. A
        field left out is one ``approval_from_parts`` reads back as it was: None, or the empty
        or false value in ``_LEFT_OUT_WHEN``.
        """
        data = _without_nothing(self.record())
        data["policy"] = options_to_dict(self.policy, CARRIED, sparse=True)
        data["tools"] = [_without_nothing(tool) for tool in data["tools"]]
        return json.dumps(data, separators=(",", ":"))

    @property
    def editable(self) -> list[str]:
        """The argument names a reviewer may change."""
        names = list(self.tool.schema.get("properties", {}))
        names += [name for name in self.arguments if name not in names]
        # A secret (by name, or a masked value) cannot be edited: the modal would show it.
        shown = self.shown_arguments
        names = [
            n
            for n in names
            if n not in self.secret_arguments and shown.get(n) == self.arguments.get(n)
        ]
        allowed = self.policy.editable
        return names if allowed is None else [n for n in names if n in allowed]

    @property
    def shown_arguments(self) -> dict[str, Any]:
        """The proposed arguments as people may see them: secrets masked."""
        return mask(self.arguments, self.secret_arguments)

    @property
    def shown_preview(self) -> Preview | None:
        """The preview's head as people may see it: what is masked in the arguments is masked
        in it."""
        if self.preview is None:
            return None
        text = mask_text(self.preview, self.arguments, self.shown_arguments)
        return Preview(text, self.preview_kind or PreviewKind.MARKDOWN)

    @property
    def preview_cut(self) -> bool:
        """Whether the record holds only the head of a longer preview."""
        return self.preview is not None and self.preview_length > len(self.preview)

    def set_preview(self, preview: Preview | None) -> None:
        """Record ``preview`` (its head, kind, digest and length); None clears it."""
        self.preview = None if preview is None else preview.head
        self.preview_kind = None if preview is None else preview.kind
        self.preview_sha256 = None if preview is None else preview.sha256
        self.preview_length = 0 if preview is None else len(preview.text)

    @property
    def shown_summary(self) -> str | None:
        """The summary as people may see it: the gate filled it in with the arguments, so
        what is masked in them is masked in it."""
        if self.summary is None:
            return None
        return mask_text(self.summary, self.arguments, self.shown_arguments)


def decision_to_dict(decision: Decision) -> dict[str, Any]:
    data = asdict(decision)
    data["kind"] = decision.kind.value
    data["decided_by"] = decision.decided_by.value
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


def _optional_time(data: Any, name: str) -> float:
    """A number of seconds that older records do not have (0.0 then)."""
    return 0.0 if data.get(name) is None else _time(data, name)


def _optional_enum(enum: type[StrEnum], raw: Any) -> Any:
    return None if raw is None else _enum(enum, raw)


def _enum(enum: type[StrEnum], raw: Any) -> Any:
    try:
        return enum(raw)
    except ValueError:
        raise CorruptRecord(f"unknown {enum.__name__} {raw!r}") from None


#: Fields a stored record leaves out when they hold these values (their readers default to them;
#: the policy leaves out every option that holds its default).
_LEFT_OUT_WHEN: dict[str, Any] = {
    "secret_arguments": [],
    "escalate_to": [],
    "asynchronous": False,
    "llm_log": False,
    "external": False,
    "llm_version": "",
    "remind_after": 0.0,
    "escalate_after": 0.0,
    "preview_length": 0,
}


def _without_nothing(data: dict[str, Any]) -> dict[str, Any]:
    def nothing(name: str, value: Any) -> bool:
        plain = list(value) if isinstance(value, tuple) else value  # JSON makes lists of them
        return value is None or (name in _LEFT_OUT_WHEN and plain == _LEFT_OUT_WHEN[name])

    return {name: value for name, value in data.items() if not nothing(name, value)}


def approval_from_parts(
    record: Any,
    status: Any,
    card_ts: Any,
    decision: Any,
    result: Any,
    votes: Any = None,
    marks: dict[str, str] | None = None,
) -> Approval:
    """Build an ``Approval`` from its stored parts (already JSON-decoded)."""
    return Approval(
        id=_get(record, "id", str),
        agent=_get(record, "agent", str),
        model_id=_get(record, "model_id", str),
        tool_name=_get(record, "tool_name", str),
        tool_call_id=_get(record, "tool_call_id", str),
        arguments=_get(record, "arguments", dict),
        tools=[_tool_ref(t) for t in _get(record, "tools", list)],
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
        expires_at=_time(record, "expires_at"),
        policy=options_from_dict(_get(record, "policy", dict), CARRIED),
        secret_arguments=_strings(record.get("secret_arguments", []), "secret_arguments"),
        llm_version=_get(record, "llm_version", str, optional=True) or "",
        run_id=_get(record, "run_id", str, optional=True),
        on_finish=_get(record, "on_finish", str, optional=True),
        asynchronous=_get(record, "asynchronous", bool, optional=True) or False,
        llm_log=_get(record, "llm_log", bool, optional=True) or False,
        external=_get(record, "external", bool, optional=True) or False,
        preview=_get(record, "preview", str, optional=True),
        preview_kind=_optional_enum(PreviewKind, record.get("preview_kind")),
        preview_sha256=_get(record, "preview_sha256", str, optional=True),
        preview_length=_get(record, "preview_length", int, optional=True) or 0,
        rule_id=_get(record, "rule_id", str, optional=True),
        fingerprint=_get(record, "fingerprint", str, optional=True),
        remind_after=_optional_time(record, "remind_after"),
        escalate_after=_optional_time(record, "escalate_after"),
        escalate_to=_strings(record.get("escalate_to", []), "escalate_to"),
        turn=_strings(record.get("turn", []), "turn"),
        status=_enum(Status, status),
        card_ts=card_ts if isinstance(card_ts, str) else None,
        decision=None if decision is None else _decision_from_dict(decision),
        result=None if result is None else _result_from_dict(result),
        votes=_strings(votes, "votes") if votes is not None else (),
        tool_started_at=_mark(marks, "tool_started"),
        tool_finished_at=_mark(marks, "tool_finished"),
        escalated_at=_mark(marks, "escalated"),
    )


def _tool_ref(data: Any) -> ToolRef:
    return ToolRef(
        _get(data, "name", str),
        _get(data, "path", str),
        _get(data, "schema", dict),
        method=_get(data, "method", str, optional=True),
        config=_get(data, "config", dict, optional=True),
        gate=_get(data, "gate", dict, optional=True),
    )


def _mark(marks: dict[str, str] | None, name: str) -> float | None:
    raw = (marks or {}).get(name)
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise CorruptRecord(f"mark {name!r} is not a time") from None


def _strings(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CorruptRecord(f"field {name!r} must be a list of strings")
    return tuple(value)


def decision_from_dict(data: Any) -> Decision:
    """A ``Decision`` from its JSON form, every field checked (``CorruptRecord`` if not)."""
    return _decision_from_dict(data)


def _decision_from_dict(data: Any) -> Decision:
    return Decision(
        kind=_enum(DecisionKind, _get(data, "kind", str)),
        actor=_get(data, "actor", str),
        at=_time(data, "at"),
        reason=_get(data, "reason", str, optional=True),
        actor_name=_get(data, "actor_name", str, optional=True),
        arguments=_get(data, "arguments", dict, optional=True),
        response=_get(data, "response", str, optional=True),
        # Older records carry no origin: only people decided then.
        decided_by=_enum(DecidedBy, _get(data, "decided_by", str, optional=True) or "person"),
        rule_id=_get(data, "rule_id", str, optional=True),
        grant_id=_get(data, "grant_id", str, optional=True),
        grant_creator=_get(data, "grant_creator", str, optional=True),
    )


def _result_from_dict(data: Any) -> RunResult:
    return RunResult(
        status=_enum(Status, _get(data, "status", str)),
        text=_get(data, "text", str, optional=True),
        error=_get(data, "error", str, optional=True),
        next_approval_id=_get(data, "next_approval_id", str, optional=True),
        executed_arguments=_get(data, "executed_arguments", dict, optional=True),
        tool_output=_get(data, "tool_output", str, optional=True),
        preview=_preview_from_dict(data.get("preview")),
    )


def _preview_from_dict(data: Any) -> Preview | None:
    if data is None:
        return None
    return Preview(_get(data, "text", str), _enum(PreviewKind, _get(data, "kind", str)))
