"""Acknowledge first, work after: how clicks, commands and events are run.

The app runs with ``process_before_response=True``: a listener runs in the request's own
thread and the 200 goes out as soon as it returns. Bolt's other mode ran every listener on a
pool and had the request thread poll for its ``ack()`` every 10 ms, so in a burst of clicks
each answer waited behind the Redis and Slack calls of the clicks before it (bench B2).

Work whose result is not part of the HTTP answer (a decision, a Slack update, a listing sent
to ``response_url``) is wrapped with ``acknowledged``: the listener acknowledges and hands the
work to a small pool. (Bolt's own lazy listeners do the same but deep-copy the whole request
first, in the request's thread.) Not wrapped: modal submissions, whose validation errors
have to be in the answer itself, and the buttons that open a modal, which must not wait
behind other work for the 3 s their ``trigger_id`` lives.

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
from typing import Any

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

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        with self._changed:
            self._in_flight += 1
            self._arrivals += 1
            self._last_arrival = time.monotonic()
            self._current.arrival = self._arrivals
        try:
            yield
        finally:
            with self._changed:
                self._in_flight -= 1
                if not self._in_flight:
                    self._changed.notify_all()

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
                else:
                    return
                self._changed.wait(min(wait, deadline - now))


_answers = _Answers()
answering = _answers.answering


def acknowledged(handler: Callable[..., None]) -> Callable[..., None]:
    """A listener that acknowledges at once and runs ``handler`` on the work pool; Bolt
    injects the handler's arguments as usual (events take no ``ack``: Bolt acknowledges
    them itself)."""

    @functools.wraps(handler)
    def listener(**kwargs: Any) -> None:
        ack = kwargs.get("ack")
        if ack is not None:
            ack()
        _work.submit(_logged, handler, kwargs, _answers.arrival(), time.monotonic())

    return listener


def _logged(
    handler: Callable[..., None], kwargs: dict[str, Any], arrival: int, submitted: float
) -> None:
    _answers.wait_for_quiet(arrival, submitted)
    try:
        handler(**kwargs)
    except Exception:
        log.exception("%s failed", handler.__name__)
