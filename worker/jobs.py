"""RQ jobs. Each takes only an approval id and reads everything else from Redis.

RQ runs a job at least once, so each job is safe to run again: the card is posted only if
none was recorded, and a resume runs only if it wins the move to ``running``.
"""

from __future__ import annotations

import functools
import json
import logging

import redis
from slack_sdk import WebClient

from approvals import agent, queue, slack, store
from approvals.config import Settings
from approvals.errors import ResumeError
from approvals.models import RunResult, Status, result_to_dict

log = logging.getLogger(__name__)


@functools.cache
def _settings() -> Settings:
    return Settings.from_env()


@functools.cache
def _conn() -> redis.Redis:
    return store.connect(_settings())


@functools.cache
def _client() -> WebClient:
    return slack.web_client(_settings())


def post_card(approval_id: str) -> str | None:
    """Post the approval's card once; returns its ts (None when it was already posted)."""
    approval = store.load(_conn(), approval_id)
    if approval.card_ts is not None:
        return None
    ts = slack.post_card(_client(), approval)
    if store.set_card(_conn(), approval_id, ts):
        store.audit(_conn(), approval_id, "card_posted", "bot", channel=approval.channel, ts=ts)
    return ts


def announce_decision(approval_id: str) -> None:
    """Redraw the card and reply in its thread after a decision made outside Slack."""
    slack.announce_decision(_client(), store.load(_conn(), approval_id))


def resume_approval(approval_id: str) -> str:
    """Resume a decided approval, at most once, and record how the run ended."""
    conn, settings = _conn(), _settings()
    if not store.transition(conn, approval_id, Status.RUNNING).ok:
        log.warning("approval %s is not waiting to resume; not running it again", approval_id)
        return "skipped"
    approval = store.load(conn, approval_id)
    store.audit(conn, approval_id, "resume_started", "worker")
    try:
        outcome = agent.resume(conn, settings, approval)
    except ResumeError as exc:
        result = RunResult(Status.FAILED, error=str(exc))
    except Exception as exc:  # the agent's own failure is reported, not retried blindly
        log.exception("resume of approval %s failed", approval_id)
        result = RunResult(Status.FAILED, error=f"{type(exc).__name__}: {exc}")
    else:
        if outcome.status == "paused":
            result = RunResult(Status.PAUSED, next_approval_id=outcome.pause_id)
        else:
            result = RunResult(Status.COMPLETED, text=outcome.text)
    store.transition(
        conn, approval_id, result.status, {"result": json.dumps(result_to_dict(result))}
    )
    store.audit(
        conn,
        approval_id,
        "resume_finished",
        "worker",
        status=result.status.value,
        error=result.error or "",
        next_approval_id=result.next_approval_id or "",
    )
    queue.enqueue_publish(conn, settings, approval_id)
    return result.status.value


def publish_result(approval_id: str) -> None:
    """Show the run's end on the card and in its thread (once, even if retried)."""
    conn = _conn()
    approval = store.load(conn, approval_id)
    if not store.claim(conn, approval_id, "result_published"):
        return
    try:
        slack.announce_result(_client(), approval)
    except Exception:
        store.release(conn, approval_id, "result_published")  # let RQ's retry try again
        raise
