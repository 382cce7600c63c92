"""Slack's pace, kept per channel by every worker at once: cards waiting in pause order, and
the time the channel's next post may go.

Slack lets an app post about one message a second in a channel, with short bursts above it,
and above that it may hide messages instead of refusing them. Workers on many hosts post
cards, so the pace lives here, in Redis, where they all see it:

- ``approvals:cards:<channel>``: the approvals whose card waits to be posted in the channel,
  in the order their pauses were recorded (``enlist`` writes it in the pause's own
  transaction, so the order is Redis's order of the pauses).
- ``approvals:pace:<channel>``: when the channel's next post may go, as a "theoretical
  arrival time" (the generic cell rate algorithm): each post moves it one interval on; a post
  is let through while it is no more than the burst ahead of now. One Lua script reads and
  moves it, with Redis's clock, so any number of workers together keep the pace.
- ``approvals:posting:<channel>``: held by the worker posting in the channel right now, so
  posts go one after another and Slack receives them in the order they were let through.

A 429 from Slack (``push_back``) moves the channel's next post to after its ``Retry-After``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import redis

from approvals.store.connection import eval_script, text
from approvals.store.keys import channel_cards_key, channel_pace_key, channel_posting_key

#: How long a channel's waiting list is kept after its last pause (its entries leave as their
#: cards are posted; this only bounds what a channel nobody posts to again leaves behind).
CARDS_TTL = 24 * 3600
#: Milliseconds a job waits before looking again while another worker is posting in the channel.
BUSY_MS = 20


@dataclass(frozen=True)
class Pace:
    """A channel's pace: ``per_second`` posts a second, ``burst`` of them back to back when
    the channel has been quiet."""

    per_second: float
    burst: int

    @property
    def interval_ms(self) -> int:
        return max(1, round(1000 / self.per_second))

    @property
    def tolerance_ms(self) -> int:
        """How far ahead of now the next post may be and still go (the burst)."""
        return (max(1, self.burst) - 1) * self.interval_ms


@dataclass(frozen=True)
class Turn:
    """What ``take_turn`` answered: post ``head`` now (the channel is yours until ``done``), or
    wait ``wait_ms`` and ask again; ``at_ms``: when, on Redis's clock."""

    head: str | None
    wait_ms: int
    token: str
    at_ms: int = 0


def enlist(pipe: Any, channel: str, approval_id: str) -> None:
    """Put the approval's card at the end of the channel's waiting list (in ``pipe``, the
    pause's transaction, so the list holds the pauses in the order Redis recorded them)."""
    key = channel_cards_key(channel)
    pipe.rpush(key, approval_id)
    pipe.expire(key, CARDS_TTL)


def waiting(conn: redis.Redis, channel: str) -> list[str]:
    """The approvals whose card waits in the channel, first to be posted first."""
    return [text(i) for i in cast(list[bytes], conn.lrange(channel_cards_key(channel), 0, -1))]


# KEYS: pace, waiting list, posting lock. ARGV: approval id (or ''), token, interval ms,
# tolerance ms, lock ms, busy ms. Answers {head or '', wait ms (-1: nothing waits), now ms}.
_TURN_LUA = """
local ahead = false
if ARGV[1] ~= '' then ahead = redis.call('LPOS', KEYS[2], ARGV[1]) end
local head = redis.call('LINDEX', KEYS[2], 0)
if not ahead then
  if ARGV[1] ~= '' then head = ARGV[1] elseif not head then return {'', -1, 0} end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval, tolerance = tonumber(ARGV[3]), tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local wait = tat - tolerance - now
if wait < 0 then wait = 0 end
if redis.call('EXISTS', KEYS[3]) == 1 and wait < tonumber(ARGV[6]) then
  wait = tonumber(ARGV[6])
end
if wait > 0 then
  return {'', wait + (ahead or 0) * interval, now}
end
redis.call('SET', KEYS[1], tat + interval, 'PX', tat + interval - now + tolerance + 60000)
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[5])
return {head, 0, now}
"""


def take_turn(
    conn: redis.Redis, channel: str, approval_id: str, pace: Pace, token: str, hold_ms: int
) -> Turn:
    """Ask for the channel's next post, on behalf of ``approval_id`` (or of nobody in
    particular: ``""``, to post what waits).

    When the pace allows a post now and nobody is posting in the channel, the channel is held
    for ``hold_ms`` (or until ``done``) and the answer names the card to post: the first of
    the channel's waiting list, which may be an earlier pause than ``approval_id`` (so cards
    go out in pause order whichever job gets the turn), or ``approval_id`` itself when it is
    not on the list (a card queued before the list existed, or one Slack refused). Otherwise
    the answer says how long to wait: until the channel's next post may go, plus one interval
    for every card waiting ahead of ``approval_id``, about when its own turn comes; or, asked
    on behalf of nobody, that nothing waits (``wait_ms`` -1).
    """
    keys = [channel_pace_key(channel), channel_cards_key(channel), channel_posting_key(channel)]
    args = [approval_id, token, pace.interval_ms, pace.tolerance_ms, hold_ms, BUSY_MS]
    head, wait, now = eval_script(conn, _TURN_LUA, keys, args)
    return Turn(text(head) or None, int(wait), token, int(now))


# KEYS: waiting list, posting lock. ARGV: approval id posted (or '' for none), token.
_DONE_LUA = """
if ARGV[1] ~= '' then redis.call('LREM', KEYS[1], 1, ARGV[1]) end
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return 1
"""


def done(conn: redis.Redis, channel: str, token: str, posted: str | None) -> None:
    """Let the channel go (if ``token`` still holds it); ``posted``: the approval whose card
    is now in Slack (or that can never be), which leaves the waiting list."""
    keys = [channel_cards_key(channel), channel_posting_key(channel)]
    eval_script(conn, _DONE_LUA, keys, [posted or "", token])


def forget(conn: redis.Redis, channel: str, approval_id: str) -> None:
    """Take an approval off the channel's waiting list (its card was posted by other means)."""
    conn.lrem(channel_cards_key(channel), 1, approval_id)


# KEYS: pace. ARGV: seconds, tolerance ms.
_PUSH_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
local later = now + tonumber(ARGV[1]) * 1000 + tonumber(ARGV[2])
if later > tat then
  redis.call('SET', KEYS[1], later, 'PX', later - now + 60000)
end
return 1
"""


def push_back(conn: redis.Redis, channel: str, seconds: float, pace: Pace) -> None:
    """Slack said to wait ``seconds`` (``Retry-After``): no post goes to the channel before
    then, and after it the pace resumes without a burst."""
    eval_script(conn, _PUSH_LUA, [channel_pace_key(channel)], [seconds, pace.tolerance_ms])
