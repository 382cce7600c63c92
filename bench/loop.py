"""The whole loop, one approval at a time: B1 (click → gated tool starts), B4 (pause → card
in Slack), B8 (model calls and tool runs against a run with no gate) and the polling design.

Each B1 sample: the agent (this process) pauses; the worker posts the card; once the workers
are idle, a signed Approve click is sent to the bot over HTTP (``t0 = time.time()`` just before
it is sent); the gated tool writes ``time.time()`` on its first line, in the worker. Both are
the machine's wall clock, so the difference is comparable across processes. The floor beside
it, sampled in between: one LPUSH → BLPOP hand-off to another process (``bench.peer``) plus one
HTTP round trip to the bot (``GET /healthz`` on a new connection).
"""

from __future__ import annotations

import itertools
import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import llm

from approvals import run_agent, store
from approvals.models import Status
from bench import tools, ungated
from bench.harness import (
    MODEL,
    Phase,
    calls,
    click_request,
    get,
    rq_time,
    script,
    send,
)
from bench.peer import PING, PONG
from tests.processes import Process, wait_until

#: Seconds the bench waits after a click before it starts checking whether the resume ended:
#: longer than a resume usually takes, so the checks seldom overlap the measured time.
QUIET_AFTER_CLICK = 0.08


class PauseClock:
    """When this process last raised ``llm.PauseChain`` (``perf_counter``): the start of B3/B4.

    It wraps the exception's constructor, which the gate calls just before ``raise``.
    """

    last = math.nan
    _installed = False

    @classmethod
    def install(cls) -> None:
        if cls._installed:
            return

        def timed_init(exc: BaseException, *args: Any) -> None:
            cls.last = time.perf_counter()
            BaseException.__init__(exc, *args)

        llm.PauseChain.__init__ = timed_init  # type: ignore[method-assign,assignment]
        cls._installed = True


def blob_prompt(history_bytes: int, target: str, gated: str = "act") -> str:
    """A run that reads a big output, then calls the gated tool in the same turn.

    The saved history is about ``history_bytes`` long (the blob is the sibling result).
    """
    overhead = 700  # messages, ids and JSON around the blob, measured
    size = max(0, history_bytes - overhead)
    turn = calls(("blob", {"size": size}), (gated, {"target": target}))
    return script(turn, {"text": "done"})


def pause(
    phase: Phase, history_bytes: int, target: str, previewed: bool = False
) -> tuple[str, float, float]:
    """Run the agent to its pause (at ``act``, or ``act_previewed`` whose gate computes a
    preview); returns (approval id, paused at, returned at)."""
    PauseClock.install()
    gated = tools.act_previewed if previewed else tools.act
    outcome = run_agent(
        MODEL,
        blob_prompt(history_bytes, target, gated.__name__),
        tools=[tools.blob, gated],
        agent="bench",
        settings=phase.settings,
    )
    returned = time.perf_counter()
    assert outcome.status == "paused" and outcome.pause_id, outcome
    return outcome.pause_id, PauseClock.last, returned


@dataclass
class LoopSamples:
    click_to_tool: list[float] = field(default_factory=list)
    click_to_200: list[float] = field(default_factory=list)
    pause_to_card: list[float] = field(default_factory=list)
    pause_to_return: list[float] = field(default_factory=list)
    #: B3's floor, beside B4: one SET of the history's bytes.
    set_history: list[float] = field(default_factory=list)
    handoff: list[float] = field(default_factory=list)
    http: list[float] = field(default_factory=list)
    #: Where B1's time goes, per sample (ms), from the audit trail and RQ's job timestamps.
    stages: dict[str, list[float]] = field(default_factory=dict)

    @property
    def floor(self) -> list[float]:
        return [a + b for a, b in zip(self.handoff, self.http, strict=True)]

    def stage_medians(self) -> dict[str, float]:
        return {name: round(_median(v), 2) for name, v in self.stages.items()}


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else math.nan


def run_loop(phase: Phase, samples: int, history_bytes: int = 10_240) -> LoopSamples:
    """``samples`` approvals through the whole loop, one at a time, with the floor between."""
    result = LoopSamples()
    peer = Process(
        [sys.executable, "-m", "bench.peer", phase.env["REDIS_URL"]],
        phase.env,
        phase.folder / "peer.log",
    )
    try:
        for i in range(samples + 1):  # the first one warms every process up, and is dropped
            one = _one_click(phase, history_bytes, f"loop-{i}")
            floor = _handoff(phase), _http_round_trip(phase)
            if i == 0:
                continue
            result.click_to_tool.append(one["click_to_tool"])
            result.click_to_200.append(one["click_to_200"])
            result.pause_to_card.append(one["pause_to_card"])
            result.pause_to_return.append(one["pause_to_return"])
            result.set_history.append(one["set_history"])
            result.handoff.append(floor[0])
            result.http.append(floor[1])
            for name, value in one["stages"].items():
                result.stages.setdefault(name, []).append(value)
    finally:
        phase.conn.lpush(PING, "stop")
        peer.stop()
    return result


def _one_click(phase: Phase, history_bytes: int, target: str) -> dict[str, Any]:
    mark = phase.standin.mark()
    approval_id, paused_at, returned_at = pause(phase, history_bytes, target)
    card_at = phase.standin.arrival("chat.postMessage", approval_id.encode(), since=mark)
    phase.idle()
    approval = store.records.load(phase.conn, approval_id)
    set_history = _set_floor(phase, approval_id)
    request = click_request(approval_id, phase.standin.new_response_url())
    t0 = time.time()
    status = send(phase.bot_url, request)
    answered = time.time()
    assert status == 200, status
    # Checking Redis for the end takes CPU from the processes being measured: let the
    # resume run undisturbed for a while first, then check.
    time.sleep(QUIET_AFTER_CLICK)
    phase.audit_event(approval_id, "resume_finished", interval=0.005)
    phase.idle()
    started = next(r["at"] for r in phase.tool_log() if r["call_id"] == approval.tool_call_id)
    return {
        "click_to_tool": (started - t0) * 1000,
        "click_to_200": (answered - t0) * 1000,
        "pause_to_card": (card_at - paused_at) * 1000,
        "pause_to_return": (returned_at - paused_at) * 1000,
        "set_history": set_history,
        "stages": _stages(phase, approval_id, t0, started),
    }


def _stages(phase: Phase, approval_id: str, t0: float, tool_at: float) -> dict[str, float]:
    """Click → decision recorded → job enqueued → job started → resume code → tool (ms)."""
    trail = store.audit.audit_trail(phase.conn, approval_id)
    at = {e["event"]: float(e["at"]) for e in trail}
    job = phase.conn.hmget(f"rq:job:resume-{approval_id}", ["enqueued_at", "started_at"])
    enqueued, started = rq_time(job[0]), rq_time(job[1])
    points = [
        ("click", t0),
        ("decision recorded (bot)", at.get("approved")),
        ("resume job enqueued (bot)", enqueued),
        ("job started (worker)", started),
        ("resume_started audit (job code)", at.get("resume_started")),
        ("tool first line", tool_at),
    ]
    stages: dict[str, float] = {}
    for (_, before), (name, after) in itertools.pairwise(points):
        if before is not None and after is not None:
            stages[f"→ {name}"] = (after - before) * 1000
    return stages


def _set_floor(phase: Phase, approval_id: str) -> float:
    """One SET of the approval's history bytes (ms)."""
    history = phase.conn.get(store.keys.history_key(approval_id))
    assert isinstance(history, bytes)
    started = time.perf_counter()
    phase.conn.set("bench:floor", history)
    return (time.perf_counter() - started) * 1000


def _handoff(phase: Phase) -> float:
    """One LPUSH here → BLPOP in ``bench.peer`` (ms, wall clock of both processes)."""
    sent = time.time()
    phase.conn.lpush(PING, "ping")
    reply = phase.conn.blpop([PONG], timeout=10)
    assert reply is not None, "bench.peer did not answer"
    return (float(reply[1]) - sent) * 1000


def _http_round_trip(phase: Phase) -> float:
    started = time.perf_counter()
    assert get(phase.health_url) == 200
    return (time.perf_counter() - started) * 1000


def run_counts(phase: Phase, runs: int) -> dict[str, int]:
    """B8: model calls and tool runs of paused-then-approved runs vs the same runs ungated.

    Needs ``SCRIPTED_LEDGER`` and ``BENCH_TOOL_LOG`` in the phase's environment.
    """
    counts = {"gated_model": 0, "gated_tools": 0, "plain_model": 0, "plain_tools": 0}
    for i in range(runs):
        model, tool = phase.lines("SCRIPTED_LEDGER"), phase.lines("BENCH_TOOL_LOG")
        approval_id, _, _ = pause(phase, 2_000, f"count-{i}")
        phase.idle()
        request = click_request(approval_id, phase.standin.new_response_url())
        assert send(phase.bot_url, request) == 200
        phase.audit_event(approval_id, "resume_finished")
        phase.idle()
        approval = store.records.load(phase.conn, approval_id)
        assert approval.status is Status.COMPLETED, approval.status
        counts["gated_model"] += phase.lines("SCRIPTED_LEDGER") - model
        counts["gated_tools"] += phase.lines("BENCH_TOOL_LOG") - tool

        model, tool = phase.lines("SCRIPTED_LEDGER"), phase.lines("BENCH_TOOL_LOG")
        outcome = run_agent(
            MODEL,
            blob_prompt(2_000, f"count-{i}"),
            tools=[tools.blob, ungated.act],
            agent="bench",
            settings=phase.settings,
        )
        assert outcome.status == "completed", outcome
        counts["plain_model"] += phase.lines("SCRIPTED_LEDGER") - model
        counts["plain_tools"] += phase.lines("BENCH_TOOL_LOG") - tool
    return counts


def run_polling(phase: Phase, samples: int, interval: float, window: float) -> list[float]:
    """The polling design's click → tool latency (ms), with ``samples`` calls waiting at once.

    Runs with no worker: the bot records the decision, and ``bench.poller`` (an agent that
    checks every ``interval`` seconds) runs the tool. Clicks fall at random moments over
    ``window`` seconds, so they land at random points of the polling cycle.
    """
    waiting: list[tuple[str, str]] = []
    for i in range(samples):
        approval_id, _, _ = pause(phase, 2_000, f"poll-{i}")
        waiting.append((approval_id, store.records.load(phase.conn, approval_id).tool_call_id))
    poller = Process(
        [
            sys.executable,
            "-m",
            "bench.poller",
            phase.env["REDIS_URL"],
            "--interval",
            str(interval),
            "--deadline",
            str(window + 4 * interval + 30),
            *[f"{a}:{c}" for a, c in waiting],
        ],
        phase.env,
        phase.folder / "poller.log",
    )
    rng = random.Random(7)
    clicked: dict[str, float] = {}
    try:
        time.sleep(1.0)  # let the poller import and start its cycle
        begin = time.monotonic()
        for offset, (approval_id, call_id) in sorted(
            (rng.uniform(0, window), item) for item in waiting
        ):
            time.sleep(max(0.0, begin + offset - time.monotonic()))
            request = click_request(approval_id, phase.standin.new_response_url())
            clicked[call_id] = time.time()
            assert send(phase.bot_url, request) == 200
        ran = wait_until(
            lambda: _ran(phase, set(clicked)),
            window + 4 * interval + 30,
            "the poller to run every tool",
            interval=0.05,
        )
    finally:
        poller.stop()
    return [(ran[call_id] - t0) * 1000 for call_id, t0 in clicked.items()]


def _ran(phase: Phase, call_ids: set[str]) -> dict[str, float] | None:
    ran = {r["call_id"]: r["at"] for r in phase.tool_log() if r["call_id"] in call_ids}
    return ran if len(ran) == len(call_ids) else None
