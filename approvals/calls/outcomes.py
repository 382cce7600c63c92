"""What a run ended with, and waiting for it: ``Outcome``, ``wait`` and ``on_finish``.

A run is everything one ``run_agent`` call sets off: the first chain, and every resume after
each pause, in whichever worker. It gets a ``run_id`` at the start; every pause of it carries
that id and is added to the run's list of pauses in Redis; a pause after a resume wakes the
run's stream (``store.run_key``), which its waiters block on. The run ends when a
resume completes or fails, or when a rejection or an expiry stops it (``on_reject="stop"``);
then ``finish_run`` stores the final ``Outcome`` for ``APPROVALS_RESULT_TTL`` seconds, adds
an "ended" event to the stream and queues the ``on_finish`` job. ``wait`` blocks on that
stream (``XREAD BLOCK``), so any process, even one started after the agent's exited, can wait.

Not an end: a pause (the run goes on after the next decision), an interrupted run (a person
decides on Retry), and a rejection or expiry with the default ``on_reject="resume"`` (the
model is told and goes on).
"""

from __future__ import annotations

import importlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from approvals import queue, store
from approvals.calls.tools import module_allowed
from approvals.config import Settings
from approvals.errors import CorruptRecord, GateError, ResumeError, UnknownApproval
from approvals.models import (
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

#: The longest single blocking read: the state is read again after it, so a run whose end
#: was recorded without its event (its recorder died in between) is still seen to end.
_BLOCK_SECONDS = 10.0


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


def new_run_id() -> str:
    return "run-" + secrets.token_hex(8)


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


def _load_run(conn: redis.Redis, run_id: str) -> list[Approval]:
    found = []
    for pause_id in store.run_pauses(conn, run_id):
        try:
            found.append(store.load(conn, pause_id))
        except UnknownApproval:
            continue
    return found


def run_outcome(conn: redis.Redis, run_id: str) -> Outcome:
    """The stored final outcome of the run, else its state now; ``UnknownApproval`` when
    neither is in Redis (never existed, or older than ``APPROVALS_RESULT_TTL``)."""
    stored, _ = store.load_outcome(conn, run_id)
    if stored is not None:
        return Outcome.from_dict(stored)
    approvals = _load_run(conn, run_id)
    if not approvals:
        raise UnknownApproval(run_id)
    return compose(run_id, approvals)


def run_id_of(conn: redis.Redis, some_id: str) -> str:
    """The run of a pause id; a run id is returned as it is."""
    try:
        approval = store.load(conn, some_id)
    except UnknownApproval:
        return some_id
    return approval.run_id or approval.id


def _card_of(conn: redis.Redis, pause_id: str) -> str:
    """The pause a call waits under: itself, or, for a call sharing its turn's card, the
    turn's lead (the run's ``pause_id`` while any call of the turn waits)."""
    try:
        return store.load(conn, pause_id).turn_lead
    except UnknownApproval:
        return pause_id


def finish_run(conn: redis.Redis, settings: Settings, approval: Approval) -> Outcome | None:
    """Record the end of the run ``approval`` (its last pause) belongs to, and queue its
    ``on_finish``; once per run (a second call changes nothing and returns None). A record
    without a run id (paused before runs had one), or a run its records do not show ended,
    has no outcome to record."""
    if approval.run_id is None:
        return None
    outcome = compose(approval.run_id, _load_run(conn, approval.run_id) or [approval])
    if not outcome.ended:  # a call of its turn still waits, say: not an end to record
        return None
    encoded = json.dumps(outcome.to_dict(), ensure_ascii=False)
    ttl = settings.result_ttl
    if not store.save_outcome(conn, approval.run_id, encoded, approval.on_finish, ttl):
        return None
    if approval.on_finish:
        queue.enqueue_finish(conn, settings, approval.run_id)
    return outcome


def record_unpaused(
    conn: redis.Redis, settings: Settings, outcome: Outcome, on_finish: str
) -> None:
    """A run with an ``on_finish`` that ended without ever pausing: store it and queue the call."""
    assert outcome.run_id is not None
    encoded = json.dumps(outcome.to_dict(), ensure_ascii=False)
    if store.save_outcome(conn, outcome.run_id, encoded, on_finish, settings.result_ttl):
        queue.enqueue_finish(conn, settings, outcome.run_id)


def wait(
    pause_id: str,
    timeout: float | None = None,
    follow: bool = True,
    settings: Settings | None = None,
) -> Outcome:
    """Block until the run that paused at ``pause_id`` has ended, and return its outcome.

    Args:
        pause_id: the id ``run_agent`` returned (a run id works too).
        timeout: seconds to wait at most; None waits for as long as it takes. When it runs
            out, the run's state at that moment is returned (``paused`` with the pause now
            waiting, ``running``...), never an exception.
        follow: wait through every later pause of the run (each decided in Slack as usual);
            with False, return as soon as this pause's resume has ended, or paused again.

    It blocks on a read of the run's stream in Redis, so the calling process need not be the
    one that started the run. A run that had already ended returns at once.

    Raises:
        UnknownApproval: no such pause or run in Redis (or its outcome expired).
    """
    settings = settings or Settings.from_env()
    conn = store.shared_connection(settings)
    run_id = run_id_of(conn, pause_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    after = "0-0"
    first = run_outcome(conn, run_id)
    watched = _card_of(conn, pause_id) if pause_id != run_id else first.pause_id
    while True:
        outcome = run_outcome(conn, run_id)
        if outcome.ended or (not follow and outcome.pause_id != watched):
            return outcome
        left = _BLOCK_SECONDS if deadline is None else deadline - time.monotonic()
        if left <= 0:
            return outcome
        after = store.wait_run_event(conn, run_id, after, min(left, _BLOCK_SECONDS))


def check_on_finish(path: str, allowed: tuple[str, ...]) -> Callable[..., Any]:
    """Import ``"module:function"`` if ``module`` is allowed; ``ResumeError`` if not."""
    module_name, _, name = path.partition(":")
    if not module_name or not name or "." in name:
        raise ResumeError(f"on_finish must be 'module:function', got {path!r}")
    if not module_allowed(module_name, allowed):
        raise ResumeError(
            f"on_finish {path}: {module_name} is not in APPROVALS_TOOL_MODULES; refusing it"
        )
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ResumeError(f"cannot import on_finish {path}: {exc}") from None
    if not callable(function) or not module_allowed(getattr(function, "__module__", ""), allowed):
        raise ResumeError(f"on_finish {path} is not a function of an allowed module")
    return function  # type: ignore[no-any-return]


def check_on_finish_early(path: str, settings: Settings) -> None:
    """``run_agent``'s check, so a bad ``on_finish`` fails before the run, not at its end."""
    settings.require("APPROVALS_TOOL_MODULES")
    try:
        check_on_finish(path, settings.tool_modules)
    except ResumeError as exc:
        raise GateError(str(exc)) from None


def call_on_finish(conn: redis.Redis, settings: Settings, run_id: str) -> str:
    """Call the run's ``on_finish(outcome, idempotency_key=run_id)`` (the worker's job).

    Skipped once a call returned; a call that raises leaves it to RQ's retry. A worker that
    dies after the call returned but before that is noted calls it again: hence the key.
    """
    stored, path = store.load_outcome(conn, run_id)
    if stored is None or path is None:
        return "nothing to call"
    if store.outcome_flag_set(conn, run_id):
        return "already called"
    function = check_on_finish(path, settings.tool_modules)
    function(Outcome.from_dict(stored), idempotency_key=run_id)
    store.set_outcome_flag(conn, run_id)
    return "called"
