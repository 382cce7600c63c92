"""The bot over HTTP: B2 (bursts of signed clicks in flight at once → HTTP 200) and B6
(``/agent-pending`` and the App Home tab answered with a great many approvals waiting)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

import redis

from approvals import store
from approvals.calls.agent import new_approval_id
from approvals.models import Approval, Status
from bench.burst import LOOPBACK
from bench.harness import (
    Phase,
    SignedRequest,
    click_request,
    home_opened_request,
    pending_request,
    send,
)
from bench.loop import pause
from tests.processes import wait_until

_FINISHED = {Status.COMPLETED, Status.PAUSED, Status.FAILED}
#: The whole burst, every answer included, must be over within this many seconds.
BURST_SECONDS = 30
#: Approvals written per round trip while filling the pending list.
FILL_BATCH = 2_000


def burst(url: str, requests: list[SignedRequest]) -> list[tuple[int, float]]:
    """Send every request at once from ``bench.burst`` (its own process); (status, ms) each."""
    if urlsplit(url).hostname != LOOPBACK:
        raise ValueError(f"bursts only go to {LOOPBACK}: {url}")
    spec = {
        "url": url,
        "requests": [{"body": r.body.decode("latin-1"), "headers": r.headers} for r in requests],
    }
    done = subprocess.run(
        [sys.executable, "-m", "bench.burst"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=BURST_SECONDS + 30,  # the client's own deadline, and its start-up
        check=True,
    )
    return [(int(status), float(ms)) for status, ms in json.loads(done.stdout)]


@dataclass
class Bursts:
    """B2's samples: good clicks (expect 200) beside the same burst badly signed (expect 401)."""

    clicks: int
    figure: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    #: Status → how many good clicks got it, for every status but 200.
    not_200: dict[int, int] = field(default_factory=dict)
    #: Status → how many bad-signature requests got it, for every status but 401.
    not_401: dict[int, int] = field(default_factory=dict)

    @property
    def failures(self) -> int:
        return sum(self.not_200.values())


def run_burst(phase: Phase, rounds: int, clicks: int) -> Bursts:
    """B2: ``rounds`` bursts of ``clicks`` real Approve clicks, each after a burst of the same
    size with a bad signature (answered 401 by Bolt before any listener runs)."""
    result = Bursts(clicks)
    for r in range(rounds):
        ids = [pause(phase, 2_000, f"burst-{clicks}-{r}-{i}")[0] for i in range(clicks)]
        phase.idle(timeout=300)  # every card posted
        # The resumes the clicks start wait until the burst is answered: on a machine of two
        # cores the worker would otherwise take its CPU from the bot whose answer is measured.
        held = phase.hold(len(phase.workers))
        bad = [click_request(a, phase.standin.new_response_url(), True) for a in ids]
        good = [click_request(a, phase.standin.new_response_url()) for a in ids]
        for status, ms in burst(phase.bot_url, bad):
            result.floor.append(ms)
            if status != 401:
                result.not_401[status] = result.not_401.get(status, 0) + 1
        answered = burst(phase.bot_url, good)
        for status, ms in answered:
            result.figure.append(ms)
            if status != 200:
                result.not_200[status] = result.not_200.get(status, 0) + 1
        clicked = [a for a, (status, _) in zip(ids, answered, strict=True) if status == 200]
        phase.release(held, len(phase.workers))

        def finished(ids: list[str] = clicked) -> bool:
            return all(store.records.load(phase.conn, a).status in _FINISHED for a in ids)

        wait_until(finished, 300, "every clicked approval to finish", interval=0.05)
        phase.idle(timeout=300)
    return result


class _Batch:
    """What ``store.records.create`` needs of a client, writing into one shared plain pipeline.

    ``store.records.create`` opens a MULTI/EXEC per approval; filling the list that way costs
    one round trip each. Handing it this object instead queues the same writes, key for key, on one
    pipeline that is sent every ``FILL_BATCH`` approvals (only the atomicity is lost, which a
    fill with nothing else running does not need).
    """

    def __init__(self, conn: redis.Redis) -> None:
        self.pipe = conn.pipeline(transaction=False)

    def pipeline(self, transaction: bool = True) -> _Batch:
        return self

    def multi(self) -> None:
        """No transaction: the writes join the shared pipeline."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pipe, name)


def fill_pending(phase: Phase, waiting: int) -> float:
    """``waiting`` pending approvals: one real pause, then copies of it under new ids.

    Returns how long the copies took to write (seconds).
    """
    approval_id, _, _ = pause(phase, 0, "pending")
    template = store.records.load(phase.conn, approval_id)
    history = store.records.load_history(phase.conn, approval_id)
    record = template.record()

    class Copy(Approval):
        """The template under a new id and time. Its record is the template's with those two
        changed, instead of ``dataclasses.asdict`` once per copy, which is most of a fill's
        time; the copies are read back below to prove they are the same."""

        def record(self) -> dict[str, Any]:
            return {**record, "id": self.id, "created_at": self.created_at}

    base = Copy(**{f.name: getattr(template, f.name) for f in dataclasses.fields(template)})
    started = time.perf_counter()
    batch = _Batch(phase.conn)
    client = cast(redis.Redis, batch)
    for i in range(waiting - 1):
        copy = dataclasses.replace(base, id=new_approval_id(), created_at=base.created_at - 1 - i)
        store.records.create(client, copy, history)
        if (i + 1) % FILL_BATCH == 0:
            batch.pipe.execute()
    batch.pipe.execute()
    took = time.perf_counter() - started
    assert store.pending.pending_count(phase.conn) == waiting
    for approval in store.pending.pending(phase.conn, limit=3):
        again = dataclasses.replace(approval, id=template.id, created_at=template.created_at)
        assert again.record() == record, "a copy does not read back as its template"
    return took


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


def run_home(phase: Phase, samples: int) -> list[float]:
    """B6: ``app_home_opened`` sent → the bot's ``views.publish`` received by Slack (ms)."""
    found: list[float] = []
    for i in range(samples + 1):
        mark = phase.standin.mark()
        request = home_opened_request()
        started = time.perf_counter()
        assert send(phase.bot_url, request) == 200
        arrived = phase.standin.arrival("views.publish", since=mark, timeout=60)
        if i:  # the first one warms up
            found.append((arrived - started) * 1000)
    return found
