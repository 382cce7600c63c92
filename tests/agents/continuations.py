"""``on_finish`` continuations for the tests: each call is appended to ``TOOL_LEDGER``."""

from __future__ import annotations

import json
import os
from typing import Any


def _record(name: str, outcome: Any, key: str) -> None:
    path = os.environ["TOOL_LEDGER"]
    entry = {"tool": name, "pid": os.getpid(), "status": outcome.status, "key": key}
    entry["run_id"] = outcome.run_id
    with open(path, "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(entry) + "\n")


def note_outcome(outcome: Any, idempotency_key: str) -> None:
    """Write down the final outcome."""
    _record("on_finish", outcome, idempotency_key)


def flaky_note(outcome: Any, idempotency_key: str) -> None:
    """Fail the first call (its attempt is written down), then write down the outcome."""
    marker = os.environ["TOOL_LEDGER"] + ".failed-once"
    if not os.path.exists(marker):
        open(marker, "w").close()
        _record("on_finish_failed", outcome, idempotency_key)
        raise RuntimeError("the downstream service is down (first attempt)")
    _record("on_finish", outcome, idempotency_key)


def held_note(outcome: Any, idempotency_key: str) -> None:
    """Write down that it started, block while the file named by HOLD_FILE exists (so a test
    can kill the worker inside it), then write down the outcome."""
    import time

    _record("on_finish_started", outcome, idempotency_key)
    hold = os.environ.get("HOLD_FILE")
    while hold and os.path.exists(hold):
        time.sleep(0.02)
    _record("on_finish", outcome, idempotency_key)
