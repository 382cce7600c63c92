"""What every bot replica is answering, in memory they all map (``approvals bot --processes``).

Work after an answer waits for a quiet moment (``bot.listeners.lazy``), but one replica only
sees its own requests. In a burst split between two replicas, the one that got fewer
requests went quiet first and started its work while the other was still answering: that work
took the core and the interpreter from the answers (bench B2, traced: a replica running its
work answered its 13 requests in 56 ms each at the median, against 6 ms in the other).

Each replica writes only its own slot (requests in flight, when the last one arrived) and
reads the others'; no locks, since a stale read only makes work start a little early or late.
A replica that replaces a dead one clears the slot it inherits.
"""

from __future__ import annotations

import mmap
import os
import struct

#: Requests in flight; ``time.monotonic()`` of the last arrival (one clock for all processes).
_SLOT = struct.Struct("qd")


def create(replicas: int) -> int:
    """A shared memory file for ``replicas`` slots; its descriptor, to pass to each replica."""
    fd = os.memfd_create("approvals-bot-board", 0)
    os.ftruncate(fd, _SLOT.size * replicas)
    return fd


class Board:
    """One replica's view: its own slot to write, the others to read."""

    def __init__(self, fd: int, slot: int) -> None:
        self._memory = mmap.mmap(fd, 0)
        self._count = len(self._memory) // _SLOT.size
        if not 0 <= slot < self._count:
            raise ValueError(f"slot {slot} is not on a board of {self._count}")
        self._offset = slot * _SLOT.size
        self.publish(0, 0.0)

    def publish(self, in_flight: int, last_arrival: float) -> None:
        _SLOT.pack_into(self._memory, self._offset, in_flight, last_arrival)

    def others_busy(self, now: float, gap: float) -> float | None:
        """How long to wait before looking again when another replica is answering requests
        or got one less than ``gap`` seconds ago; None when they are all quiet."""
        wait: float | None = None
        for offset in range(0, self._count * _SLOT.size, _SLOT.size):
            if offset == self._offset:
                continue
            in_flight, last_arrival = _SLOT.unpack_from(self._memory, offset)
            if in_flight > 0:
                left = gap
            elif now - last_arrival < gap:
                left = last_arrival + gap - now
            else:
                continue
            wait = left if wait is None else min(wait, left)
        return wait
