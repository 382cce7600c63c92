"""Cards posted at Slack's pace, in the order their pauses were recorded, by any worker.

A hundred agents pausing at once into one channel must give a hundred visible cards, in
order. Slack takes about one message a second in a channel and, above that, may hide some
instead of refusing them, so a card job does not simply post its card when it runs:

1. It asks for the channel's turn (``store.pacing.take_turn``): a post is let through when
   the channel's pace allows one and no other worker is posting there.
2. Given the turn, it posts the card at the head of the channel's waiting list: the earliest
   pause still without a card, which may be another job's. Whichever job gets a turn, the
   cards reach Slack one after another, in pause order. Once its own card is out, a job goes
   on posting what waits while turns come soon, so one job carries a burst for a while, and
   a job whose card went out by another's hand simply ends. Nothing depends on RQ running
   the jobs in order, or on every job surviving: each card still waiting is posted by the
   next job that gets a turn.
3. Not given the turn, it waits. The answer says about when its own turn comes (the channel's
   next slot, plus one interval per card ahead of it). A wait that short goes by in the
   worker; a longer one goes back to RQ's scheduler (``enqueue_card_later``), so a burst of a
   hundred cards holds no worker for a hundred seconds: the jobs sleep in Redis, each due
   about when its turn comes. RQ's scheduler looks for due jobs about once a second, so
   waiting in the worker for less than ``WAIT_IN_WORKER`` costs less than handing the job
   back.

A 429 (Slack's ``ratelimited``) pushes the channel's next slot past its ``Retry-After`` for
every worker, and the job waits its turn again: the card client does not sleep through
rate limits itself (``web_client(..., wait_out_rate_limits=False)``), which would hold the
channel without telling the others.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

import redis
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from approvals import store
from approvals.config import Settings
from approvals.errors import UnknownApproval
from approvals.slack import limits
from approvals.slack.web import CARD_LOCK_SECONDS, post_card_once
from approvals.store.pacing import Pace, Turn

log = logging.getLogger(__name__)

#: Seconds a card job waits in its worker for its channel's turn; a later turn is left to
#: RQ's scheduler (see the module's docstring).
WAIT_IN_WORKER = 2.0
#: Slack's ``Retry-After`` when a 429 comes without one.
DEFAULT_RETRY_AFTER = 1.0


def pace_of(settings: Settings) -> Pace:
    """The pace cards keep in each channel: the settings', else Slack's own."""
    return Pace(
        settings.slack_pace or limits.POSTS_PER_SECOND, settings.slack_burst or limits.POST_BURST
    )


def post_card_in_turn(
    client: WebClient,
    conn: redis.Redis,
    settings: Settings,
    approval_id: str,
    before_post: Callable[[str], None] | None = None,
) -> str | None:
    """Post cards in the approval's channel, in pause order and at its pace, until the
    approval's own card is posted and the channel's next turn is further than the job's time
    in the worker; or hand the job back to RQ's scheduler for its turn.

    Once its own card is out, the job goes on posting what waits in the channel while turns
    come within ``WAIT_IN_WORKER``: one job then carries a burst for a while, and the jobs
    whose cards it posted end as soon as they run, instead of each waiting for a turn.

    ``before_post`` is called with each card's approval id just before it is posted (a card
    that must wait for another message of its thread waits there, holding the turn).

    Returns the card's ts when this job posted it (None: posted already, by another job, or
    not yet: a later job will).

    Raises:
        SlackApiError: Slack refused the approval's own card, or failed (RQ retries the job).
        CardBeingPosted: another attempt is posting the head's card (RQ retries the job).
    """
    channel = store.records.load(conn, approval_id).channel
    pace = pace_of(settings)
    budget = time.monotonic() + WAIT_IN_WORKER
    mine: str | None = None
    while True:
        waiting_for = "" if store.records.card_posted(conn, approval_id) else approval_id
        token = uuid.uuid4().hex
        hold_ms = CARD_LOCK_SECONDS * 1000
        turn = store.pacing.take_turn(conn, channel, waiting_for, pace, token, hold_ms)
        if turn.head is None:
            wait = turn.wait_ms / 1000
            if wait < 0 or time.monotonic() + wait > budget:
                if waiting_for:
                    store.queue.enqueue_card_later(conn, settings, approval_id, wait)
                return mine
            time.sleep(wait)
            continue
        ts = _post_head(client, conn, settings, channel, turn, approval_id, before_post)
        if turn.head == approval_id:
            mine = ts


def _post_head(
    client: WebClient,
    conn: redis.Redis,
    settings: Settings,
    channel: str,
    turn: Turn,
    approval_id: str,
    before_post: Callable[[str], None] | None,
) -> str | None:
    """Post the head's card while holding the channel's turn; then let the channel go, the
    head leaving the waiting list unless Slack may take it on a later try.

    A 429 pushes the channel's next post back and is not an error (the caller waits its turn
    again). Slack refusing the card itself (``ok: false``) drops it from the list, so one bad
    card cannot hold the channel: its own job posts it, alone, as RQ retries it.
    """
    head = turn.head
    assert head is not None
    leaves = False
    try:
        if before_post is not None:
            before_post(head)
        ts = post_card_once(client, conn, head)
        leaves = True
        return ts
    except UnknownApproval:
        leaves = True  # deleted while it waited: nothing to post
        return None
    except SlackApiError as error:
        status = error.response.status_code
        if status == 429:
            store.pacing.push_back(conn, channel, _retry_after(error), pace_of(settings))
            store.metrics.count_safely(settings, "slack:retries:rate_limited")
            return None
        leaves = status < 500
        if head == approval_id or not leaves:
            raise
        log.warning("Slack refused the card of %s (%s); its own job tries again", head, error)
        return None
    finally:
        leaves = leaves or store.records.card_posted(conn, head)
        store.pacing.done(conn, channel, turn.token, head if leaves else None)


def _retry_after(error: SlackApiError) -> float:
    """Seconds Slack asked to wait (its ``Retry-After`` header)."""
    headers = error.response.headers or {}
    for name, value in headers.items():
        if name.lower() == "retry-after":
            raw = value[0] if isinstance(value, list) else value
            try:
                return max(0.0, float(raw))
            except (TypeError, ValueError):
                break
    return DEFAULT_RETRY_AFTER
