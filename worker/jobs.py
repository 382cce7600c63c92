"""RQ jobs. Each takes only an approval id and reads everything else from Redis.

RQ runs a job at least once, so each job is safe to run again: the card is posted only if
none was recorded, a resume runs only if it wins the move to ``running``, a result is
published once.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

import redis
from slack_sdk import WebClient

from approvals import agent, queue, review, slack, store
from approvals.config import Settings
from approvals.errors import ResumeError, ToolAlreadyStarted
from approvals.logs import bind_approval
from approvals.models import DECIDED, Approval, RunResult, Status, result_to_dict
from approvals.plugins import loaded_models, resolve_model
from approvals.recovery import LEASE_SECONDS
from approvals.tools import describe_tool, import_tools
from worker.later import Call, Later

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def _about_approval(job: F) -> F:
    """Every log line a job writes carries its approval id (jobs take it first)."""

    @functools.wraps(job)
    def bound(approval_id: str, *args: Any, **kwargs: Any) -> Any:
        with bind_approval(approval_id):
            return job(approval_id, *args, **kwargs)

    return bound  # type: ignore[return-value]


#: A run shorter than this goes straight to its result, without a "running" redraw between.
RUNNING_AFTER = 1.0

#: One thread renews the leases of every resume running in this process, another draws the
#: "running" cards: a thread of their own per resume cost more than the rest of a quick one.
_LEASES = Later("lease-renewal")
_NOTICES = Later("running-notice")

#: The flag (``store.claim``) that lets one attempt publish a run's result.
PUBLISHED = "result_published"

#: Shows a finished run in Slack: (the approval, whether its "result_published" flag is set).
Publish = Callable[[Approval, bool], None]

#: Threads that show a batch's results in Slack while its next approvals run.
PUBLISHERS = 4

#: Longer than a card post can take with slack_sdk's own retries (Retry-After included).
CARD_LOCK_SECONDS = 90


@functools.cache
def _settings() -> Settings:
    return Settings.from_env()


@functools.cache
def _conn() -> redis.Redis:
    return store.connect(_settings())


@functools.cache
def _client() -> WebClient:
    return slack.web_client(_settings())


def warm() -> None:
    """Build the settings, Redis client and Slack client now (the worker calls this once)."""
    _settings()
    _conn()
    _client()


def prepare_horse() -> None:
    """What a spare work-horse does while it waits, so that its resume does not: open this
    process's Redis connection, start the lease and "running" threads."""
    _conn().ping()
    _LEASES.start()
    _NOTICES.start()


def inherited() -> tuple[int, int, int]:
    """What a work-horse inherits from its worker that a resume needs: modules, described
    tools, resolved models. A spare horse forked when this differed lacks what was loaded since."""
    return len(sys.modules), describe_tool.cache_info().currsize, loaded_models()


def ready(func_name: str, args: Sequence[Any]) -> None:
    """Before a work-horse is forked for a resume: import its tools, build their schemas and
    resolve its model here, in the worker, so this horse and every later one inherit them
    (a horse that built them itself spent 10 ms of each resume on it). Failures are left
    for the job, which reports them on its approval."""
    if func_name != queue.RESUME or not args or not isinstance(args[0], str):
        return
    try:
        approval = store.load(_conn(), args[0])
        import_tools(approval.tools, _settings().tool_modules)
        resolve_model(approval.model_id)
    except Exception:
        log.debug("could not ready approval %s before its job", args[0], exc_info=True)


class CardBeingPosted(Exception):
    """Another attempt is posting this card right now; RQ retries this job later."""


@_about_approval
def post_card(approval_id: str) -> str | None:
    """Post the approval's card once; returns its ts (None when it was already posted).

    A short lock keeps two attempts (RQ runs jobs at least once) from posting it twice; if
    the holder dies, the lock lapses and a retry posts the card.
    """
    approval = store.load(_conn(), approval_id)
    if approval.card_ts is not None:
        return None
    if not store.lock(_conn(), approval_id, "card", ttl=CARD_LOCK_SECONDS):
        raise CardBeingPosted(approval_id)
    try:
        if store.card_posted(_conn(), approval_id):  # by the attempt that held the lock before
            return None
        ts = slack.post_card(_client(), approval)
        recorded, now = store.record_card(_conn(), approval_id, ts)
        if recorded:
            store.audit(_conn(), approval_id, "card_posted", "bot", channel=approval.channel, ts=ts)
        log.info("card posted in %s (ts %s)", approval.channel, ts)
        # Someone may have clicked the card before its ts was recorded (see announce_decision).
        if now.status is not Status.PENDING:
            slack.announce_decision(_client(), _conn(), now)
        elif now.votes:
            slack.update_card(_client(), now)  # the count so far
        return ts
    finally:
        # Posted: the card's ts stops any later attempt. Refused: the retry may post it.
        store.unlock(_conn(), approval_id, "card")


@_about_approval
def announce_decision(approval_id: str) -> None:
    """Redraw the card and reply in its thread after a decision made outside Slack."""
    slack.announce_decision(_client(), _conn(), store.load(_conn(), approval_id))


@_about_approval
def expire_approval(approval_id: str) -> str:
    """At the deadline: expire the approval unless someone decided first."""
    expired = review.expire(_conn(), _settings(), approval_id)
    if expired is None:
        return "decided in time"
    slack.announce_decision(_client(), _conn(), expired)
    return "expired"


@_about_approval
def warn_expiry(approval_id: str) -> None:
    """Remind the thread that the approval expires soon, if it is still waiting."""
    approval = store.load(_conn(), approval_id)
    if approval.status is Status.PENDING and store.claim(_conn(), approval_id, "warned"):
        slack.warn_expiry(_client(), approval)
        store.audit(_conn(), approval_id, "expiry_warned", "system")


@_about_approval
def resume_approval(approval_id: str) -> str:
    """Resume a decided approval, at most once, and record how the run ended.

    The job then goes on with the decided approvals whose resume jobs are next in the queue,
    for up to ``RESUME_BATCH_SECONDS``: each skips RQ's own bookkeeping (about half of a
    resume's cost with ``SimpleWorker``) and, with the forking worker, a fork of its own (five
    times the throughput, bench B5). ``APPROVALS_RESUME_BATCH=1`` gives every resume its own
    job, and so its own work-horse.
    """
    conn, settings = _conn(), _settings()
    started = time.monotonic()
    if settings.worker_class != "SimpleWorker" or settings.resume_batch == 1:
        # In a work-horse each result is shown before the next resume is taken: a tool that
        # kills the horse must not take a result already stored, but not yet shown, with it.
        outcome = _resume_once(conn, settings, approval_id, _publish_now)
        _resume_next_in_queue(conn, settings, started, _publish_now)
        return outcome
    # Results are shown while the next approval runs (Slack answers in 100 ms or more);
    # the job ends once every one of them is.
    with ThreadPoolExecutor(PUBLISHERS, thread_name_prefix="publish") as publishers:

        def publish(done: Approval, claimed: bool) -> None:
            publishers.submit(_publish_now, done, claimed)

        outcome = _resume_once(conn, settings, approval_id, publish)
        _resume_next_in_queue(conn, settings, started, publish)
    return outcome


def _resume_once(
    conn: redis.Redis,
    settings: Settings,
    approval_id: str,
    publish: Publish,
    on_taken: Callable[[], object] | None = None,
) -> str:
    # The lease comes with the move: a running approval without one is taken for dead.
    taken = store.transition(
        conn,
        approval_id,
        Status.RUNNING,
        sources=DECIDED,
        event=store.audit_entry("resume_started", "worker"),
        lease=LEASE_SECONDS,
    ).ok
    if on_taken is not None:  # taken here or not, its job has nothing left to do
        on_taken()
    if not taken:
        # Taken from the queue by a batch, another worker may simply have been quicker.
        level = logging.DEBUG if on_taken is not None else logging.WARNING
        log.log(level, "approval %s is not waiting to resume; not running it again", approval_id)
        return "skipped"
    with _lease_kept(conn, approval_id):
        return _resume(conn, settings, approval_id, publish)


def _resume_next_in_queue(
    conn: redis.Redis, settings: Settings, started: float, publish: Publish
) -> None:
    """Resume the approvals whose jobs are next in the queue, as their own jobs would.

    Each is taken the way its job takes it (the move to ``running``, with its lease), and
    only then is its job removed from the queue: if this process dies in between, the job runs
    and skips it, and recovery resumes the approval once its lease lapses. A failure here
    (Redis, say) leaves the job in the queue, to run on its own.
    """
    for _ in range(settings.resume_batch - 1):
        if time.monotonic() - started >= queue.RESUME_BATCH_SECONDS:
            return
        following = queue.next_resume(conn, settings)
        if following is None:
            return
        job_id, approval_id = following
        with bind_approval(approval_id):
            try:
                _resume_once(
                    conn,
                    settings,
                    approval_id,
                    publish,
                    on_taken=functools.partial(queue.drop_queued, conn, settings, job_id),
                )
            except Exception:
                log.warning(
                    "could not go on with approval %s; its job will", approval_id, exc_info=True
                )
                return


def _resume(conn: redis.Redis, settings: Settings, approval_id: str, publish: Publish) -> str:
    approval, history = store.load_with_history(conn, approval_id)
    # The card says "running" when the run takes a while; the update must not delay the
    # tool, so its clock starts once the tool has (or now, when the tool is not to run).
    shown: list[Call] = []

    def show_soon() -> None:
        shown.append(_NOTICES.after(RUNNING_AFTER, _show_running, approval))

    decision = approval.decision
    if decision is None or not decision.kind.runs_tool:
        show_soon()
    result = _run(conn, settings, approval, show_soon, history)
    if result.status is Status.INTERRUPTED:
        _record_end(conn, approval_id, Status.INTERRUPTED, "interrupted", reason=result.error or "")
        _call_off(shown)
        queue.enqueue_interrupted(conn, settings, approval_id)
        return result.status.value
    finished = _record_end(
        conn,
        approval_id,
        result.status,
        "resume_finished",
        # The result and the right to publish it, in one step: nothing else publishes it.
        {"result": json.dumps(result_to_dict(result)), PUBLISHED: repr(time.time())},
        status=result.status.value,
        error=result.error or "",
        next_approval_id=result.next_approval_id or "",
        executed_arguments=result.executed_arguments,
        tool_output=result.tool_output or "",
    )
    _call_off(shown)
    if finished:  # what was just stored, without reading it back
        approval.status, approval.result = result.status, result
    else:  # moved on meanwhile (recovery took it for dead): show what the record says
        approval = store.load(conn, approval_id)
    publish(approval, finished)
    return result.status.value


def _record_end(
    conn: redis.Redis,
    approval_id: str,
    end: Status,
    event: str,
    fields: dict[str, str] | None = None,
    **details: Any,
) -> bool:
    """Move a run to how it ended, with its audit event, in one step; False if it had been
    moved on meanwhile (the event is recorded all the same: the run did happen)."""
    entry = store.audit_entry(event, "worker", **details)
    moved = store.transition(
        conn, approval_id, end, fields, sources=[Status.RUNNING], event=entry
    ).ok
    if not moved:
        store.audit(conn, approval_id, event, "worker", **details)
    return moved


def _run(
    conn: redis.Redis,
    settings: Settings,
    approval: Approval,
    on_tool_start: Callable[[], None],
    history: bytes | None,
) -> RunResult:
    try:
        saved = store.parse_history(approval.id, history)  # a broken one fails the run
        resumed = agent.resume(conn, settings, approval, on_tool_start, saved)
    except ToolAlreadyStarted as exc:  # another attempt started the tool: never twice
        return RunResult(Status.INTERRUPTED, error=str(exc))
    except ResumeError as exc:
        return RunResult(Status.FAILED, error=str(exc))
    except Exception as exc:  # the agent's own failure is reported, not retried blindly
        log.exception("resume of approval %s failed", approval.id)
        return RunResult(Status.FAILED, error=f"{type(exc).__name__}: {exc}")
    outcome = resumed.outcome
    paused = outcome.status == "paused"
    return RunResult(
        Status.PAUSED if paused else Status.COMPLETED,
        text=None if paused else outcome.text,
        next_approval_id=outcome.pause_id if paused else None,
        executed_arguments=resumed.executed_arguments,
        tool_output=resumed.tool_output,
    )


def _call_off(notices: list[Call]) -> None:
    """Call off the "running" update, or wait for it if it began: the result comes last."""
    for notice in notices:
        notice.cancel()


def _publish_now(approval: Approval, claimed: bool = False) -> None:
    """Publish the result from this job; on failure, as its own job that RQ retries.

    A separate job for every result cost a second trip through RQ per approval (bench B5).
    """
    approval_id = approval.id
    try:
        with bind_approval(approval_id):  # also in a publishing thread
            _publish(approval, claimed)
    except Exception:
        log.warning("publishing approval %s failed; retrying as a job", approval_id, exc_info=True)
        try:
            queue.enqueue_publish(_conn(), _settings(), approval_id)
        except Exception:  # said here: in a publishing thread nobody else would say it
            log.exception("approval %s: its result could not be queued for Slack", approval_id)
            raise


def _show_running(approval: Approval) -> None:
    approval.status = Status.RUNNING
    with bind_approval(approval.id):  # a new thread does not inherit the binding
        try:
            slack.update_card(_client(), approval)
        except Exception:  # cosmetic: the final state is published by its own retried job
            log.warning("could not show approval %s as running", approval.id, exc_info=True)


@contextmanager
def _lease_kept(conn: redis.Redis, approval_id: str) -> Iterator[None]:
    """Renew the lease while the resume runs; it lapses on its own if this process dies.

    A run that ends normally has moved out of ``running``, which ended the lease; one that
    raised drops it here.
    """
    renewal = _LEASES.every(LEASE_SECONDS / 3, store.hold_lease, conn, approval_id, LEASE_SECONDS)
    ended = False
    try:
        yield
        ended = True
    finally:
        renewal.cancel()
        if not ended:
            store.drop_lease(conn, approval_id)


@_about_approval
def announce_interrupted(approval_id: str) -> None:
    """Show an interrupted run on the card, with Retry, and explain it in the thread."""
    slack.announce_interrupted(_client(), store.load(_conn(), approval_id))


@_about_approval
def publish_result(approval_id: str) -> None:
    """Show the run's end on the card and in its thread (once, even if retried)."""
    _publish(store.load(_conn(), approval_id))


def _publish(approval: Approval, claimed: bool = False) -> None:
    conn = _conn()
    if not claimed and not store.claim(conn, approval.id, PUBLISHED):
        return
    try:
        slack.announce_result(_client(), approval)
    except Exception:
        store.release(conn, approval.id, PUBLISHED)  # let RQ's retry try again
        raise
