"""Calls made a little later, on one long-lived thread per process and purpose.

A resume needs two: its lease renewed every few seconds while it runs, and its card redrawn
as "running" if the tool is still going after a second. A thread started for each of them
in each resume cost a quick resume more than its Redis bookkeeping (bench B5, py-spy); one
thread per purpose serves every resume of the process. Leases and Slack calls get a thread
each, so a Slack call sleeping out a rate limit can never hold up a lease renewal.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: How long ``Call.cancel`` waits for a call that has already begun.
CANCEL_WAIT = 15.0


class Call:
    """One scheduled call (repeating when it has an interval); ``cancel`` calls it off."""

    def __init__(self, owner: Later, interval: float | None) -> None:
        self._owner = owner
        self.interval = interval
        self.state = "waiting"  # then "running", and "done" or "cancelled"
        self.finished = threading.Event()

    def cancel(self) -> None:
        """Call it off; if it is running right now, wait for it to end (its effect lands
        before whatever the caller does next)."""
        with self._owner.lock:
            if self.state != "running":
                self.state = "cancelled"
                return
            self.finished.clear()
            self.state = "cancelling"
        self.finished.wait(CANCEL_WAIT)


class Later:
    """Runs calls after a delay, in order, on a daemon thread started at first use (and
    started again in a forked child, which inherits the object but not the thread)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._due: list[tuple[float, int, Call, Callable[[], Any]]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def after(self, delay: float, function: Callable[..., Any], *args: Any) -> Call:
        """Call ``function(*args)`` once, ``delay`` seconds from now."""
        return self._schedule(delay, None, lambda: function(*args))

    def every(self, interval: float, function: Callable[..., Any], *args: Any) -> Call:
        """Call ``function(*args)`` every ``interval`` seconds until cancelled."""
        return self._schedule(interval, interval, lambda: function(*args))

    def start(self) -> None:
        """Start the thread now rather than at the first call (a spare work-horse does, so
        its job does not wait for it)."""
        with self.lock:
            self._start()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def _schedule(self, delay: float, interval: float | None, run: Callable[[], Any]) -> Call:
        call = Call(self, interval)
        with self.lock:
            heapq.heappush(self._due, (time.monotonic() + delay, next(self._order), call, run))
            self._start()
            self._wake.notify()
        return call

    def _loop(self) -> None:
        while True:
            with self.lock:
                call, run = self._next_due()
                if call.state == "cancelled":
                    continue
                call.state = "running"
            try:
                run()
            except Exception:
                log.warning("%s: a scheduled call failed", self.name, exc_info=True)
            with self.lock:
                again = call.interval is not None and call.state == "running"
                call.state = "waiting" if again else "done"
                if again:
                    due = time.monotonic() + (call.interval or 0)
                    heapq.heappush(self._due, (due, next(self._order), call, run))
                call.finished.set()

    def _next_due(self) -> tuple[Call, Callable[[], Any]]:
        """Wait (holding the lock while not waiting) for the earliest call to come due."""
        while True:
            if self._due and self._due[0][0] <= time.monotonic():
                _, _, call, run = heapq.heappop(self._due)
                return call, run
            timeout = self._due[0][0] - time.monotonic() if self._due else None
            self._wake.wait(timeout)
