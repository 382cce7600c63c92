"""What a run ended with, and waiting for it: ``Outcome``, ``wait`` and ``on_finish``.

A run is everything one ``run_agent`` call sets off: the first chain, and every resume after
each pause, in whichever worker. It gets a ``run_id`` at the start; every pause of it carries
that id and is added to the run's list of pauses in Redis; a pause after a resume wakes the
run's stream (``store.keys.run_key``), which its waiters block on. The run ends when a
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
from typing import Any

import redis

from approvals import store
from approvals.calls.tools import module_allowed
from approvals.config import Settings
from approvals.errors import GateError, ResumeError, UnknownApproval
from approvals.models.outcome import Outcome, compose
from approvals.store import queue

#: The longest single blocking read: the state is read again after it, so a run whose end
#: was recorded without its event (its recorder died in between) is still seen to end.
_BLOCK_SECONDS = 10.0


def new_run_id() -> str:
    return "run-" + secrets.token_hex(8)


def run_outcome(conn: redis.Redis, run_id: str) -> Outcome:
    """The stored final outcome of the run, else its state now; ``UnknownApproval`` when
    neither is in Redis (never existed, or older than ``APPROVALS_RESULT_TTL``)."""
    stored, _ = store.runs.load_outcome(conn, run_id)
    if stored is not None:
        return Outcome.from_dict(stored)
    approvals = store.runs.load_run(conn, run_id)
    if not approvals:
        raise UnknownApproval(run_id)
    return compose(run_id, approvals)


def run_id_of(conn: redis.Redis, some_id: str) -> str:
    """The run of a pause id; a run id is returned as it is."""
    try:
        approval = store.records.load(conn, some_id)
    except UnknownApproval:
        return some_id
    return approval.run_id or approval.id


def _card_of(conn: redis.Redis, pause_id: str) -> str:
    """The pause a call waits under: itself, or, for a call sharing its turn's card, the
    turn's lead (the run's ``pause_id`` while any call of the turn waits)."""
    try:
        return store.records.load(conn, pause_id).turn_lead
    except UnknownApproval:
        return pause_id


def record_unpaused(
    conn: redis.Redis, settings: Settings, outcome: Outcome, on_finish: str
) -> None:
    """A run with an ``on_finish`` that ended without ever pausing: store it and queue the call."""
    assert outcome.run_id is not None
    encoded = json.dumps(outcome.to_dict(), ensure_ascii=False)
    if store.runs.save_outcome(conn, outcome.run_id, encoded, on_finish, settings.result_ttl):
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
    conn = store.connection.shared_connection(settings)
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
        after = store.runs.wait_run_event(conn, run_id, after, min(left, _BLOCK_SECONDS))


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
    stored, path = store.runs.load_outcome(conn, run_id)
    if stored is None or path is None:
        return "nothing to call"
    if store.runs.outcome_flag_set(conn, run_id):
        return "already called"
    function = check_on_finish(path, settings.tool_modules)
    function(Outcome.from_dict(stored), idempotency_key=run_id)
    store.runs.set_outcome_flag(conn, run_id)
    return "called"
