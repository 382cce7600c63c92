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

import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

#: Threads for the work after the answers. Answers never wait for them, and more would only
#: compete with the request threads for the interpreter (bench B2, with Bolt's lazy listeners:
#: 2 threads answered a burst of 50 clicks in 198 ms at p99, 8 threads in 337 ms); a few, so
#: that a Slack call sleeping out a rate limit does not hold up every other click.
WORK_THREADS = 4

_work = ThreadPoolExecutor(WORK_THREADS, thread_name_prefix="listener-work")


def acknowledged(handler: Callable[..., None]) -> Callable[..., None]:
    """A listener that acknowledges at once and runs ``handler`` on the work pool; Bolt
    injects the handler's arguments as usual (events take no ``ack``: Bolt acknowledges
    them itself)."""

    @functools.wraps(handler)
    def listener(**kwargs: Any) -> None:
        ack = kwargs.get("ack")
        if ack is not None:
            ack()
        _work.submit(_logged, handler, kwargs)

    return listener


def _logged(handler: Callable[..., None], kwargs: dict[str, Any]) -> None:
    try:
        handler(**kwargs)
    except Exception:
        log.exception("%s failed", handler.__name__)
