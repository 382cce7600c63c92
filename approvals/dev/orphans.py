"""Children that die with their owner, so a killed ``approvals dev`` leaves nothing running.

Linux's ``PR_SET_PDEATHSIG`` makes the kernel signal a child when the thread that started it
exits, even when the owner is killed with SIGKILL and has no chance to clean up. Elsewhere
this does nothing, and a restart stops what an owner left behind (see ``redis_server``).
"""

from __future__ import annotations

import ctypes
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that asks for SIGTERM at the owner's death.

    Start such children from the main thread: the signal follows the thread that forked.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))

    return set_death_signal
