"""Acknowledge first, work after: how clicks, commands and events are run.

The app runs with ``process_before_response=True``: a listener runs in the request's own
thread and the 200 goes out as soon as it returns. Bolt's other mode ran every listener on a
pool and had the request thread poll for its ``ack()`` every 10 ms, so in a burst of clicks
each answer waited behind the Redis and Slack calls of the clicks before it (bench B2).

Work whose result is not part of the HTTP answer (a decision, a Slack update, a listing sent
to ``response_url``) is registered through ``Acknowledged``: the listener acknowledges and
hands the work to a small pool. (Bolt's own lazy listeners do the same but deep-copy the whole
request first, in the request's thread.) Not acknowledged: modal submissions, whose
validation errors have to be in the answer itself, and the buttons that open a modal, which
must not wait behind other work for the 3 s their ``trigger_id`` lives.

Over HTTP the answer to such a request is known before Bolt routes it: an empty 200 once its
signature, form and replay checks pass. So the bot answers then, and Bolt's middleware and
routing run on the pool too (``Bot.answer``): they were most of a click's time on the answer
path (bench B2: 50 clicks in flight on two cores).

The work also waits (briefly) for a quiet moment: while other requests are being answered,
the pool would only take the interpreter from them (``_Answers``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from slack_bolt import App

from bot.board import Board

log = logging.getLogger(__name__)

#: Threads for the work after the answers. Answers never wait for them, and more would only
#: compete with the request threads for the interpreter (bench B2, with Bolt's lazy listeners:
#: 2 threads answered a burst of 50 clicks in 198 ms at p99, 8 threads in 337 ms); a few, so
#: that a Slack call sleeping out a rate limit does not hold up every other click.
WORK_THREADS = 4

#: How long work may wait for answers (under a steady stream of requests the bot is never
#: quiet; work still starts this soon after its click).
YIELD_SECONDS = 0.25
#: Requests that arrive closer together than this are a burst: work waits for its end.
BURST_GAP_SECONDS = 0.005

_work = ThreadPoolExecutor(WORK_THREADS, thread_name_prefix="listener-work")


class _Answers:
    """Requests being answered, and when the last one arrived; work waits for a quiet moment.

    A click's own request never holds its work back: a single click's work starts the moment
    its answer is sent (bench B1), while in a burst every answer goes out first (bench B2).
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._in_flight = 0
        self._arrivals = 0
        self._last_arrival = 0.0
        self._current = threading.local()
        self._board: Board | None = None

    def share(self, board: Board) -> None:
        """Publish this replica's requests on ``board`` and wait for the other replicas too."""
        self._board = board

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        with self._changed:
            self._in_flight += 1
            self._arrivals += 1
            self._last_arrival = time.monotonic()
            self._current.arrival = self._arrivals
            self._publish()
        try:
            yield
        finally:
            with self._changed:
                self._in_flight -= 1
                self._publish()
                if not self._in_flight:
                    self._changed.notify_all()

    def _publish(self) -> None:
        if self._board is not None:
            self._board.publish(self._in_flight, self._last_arrival)

    def arrival(self) -> int:
        """Which arrival the request this thread is answering was (0 outside a request)."""
        return int(getattr(self._current, "arrival", 0))

    def wait_for_quiet(self, arrival: int, submitted: float) -> None:
        """Wait while requests are in flight or others arrived less than a burst gap ago."""
        deadline = submitted + YIELD_SECONDS
        with self._changed:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    return
                if self._in_flight:
                    wait = deadline - now
                elif self._arrivals > arrival and now - self._last_arrival < BURST_GAP_SECONDS:
                    wait = self._last_arrival + BURST_GAP_SECONDS - now
                elif self._board is not None and (
                    others := self._board.others_busy(now, BURST_GAP_SECONDS)
                ):
                    wait = others  # other replicas cannot notify: look again after a gap
                else:
                    return
                self._changed.wait(min(wait, deadline - now))


_answers = _Answers()
answering = _answers.answering
share_board = _answers.share


#: Set in Bolt's request context when the HTTP answer went out before Bolt saw the request:
#: the listener is then already on the pool, after a quiet moment.
ANSWERED = "approvals_answered"

#: A request's route as Bolt matches it: ("action", action_id), ("command", "/name") or
#: ("event", event type).
Route = tuple[str, str]


@dataclass
class Acknowledged:
    """The acknowledged listeners of one app, and the routes they answer."""

    app: App
    routes: set[Route] = field(default_factory=set)

    def action(self, action_id: str, handler: Callable[..., None]) -> None:
        self.app.action(action_id)(acknowledged(handler))
        self.routes.add(("action", action_id))

    def command(self, command: str, handler: Callable[..., None]) -> None:
        self.app.command(command)(acknowledged(handler))
        self.routes.add(("command", command))

    def event(self, event_type: str, handler: Callable[..., None]) -> None:
        self.app.event(event_type)(acknowledged(handler))
        self.routes.add(("event", event_type))

    def covers(self, body: dict[str, Any]) -> bool:
        """Whether Bolt would route ``body`` to one of these listeners."""
        route = route_of(body)
        return route is not None and route in self.routes


def route_of(body: dict[str, Any]) -> Route | None:
    """The route of a parsed request body, as Bolt's matchers read it; None for the others
    (view submissions, URL verification, anything malformed)."""
    kind = body.get("type")
    if kind == "block_actions":
        actions = body.get("actions")
        first = actions[0] if isinstance(actions, list) and actions else None
        action_id = first.get("action_id") if isinstance(first, dict) else None
        return ("action", action_id) if isinstance(action_id, str) else None
    if kind == "event_callback":
        event = body.get("event")
        event_type = event.get("type") if isinstance(event, dict) else None
        return ("event", event_type) if isinstance(event_type, str) else None
    if kind is not None:  # a view submission, a URL verification...: Bolt's other listeners
        return None
    command = body.get("command")  # slash commands are forms with no "type"
    return ("command", command) if isinstance(command, str) else None


def after_answer(work: Callable[[], None]) -> None:
    """Run ``work`` on the pool once the answers in flight are out (never waiting for the
    request being answered in this thread)."""
    _work.submit(_when_quiet, work, _answers.arrival(), time.monotonic())


def acknowledged(handler: Callable[..., None]) -> Callable[..., None]:
    """A listener that acknowledges at once and runs ``handler`` on the work pool; Bolt
    injects the handler's arguments as usual (events take no ``ack``: Bolt acknowledges
    them itself)."""

    @functools.wraps(handler)
    def listener(**kwargs: Any) -> None:
        ack = kwargs.get("ack")
        if ack is not None:
            ack()
        work = functools.partial(handler, **kwargs)
        if (kwargs.get("context") or {}).get(ANSWERED):
            _logged(work)  # already on the pool, after a quiet moment
        else:
            after_answer(work)

    return listener


def _when_quiet(work: Callable[[], None], arrival: int, submitted: float) -> None:
    _answers.wait_for_quiet(arrival, submitted)
    _logged(work)


def _logged(work: Callable[[], None]) -> None:
    try:
        work()
    except Exception:
        name = getattr(work, "func", work)
        log.exception("%s failed", getattr(name, "__name__", repr(name)))
