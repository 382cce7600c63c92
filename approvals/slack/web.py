"""Talking to the Slack Web API about an approval: post the card, redraw it, reply in its thread.

Every process builds its client with ``web_client`` so that ``SLACK_API_URL`` and the retry
policy (rate limits included, which slack_sdk does not retry by default) are the same everywhere.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    RetryHandler,
)
from slack_sdk.http_retry.builtin_handlers import ServerErrorRetryHandler
from slack_sdk.web import SlackResponse

from approvals import store
from approvals.config import Settings
from approvals.models import Approval, Status
from approvals.models.preview import Preview
from approvals.secrets import mask_text
from approvals.slack import cards
from approvals.slack.previews import build_edited_preview_blocks

log = logging.getLogger(__name__)


def web_client(
    settings: Settings, logger: logging.Logger | None = None, *, wait_out_rate_limits: bool = True
) -> WebClient:
    """A ``WebClient`` for ``SLACK_BOT_TOKEN`` at ``SLACK_API_URL`` that retries politely,
    and counts its calls and retries for ``/metrics`` (``logger``: where slack_sdk logs
    each failed attempt, by default its own logger).

    ``wait_out_rate_limits=False``: a 429 raises instead of being slept through, for the card
    posts that keep the channel's pace in Redis (``approvals.slack.paced``) and tell every
    worker when Slack asked them to wait.
    """
    settings.require("SLACK_BOT_TOKEN")
    handlers = [
        _counted(ConnectionErrorRetryHandler(max_retry_count=2), settings, "connection"),
        _counted(ServerErrorRetryHandler(max_retry_count=2), settings, "server_error"),
    ]
    if wait_out_rate_limits:
        limited = RateLimitErrorRetryHandler(max_retry_count=2)
        handlers.insert(1, _counted(limited, settings, "rate_limited"))
    return CountedWebClient(
        settings,
        token=settings.slack_bot_token,
        base_url=settings.slack_api_url,
        timeout=10,
        logger=logger or _sdk_logger(),
        retry_handlers=handlers,
    )


class CountedWebClient(WebClient):
    """slack_sdk's client, counting each call by method once it returned (or failed)."""

    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = settings

    def api_call(self, api_method: str, **kwargs: Any) -> SlackResponse:
        try:
            return super().api_call(api_method, **kwargs)
        finally:
            store.metrics.count_safely(self.settings, f"slack:calls:{api_method}")


def _counted(handler: RetryHandler, settings: Settings, reason: str) -> RetryHandler:
    """``handler``, counting the retries it grants. Bolt copies the app client's handlers
    into the client it makes for each request, so the bot's retries are counted too."""
    decide = handler.can_retry

    def can_retry(**kwargs: Any) -> bool:
        granted = decide(**kwargs)
        if granted:
            store.metrics.count_safely(settings, f"slack:retries:{reason}")
        return granted

    handler.can_retry = can_retry  # type: ignore[method-assign]
    return handler


def _sdk_logger() -> logging.Logger:
    """slack_sdk's logger, with its own level set to the level in effect.

    slack_sdk builds the text of a debug line for every request and response (the whole
    body, all headers) whenever its logger's *own* level is unset, even when no debug line
    is printed, on every call the bot and the worker make.
    """
    logger = logging.getLogger("slack_sdk.web.base_client")
    if logger.level == logging.NOTSET:
        logger.setLevel(logger.getEffectiveLevel())
    return logger


def post_card(client: WebClient, approval: Approval) -> str:
    """Post the card (in the parent's thread when the agent paused again); returns its ts."""
    response = client.chat_postMessage(
        channel=approval.channel,
        text=cards.build_card_text(approval),
        blocks=cards.build_card(approval),
        thread_ts=approval.thread_ts,
    )
    return str(response["ts"])


def update_card(client: WebClient, approval: Approval) -> None:
    """Redraw the card in place to show the approval's current state."""
    if approval.card_ts is None:
        return
    client.chat_update(
        channel=approval.channel,
        ts=approval.card_ts,
        text=cards.build_card_text(approval),
        blocks=cards.build_card(approval),
    )


def reply(client: WebClient, approval: Approval, blocks: list[cards.Block], text: str) -> None:
    """Post into the card's thread (the parent's thread, when the card is itself a reply).

    Nothing is posted while the card's ts is not recorded yet: a reply must never land in
    the channel itself (``announce_decision`` says who shows a decision made meanwhile).
    """
    if approval.card_ts is None:
        log.warning("approval %s has no card yet; not replying in its thread", approval.id)
        return
    thread = approval.thread_ts or approval.card_ts
    client.chat_postMessage(channel=approval.channel, thread_ts=thread, text=text, blocks=blocks)


def announce_decision(client: WebClient, conn: redis.Redis, approval: Approval) -> None:
    """Show a decision: the card loses its buttons, the thread records who decided what.

    The thread reply comes once per decision. A click can be decided before the worker has
    recorded the card it just posted (the card is on screen a moment earlier); then the
    decider has nothing to redraw, and ``post_card_once`` shows the decision once the card is
    recorded. Both may look at once, so each claims the reply first.
    """
    if approval.card_ts is None or approval.decision is None:
        return
    _redraw_until_current(client, conn, approval)  # the same redraw twice is harmless
    shown = store.owed.shown_flag(approval)
    if not store.records.claim(conn, approval.id, shown):
        return
    try:
        line = cards.decision_line(approval)
        reply(client, approval, cards.build_decision_message(approval), line)
    except Exception:
        store.records.release(conn, approval.id, shown)
        raise
    store.owed.mark_replied(conn, approval)  # a run's result may follow it in the thread
    store.owed.forget_unshown(conn, approval.id)  # recovery need not show it


#: Statuses only move forward, so a card catches up with its record in a few redraws.
_MOST_REDRAWS = 8


def _redraw_until_current(client: WebClient, conn: redis.Redis, approval: Approval) -> None:
    """Redraw the card, then again from the record while the record moved on meanwhile.

    The worker may resume the run and redraw the card (running, completed) while this redraw
    is on its way; nothing orders the two calls at Slack, so the one landing last would win
    even if it shows an older state. The worker stores each state before it draws it, so
    once a redraw has landed and the record still says what it showed, any later change is
    drawn after it. A turn's card shows every call of the turn, so it is current only while
    every one of them still has the status it showed: two people deciding two calls of it at
    once each redraw it, and the redraw that lands last must not show the other's call
    undecided.
    """
    drawn = approval
    for _ in range(_MOST_REDRAWS):
        update_card(client, drawn)
        latest = store.records.load(conn, approval.id)
        if _card_state(latest) == _card_state(drawn):
            return
        drawn = latest


def _card_state(approval: Approval) -> tuple[Status, ...]:
    """The statuses a card shows: its own, or those of every call of its turn."""
    return tuple(call.status for call in (approval, *approval.turn_calls))


def announce_vote(client: WebClient, approval: Approval) -> None:
    """Show an approval that counts toward a quorum: the card's count and a thread reply."""
    update_card(client, approval)
    reply(client, approval, cards.build_vote_message(approval), "Approval counted")


def announce_interrupted(client: WebClient, approval: Approval) -> None:
    """Show that the worker died around the gated tool; the card offers Retry."""
    update_card(client, approval)
    reply(client, approval, cards.build_interrupted_message(approval), "The run was interrupted")


def post_grant_use(client: WebClient, approval: Approval) -> None:
    """One compact line in the channel: a grant let this call through."""
    client.chat_postMessage(
        channel=approval.channel,
        text=f"{approval.tool_name} ran: {cards.decision_line(approval)}",
        blocks=cards.build_grant_use_line(approval),
    )


def remind(client: WebClient, approval: Approval, people: list[str], round_: int, of: int) -> None:
    """A reminder in the card's thread, and a direct message to each of ``people``."""
    reply(client, approval, cards.build_reminder_message(approval, round_, of), "Reminder")
    for person in people:
        client.chat_postMessage(
            channel=person,
            text=f"{approval.tool_name} waits for your decision",
            blocks=cards.build_reminder_dm(approval),
        )


def escalate(client: WebClient, approval: Approval, channels: list[str], groups: list[str]) -> None:
    """Post the card to each escalation channel (or, with none, call the groups in its thread)."""
    notice = cards.build_escalation_notice(approval, groups)
    for channel in channels:
        client.chat_postMessage(
            channel=channel,
            text=f"Escalated: {cards.build_card_text(approval)}",
            blocks=notice + cards.build_card(approval),
        )
    if not channels:
        reply(client, approval, notice, "Escalated")
    update_card(client, approval)  # the first card shows that it was escalated


def announce_stale(
    client: WebClient,
    approval: Approval,
    approved: str | None,
    found: str | None,
    preview: Preview | None = None,
) -> None:
    """Ask again on the card, which says the state changed, and tell the thread what changed:
    the fingerprint the decision was made on, the one found (None: none could be), and the
    gate's preview computed again on the new state (None: it has none)."""
    update_card(client, approval)
    blocks = cards.build_stale_message(approved, found)
    if preview is not None:  # masked as the card's own preview is
        shown = mask_text(preview.text, approval.arguments, approval.shown_arguments)
        blocks += build_edited_preview_blocks(
            Preview(shown, preview.kind), "*Preview now, on the new state:*"
        )
    reply(client, approval, blocks, "The state changed since it was approved: decide again")


def warn_expiry(client: WebClient, approval: Approval) -> None:
    """Remind the card's thread that the request expires soon."""
    reply(client, approval, cards.build_warning_message(approval), "This request expires soon")


class CardNotRecorded(Exception):
    """The card's ts is not recorded yet (it is being posted): try again in a moment."""


def announce_result(client: WebClient, approval: Approval) -> None:
    """Show how the resumed run ended, on the card and in the thread.

    Raises:
        CardNotRecorded: the run ended before its card's ts was recorded; the publish job
            that RQ retries reads the record again.
    """
    if approval.card_ts is None:
        raise CardNotRecorded(approval.id)
    update_card(client, approval)
    for blocks in cards.build_result_messages(approval):
        reply(client, approval, blocks, cards.build_card_text(approval))


#: How long a user group's members are trusted before asking Slack again.
GROUP_CACHE_SECONDS = 300


def group_members(client: WebClient, conn: redis.Redis, group_id: str) -> list[str]:
    """Members of a Slack user group, cached in Redis so every bot replica shares one lookup.

    A group Slack cannot resolve counts as empty: nobody is let in through it.
    """
    cached = store.caches.cached_members(conn, group_id)
    if cached is not None:
        return cached
    try:
        response = client.usergroups_users_list(usergroup=group_id)
        users: list[object] = response.get("users") or []
        members = [str(u) for u in users]
    except SlackApiError:
        members = []
    store.caches.cache_members(conn, group_id, members, GROUP_CACHE_SECONDS)
    return members


#: Members asked for per ``conversations.members`` page (Slack allows up to 1000).
CHANNEL_PAGE_SIZE = 200
#: Pages read at most: a bigger channel's later members are not found (never let in wrongly).
CHANNEL_MAX_PAGES = 50


def channel_members(client: WebClient, conn: redis.Redis, channel: str) -> list[str]:
    """Members of a Slack channel (an escalation channel), every page of
    ``conversations.members`` (slack_sdk follows the cursors), cached in Redis like a user
    group's.

    A lookup that fails answers nobody and is not cached, so a decision made while Slack is
    away is refused (fails closed) and the next one asks Slack again.
    """
    cached = store.caches.cached_members(conn, channel)
    if cached is not None:
        return cached
    members: list[str] = []
    try:
        pages = client.conversations_members(channel=channel, limit=CHANNEL_PAGE_SIZE)
        for number, page in enumerate(pages, start=1):
            members += [str(u) for u in page.get("members") or []]
            if number == CHANNEL_MAX_PAGES:
                break
    except SlackApiError:
        log.warning("conversations.members failed for %s: nobody is let in through it", channel)
        return []
    store.caches.cache_members(conn, channel, members, GROUP_CACHE_SECONDS)
    return members


def members(client: WebClient, conn: redis.Redis, target: str) -> list[str]:
    """Members of a user group (``S...``) or of a channel: who an approver target lets in."""
    if target.startswith("S"):
        return group_members(client, conn, target)
    return channel_members(client, conn, target)


#: Longer than a card post can take with slack_sdk's own retries (Retry-After included).
CARD_LOCK_SECONDS = 90


class CardBeingPosted(Exception):
    """Another attempt is posting this card right now; RQ retries this job later."""


def post_card_once(client: WebClient, conn: redis.Redis, approval_id: str) -> str | None:
    """Post the approval's card once; returns its ts (None when it was already posted).

    A short lock keeps two attempts (RQ runs jobs at least once) from posting it twice; if
    the holder dies, the lock lapses and a retry posts the card.
    """
    approval = store.records.load(conn, approval_id)
    if approval.card_ts is not None:
        return None
    if not store.records.lock(conn, approval_id, "card", ttl=CARD_LOCK_SECONDS):
        raise CardBeingPosted(approval_id)
    try:
        if store.records.card_posted(conn, approval_id):  # by the lock's holder before
            return None
        ts = post_card(client, approval)
        for call_id in approval.turn[1:]:  # the turn's other calls are on this card too
            store.records.set_card(conn, call_id, ts)
        recorded, now = store.records.record_card(conn, approval_id, ts)
        if recorded:
            store.audit.append(
                conn, approval_id, "card_posted", "bot", channel=approval.channel, ts=ts
            )
        log.info("card posted in %s (ts %s)", approval.channel, ts)
        if now.status is Status.PENDING and any(
            c.status is not Status.PENDING or c.votes for c in now.turn_calls
        ):  # a call of the turn was decided while its card was being posted
            update_card(client, now)
            for call in now.turn_calls[1:]:
                if call.status is not Status.PENDING:
                    announce_decision(client, conn, store.records.load(conn, call.id))
        # Someone may have clicked the card before its ts was recorded (see announce_decision).
        if now.status is not Status.PENDING:
            announce_decision(client, conn, now)
        elif now.votes:
            update_card(client, now)  # the count so far
        return ts
    finally:
        # Posted: the card's ts stops any later attempt. Refused: the retry may post it.
        store.records.unlock(conn, approval_id, "card")


def post_grant_use_once(client: WebClient, conn: redis.Redis, approval_id: str) -> None:
    """Post the compact line for a call a grant let through (once, whatever RQ retries)."""
    approval = store.records.load(conn, approval_id)
    if store.records.claim(conn, approval_id, "grant_line_posted"):
        try:
            post_grant_use(client, approval)
        except Exception:
            store.records.release(conn, approval_id, "grant_line_posted")  # RQ retries it
            raise
