"""RQ jobs. Each takes only an approval id and reads everything else from Redis.

RQ runs a job at least once, so each job is safe to run again: the card is posted only if
none was recorded, a resume runs only if it wins the move to ``running``, a result is
published once.
"""

from __future__ import annotations

import functools
import logging
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from slack_sdk import WebClient

from approvals import store
from approvals.calls import outcomes, resume
from approvals.config import Settings
from approvals.decisions import deadlines, reminders
from approvals.ops.logs import bind_approval
from approvals.slack import paced
from approvals.slack import web as slack

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def _about_approval(job: F) -> F:
    """Every log line a job writes carries its approval id (jobs take it first)."""

    @functools.wraps(job)
    def bound(approval_id: str, *args: Any, **kwargs: Any) -> Any:
        with bind_approval(approval_id):
            return job(approval_id, *args, **kwargs)

    return bound  # type: ignore[return-value]


@functools.cache
def _settings() -> Settings:
    return Settings.from_env()


def _conn() -> redis.Redis:
    """The process's one Redis client, which the metrics and outcomes use too: a work-horse
    then opens one connection of its own, not one per client."""
    return store.connection.shared_connection(_settings())


@functools.cache
def _client() -> WebClient:
    return slack.web_client(_settings())


@functools.cache
def _card_client() -> WebClient:
    """The client cards are posted with: a 429 comes back to ``paced``, which tells every
    worker to wait, instead of being slept through here."""
    return slack.web_client(_settings(), wait_out_rate_limits=False)


def warm() -> None:
    """Build the settings, Redis client and Slack client now (the worker calls this once,
    before it forks: every work-horse inherits them)."""
    _settings()
    _conn()
    _client()
    _card_client()
    # The opener urllib would build on its first request (slack_sdk's calls go through it),
    # built here so that a work-horse does not build one of its own for every job.
    urllib.request.install_opener(urllib.request.build_opener())


@_about_approval
def post_card(approval_id: str) -> str | None:
    """Post the approval's card once, in its channel's turn (``approvals.slack.paced``);
    returns its ts when this job posted it. A card that goes into its parent's thread waits
    for the reply saying who decided the parent (``resume.parent_replied_first``)."""
    return paced.post_card_in_turn(
        _card_client(), _conn(), _settings(), approval_id, before_post=_parent_replied_first
    )


def _parent_replied_first(approval_id: str) -> None:
    resume.parent_replied_first(_conn(), _client(), approval_id)


@_about_approval
def announce_decision(approval_id: str) -> None:
    """Redraw the card and reply in its thread after a decision made outside Slack."""
    slack.announce_decision(_client(), _conn(), store.records.load(_conn(), approval_id))


@_about_approval
def expire_approval(approval_id: str) -> str:
    """At the deadline: expire the approval unless someone decided first."""
    return deadlines.expire(_conn(), _settings(), _client(), approval_id)


@_about_approval
def warn_expiry(approval_id: str) -> None:
    """Remind the thread that the approval expires soon, if it is still waiting."""
    deadlines.warn(_conn(), _client(), approval_id)


@_about_approval
def remind_approvers(approval_id: str) -> None:
    """Remind the thread and each approver of a request still waiting; schedule the next."""
    reminders.remind(_conn(), _settings(), _client(), approval_id)


@_about_approval
def escalate_approval(approval_id: str) -> None:
    """Post a request nobody decided to ``escalate_to``, once."""
    reminders.escalate(_conn(), _client(), approval_id)


@_about_approval
def announce_grant_use(approval_id: str) -> None:
    """Post the compact line for a call a grant let through (once, whatever RQ retries)."""
    slack.post_grant_use_once(_client(), _conn(), approval_id)


@_about_approval
def resume_approval(approval_id: str) -> str:
    """Resume a decided approval, at most once, and show how the run ended (``resume``)."""
    return resume.resume(_conn(), _settings(), _client(), approval_id)


@_about_approval
def announce_interrupted(approval_id: str) -> None:
    """Show an interrupted run on the card, with Retry, and explain it in the thread."""
    slack.announce_interrupted(_client(), store.records.load(_conn(), approval_id))


@_about_approval
def publish_result(approval_id: str) -> None:
    """Show the run's end on the card and in its thread (once, even if retried)."""
    resume.publish(_conn(), _client(), store.records.load(_conn(), approval_id))


def call_on_finish(run_id: str) -> str:
    """Call a finished run's ``on_finish`` with its outcome (RQ retries it when it raises)."""
    return outcomes.call_on_finish(_conn(), _settings(), run_id)
