"""Acknowledge first, work after: how clicks, commands and events are run.

The app runs with ``process_before_response=True``: a listener's ``ack`` function runs in the
request's own thread and the 200 goes out as soon as it returns. Bolt's other mode ran every
listener on a pool and had the request thread poll for its ``ack()`` every 10 ms, so in a
burst of clicks each answer waited behind the Redis and Slack calls of the clicks before it
(bench B2). Work whose result is not part of the HTTP answer (a decision, a Slack update, a
listing sent to ``response_url``) is registered as a lazy listener, which Bolt runs on the
listener pool right after the 200. Not lazy: modal submissions, whose validation errors have
to be in the answer itself, and the buttons that open a modal, which must not wait behind
other work for the 3 s their ``trigger_id`` lives.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from slack_bolt import Ack

log = logging.getLogger(__name__)


def acknowledge(ack: Ack) -> None:
    ack()


def lazily(handler: Callable[..., None]) -> dict[str, Any]:
    """Listener arguments: acknowledge at once, then run ``handler`` after the 200."""
    return {"ack": acknowledge, "lazy": [_logged(handler)]}


def _logged(handler: Callable[..., None]) -> Callable[..., None]:
    """Bolt logs a failed lazy listener in one line without its traceback; keep it."""

    @functools.wraps(handler)
    def run(**kwargs: Any) -> None:
        try:
            handler(**kwargs)
        except Exception:
            log.exception("%s failed", handler.__name__)

    return run
