"""What a run ended with, as its approval records tell it: ``Outcome``, one ``GatedCall`` per
gated call, and ``compose``, which reads them off the records (pure: no Redis)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from approvals.errors import CorruptRecord
from approvals.models.approval import (
    DECIDED,
    Approval,
    Decision,
    DecisionKind,
    Status,
    decision_from_dict,
    decision_to_dict,
)
from approvals.secrets import mask

#: Statuses of an ended run.
ENDED = ("completed", "failed", "stopped")


@dataclass(frozen=True)
class GatedCall:
    """One gated call of a run: what the model proposed, what ran, and who decided."""

    pause_id: str
    tool: str
    #: As the model proposed them (secret arguments masked).
    arguments: dict[str, Any]
    #: What the tool actually ran with (an edit changes it); None when it did not run.
    ran_with: dict[str, Any] | None = None
    #: What the tool returned (or the reviewer's response); None when it did not run.
    output: str | None = None
    decision: Decision | None = None


@dataclass(frozen=True)
class Outcome:
    """What happened to a run.

    ``status`` is ``completed`` (``text`` is the final answer), ``failed`` (``reason``),
    ``stopped`` by a rejection or an expiry (``stopped_by``, ``reason``), or, for a run not
    ended yet, ``paused`` (``pause_id`` waits for a decision), ``running`` or ``interrupted``.
    ``calls`` lists every gated call of the run with its decision, oldest first.
    """

    status: str
    text: str | None = None
    #: The latest pause of the run (the one waiting for a decision when ``paused``).
    pause_id: str | None = None
    run_id: str | None = None
    reason: str | None = None
    stopped_by: str | None = None
    calls: tuple[GatedCall, ...] = field(default_factory=tuple)

    @property
    def decisions(self) -> list[Decision]:
        """Every decision of the run (who, what, when), oldest first."""
        return [call.decision for call in self.calls if call.decision is not None]

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (``approvals result --json`` prints it)."""
        data = asdict(self)
        data["calls"] = [
            {**asdict(c), "decision": decision_to_dict(c.decision) if c.decision else None}
            for c in self.calls
        ]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Outcome:
        """The inverse of ``to_dict``; ``CorruptRecord`` when it does not fit (Redis is a
        trust boundary)."""
        try:
            calls = tuple(
                GatedCall(
                    pause_id=str(c["pause_id"]),
                    tool=str(c["tool"]),
                    arguments=dict(c["arguments"]),
                    ran_with=None if c.get("ran_with") is None else dict(c["ran_with"]),
                    output=_optional_text(c.get("output")),
                    decision=_decision(c.get("decision")),
                )
                for c in data["calls"]
            )
            return cls(
                status=str(data["status"]),
                text=_optional_text(data.get("text")),
                pause_id=_optional_text(data.get("pause_id")),
                run_id=_optional_text(data.get("run_id")),
                reason=_optional_text(data.get("reason")),
                stopped_by=_optional_text(data.get("stopped_by")),
                calls=calls,
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CorruptRecord("a stored outcome is malformed") from None


def _decision(value: Any) -> Decision | None:
    return None if value is None else decision_from_dict(value)


def _optional_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _call_of(approval: Approval) -> GatedCall:
    result, decision = approval.result, approval.decision
    ran_with = output = None
    if decision is not None and decision.kind.runs_tool and result is not None:
        ran_with = result.executed_arguments
        output = result.tool_output
    elif decision is not None and decision.kind is DecisionKind.RESPOND:
        output = decision.response
    return GatedCall(
        pause_id=approval.id,
        tool=approval.tool_name,
        arguments=approval.shown_arguments,
        ran_with=None if ran_with is None else mask(ran_with, approval.secret_arguments),
        output=output,
        decision=decision,
    )


def compose(run_id: str, approvals: list[Approval]) -> Outcome:
    """The run's state as its approval records tell it (the latest one decides the status)."""
    # A turn's calls share one card and one resume: each is a call of the run, in order.
    calls = tuple(_call_of(c) for a in approvals for c in (a.turn_calls or (a,)))
    last = approvals[-1]
    common: dict[str, Any] = {"run_id": run_id, "pause_id": last.id, "calls": calls}
    turn = last.turn_calls
    if last.status is Status.PENDING or any(c.status is Status.PENDING for c in turn):
        return Outcome("paused", **common)
    if last.status in DECIDED:  # a turn stopped by one of its calls (none of it ran)
        last = next((c for c in turn if c.stops_run), last)
    decision, result = last.decision, last.result
    if last.status is Status.COMPLETED and result is not None:
        return Outcome("completed", text=result.text, **common)
    if last.status is Status.FAILED and result is not None:
        return Outcome("failed", reason=result.error, **common)
    if last.status is Status.PAUSED and result is not None and result.next_approval_id:
        return Outcome("paused", **{**common, "pause_id": result.next_approval_id})
    if last.stops_run and decision is not None:
        if decision.kind is DecisionKind.EXPIRE:
            why = "the approval expired without a decision"
        else:
            why = decision.reason or "rejected"
        by = decision.actor_name or decision.actor
        return Outcome("stopped", reason=why, stopped_by=by, **common)
    if last.status is Status.INTERRUPTED:
        return Outcome("interrupted", **common)
    assert last.status in DECIDED or last.status in (Status.RUNNING, Status.PAUSED)
    return Outcome("running", **common)
