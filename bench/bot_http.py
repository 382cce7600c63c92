"""The bot over HTTP: B2 (50 clicks in flight at once → HTTP 200) and B6 (``/agent-pending``
answered with 10,000 approvals waiting)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from urllib.parse import urlsplit

from approvals import store
from approvals.agent import new_approval_id
from approvals.models import Status
from bench.harness import (
    Phase,
    SignedRequest,
    click_request,
    pending_request,
    send,
)
from bench.loop import pause
from tests.processes import wait_until

_FINISHED = {Status.COMPLETED, Status.PAUSED, Status.FAILED}


def burst(url: str, requests: list[SignedRequest]) -> list[tuple[int, float]]:
    """Send every request at once from ``bench.burst`` (its own process); (status, ms) each."""
    spec = {
        "url": url,
        "requests": [{"body": r.body.decode("latin-1"), "headers": r.headers} for r in requests],
    }
    done = subprocess.run(
        [sys.executable, "-m", "bench.burst"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [(int(status), float(ms)) for status, ms in json.loads(done.stdout)]


def run_burst(phase: Phase, rounds: int, clicks: int = 50) -> tuple[list[float], list[float]]:
    """B2: ``rounds`` bursts of ``clicks`` real Approve clicks, each beside a burst of the same
    size with a bad signature (answered 401 by Bolt before any listener runs)."""
    figure: list[float] = []
    floor: list[float] = []
    for r in range(rounds):
        ids = [pause(phase, 2_000, f"burst-{r}-{i}")[0] for i in range(clicks)]
        phase.idle(timeout=300)  # every card posted
        bad = [click_request(a, phase.standin.new_response_url(), True) for a in ids]
        good = [click_request(a, phase.standin.new_response_url()) for a in ids]
        answered = burst(phase.bot_url, bad)
        assert {s for s, _ in answered} == {401}, answered
        floor += [ms for _, ms in answered]
        answered = burst(phase.bot_url, good)
        assert {s for s, _ in answered} == {200}, answered
        figure += [ms for _, ms in answered]

        def finished(ids: list[str] = ids) -> bool:
            return all(store.load(phase.conn, a).status in _FINISHED for a in ids)

        wait_until(finished, 300, "every clicked approval to finish", interval=0.05)
        phase.idle(timeout=300)
    return figure, floor


def fill_pending(phase: Phase, waiting: int) -> None:
    """``waiting`` pending approvals: one real pause, then copies of it under new ids."""
    approval_id, _, _ = pause(phase, 2_000, "pending")
    template = store.load(phase.conn, approval_id)
    history = store.load_history(phase.conn, approval_id)
    for i in range(waiting - 1):
        copy = dataclasses.replace(
            template, id=new_approval_id(), created_at=template.created_at - 1 - i
        )
        store.create(phase.conn, copy, history).execute()
    assert store.pending_count(phase.conn) == waiting


def run_pending(phase: Phase, samples: int) -> list[float]:
    """B6: ``/agent-pending`` sent → its answer received at the response URL (ms)."""
    found: list[float] = []
    for i in range(samples + 1):
        url = phase.standin.new_response_url()
        mark = phase.standin.mark()
        request = pending_request(url)
        started = time.perf_counter()
        assert send(phase.bot_url, request) == 200
        arrived = phase.standin.arrival(urlsplit(url).path, since=mark, timeout=60)
        if i:  # the first one warms up
            found.append((arrived - started) * 1000)
    return found
