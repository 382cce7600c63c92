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

#: How long work may wait for the answers in flight (a steady stream of requests never
#: leaves the bot idle; work still starts this soon after its click).
YIELD_SECONDS = 0.25

_work = ThreadPoolExecutor(WORK_THREADS, thread_name_prefix="listener-work")
_in_flight = 0
_quiet = threading.Condition()


@contextlib.contextmanager
def answering() -> Iterator[None]:
    """Mark one HTTP request as in flight: work waits for the answers first."""
    global _in_flight
    with _quiet:
        _in_flight += 1
    try:
        yield
    finally:
        with _quiet:
            _in_flight -= 1
            if not _in_flight:
                _quiet.notify_all()


def _answers_first(submitted: float) -> None:
    deadline = submitted + YIELD_SECONDS
    with _quiet:
        while _in_flight:
            left = deadline - time.monotonic()
            if left <= 0 or not _quiet.wait(left):
                return


def acknowledged(handler: Callable[..., None]) -> Callable[..., None]:
    """A listener that acknowledges at once and runs ``handler`` on the work pool; Bolt
    injects the handler's arguments as usual (events take no ``ack``: Bolt acknowledges
    them itself)."""

    @functools.wraps(handler)
    def listener(**kwargs: Any) -> None:
        ack = kwargs.get("ack")
        if ack is not None:
            ack()
        _work.submit(_logged, handler, kwargs, time.monotonic())

    return listener


def _logged(handler: Callable[..., None], kwargs: dict[str, Any], submitted: float) -> None:
    _answers_first(submitted)
    try:
        handler(**kwargs)
    except Exception:
        log.exception("%s failed", handler.__name__)
