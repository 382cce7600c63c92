"""``python -m bench [--quick] [--only GROUP,...] [--out PATH] [--docs PATH]``: run the
figures, print the Markdown table, write the JSON results and the Markdown page made from
them (``docs/performance.md``; with ``--quick`` only when ``--docs`` is given). Exits non-zero
only when a figure crashed."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from approvals.ops.archive import upgrade as archive_upgrade
from bench import (
    agent_side,
    api_wait,
    bot_http,
    docs,
    loop,
    retention,
    slack_pace,
    stale,
    throughput,
    tools,
)
from bench import failover as failovers
from bench.harness import Bench
from bench.report import (
    Figure,
    at_least,
    at_most,
    at_most_over_floor,
    exactly,
    floor_ratio_at_least,
    table,
    write_json,
)

DOCS = Path("docs/performance.md")
KB = 1024
MB = 1024 * 1024


@dataclass(frozen=True)
class Plan:
    """How many samples each figure takes."""

    loop: int
    bursts: int
    clicks: int
    big_bursts: int
    big_clicks: int
    pause: int
    rounds: int
    approvals: int
    waiting: int
    listings: int
    memory: int
    counts: int
    polls: int
    poll_window: float
    #: B9: approvals that finished a month ago, and approvals still waiting beside them.
    finished: int
    still_waiting: int
    #: B10: API callers waiting at once.
    callers: int
    #: B12: pauses at once into one channel, and the pace Slack (the stand-in) keeps there.
    burst_pauses: int
    burst_pace: float
    #: B11: failovers, each on a topology of its own (seconds each: Sentinel's own pace).
    failovers: int

    @classmethod
    def full(cls) -> Plan:
        return cls(
            200, 6, 50, 2, 500, 100, 2, 200, 100_000, 100, 1000, 5, 40, 20.0, 100_000, 1000, 200,
            100, 1.0, 5,
        )  # fmt: skip

    @classmethod
    def quick(cls) -> Plan:
        return cls(5, 1, 10, 1, 20, 5, 1, 5, 1_000, 3, 10, 1, 3, 1.0, 200, 50, 10, 10, 10.0, 1)


POLL_INTERVAL = 2.0
#: B1 must beat the polling design's median by this factor, in the same run.
SPEEDUP = 30
#: B5 must reach this share of the rate of a job making a resume's Redis round trips and Slack
#: calls without our code, on the same workers.
B5_RATIO = 0.8

Group = Callable[[Bench, Plan, list[Figure]], None]


def default_worker(bench: Bench, plan: Plan, out: list[Figure]) -> None:
    """B1, B4 and B8 with the default (forking) ``Worker``, one worker."""
    folder = bench.folder
    env = {
        "BENCH_TOOL_LOG": str(folder / "tools-default.jsonl"),
        "SCRIPTED_LEDGER": str(folder / "model-default.jsonl"),
    }
    with bench.phase("default", workers=1, worker_class="Worker", env=env) as phase:
        samples = loop.run_loop(phase, plan.loop)
        out.append(
            Figure(
                "B1",
                "click → gated tool starts, `Worker` (default)",
                "ms",
                samples.click_to_tool,
                samples.floor,
                "p50 ≤ 30 ms, p99 ≤ 80 ms",
                at_most(p50=30, p99=80),
                detail={
                    "stages_median_ms": samples.stage_medians(),
                    "floor_handoff_median_ms": loop._median(samples.handoff),
                    "floor_http_median_ms": loop._median(samples.http),
                    "click_to_200_median_ms": loop._median(samples.click_to_200),
                },
            )
        )
        out.append(
            Figure(
                "B4",
                "pause → card received by Slack, `Worker`",
                "ms",
                samples.pause_to_card,
                samples.set_history,
                "p50 ≤ 20 ms",
                at_most(p50=20),
                detail={"pause_to_return_median_ms": loop._median(samples.pause_to_return)},
            )
        )
        counts = loop.run_counts(phase, plan.counts)
        for what, title in (("model", "model calls"), ("tools", "tool executions")):
            ratio = counts[f"gated_{what}"] / counts[f"plain_{what}"]
            out.append(
                Figure(
                    f"B8 {what}",
                    f"{title}, paused-then-approved run / run with no gate",
                    "x",
                    [ratio],
                    target="exactly 1.00",
                    check=exactly(1.0),
                    detail=counts,
                )
            )


def fast_worker(bench: Bench, plan: Plan, out: list[Figure]) -> None:
    """B7, B1 and B4 with ``SimpleWorker`` (the fast setting), one worker, then B2.

    B2 measures the bot's answer, not the worker; it runs here because every click of a
    burst starts a resume, and this worker class gets through them soonest, so the next
    burst can start.
    """
    env = {"BENCH_TOOL_LOG": str(bench.folder / "tools-fast.jsonl")}
    with bench.phase("fast", workers=1, worker_class="SimpleWorker", env=env) as phase:
        for size in (10 * KB, 100 * KB):
            memory = agent_side.run_memory(phase, plan.memory, size)
            out.append(
                Figure(
                    f"B7 {size // KB} KB",
                    f"Redis memory per waiting approval / its history bytes ({size // KB} KB)",
                    "x",
                    [memory["ratio"]],
                    target="≤ 1.3",
                    check=at_most(p50=1.3),
                    detail=memory,
                )
            )
        samples = loop.run_loop(phase, plan.loop)
        out.append(
            Figure(
                "B1 fast",
                "click → gated tool starts, `SimpleWorker`",
                "ms",
                samples.click_to_tool,
                samples.floor,
                "p50 ≤ 10 ms",
                at_most(p50=10),
                detail={
                    "stages_median_ms": samples.stage_medians(),
                    "floor_handoff_median_ms": loop._median(samples.handoff),
                    "floor_http_median_ms": loop._median(samples.http),
                },
            )
        )
        out.append(
            Figure(
                "B4 fast",
                "pause → card received by Slack, `SimpleWorker`",
                "ms",
                samples.pause_to_card,
                samples.set_history,
                "p50 ≤ 20 ms",
                at_most(p50=20),
            )
        )
        for key, rounds, clicks, p99 in (
            ("B2 50", plan.bursts, plan.clicks, 150),
            ("B2 500", plan.big_bursts, plan.big_clicks, 1500),
        ):
            bursts = bot_http.run_burst(phase, rounds, clicks)
            out.append(
                Figure(
                    key,
                    f"click → HTTP 200, {clicks} clicks in flight",
                    "ms",
                    bursts.figure,
                    bursts.floor,
                    f"all 200, p99 ≤ {p99:,} ms",
                    at_most(p99=p99),
                    failures=bursts.failures,
                    detail={
                        "rounds": rounds,
                        "not_200": bursts.not_200,
                        "floor_not_401": bursts.not_401,
                    },
                )
            )


def bot_only(bench: Bench, plan: Plan, out: list[Figure]) -> None:
    """The polling design beside B1, and B6, with the bot and no worker."""
    env = {"BENCH_TOOL_LOG": str(bench.folder / "tools-poll.jsonl")}
    with bench.phase("bot", workers=0, env=env) as phase:
        polled = loop.run_polling(phase, plan.polls, POLL_INTERVAL, plan.poll_window)
        out.append(
            Figure(
                "B1 polling",
                f"click → tool, polling design (checks every {POLL_INTERVAL:g} s)",
                "ms",
                polled,
                target="— (compare with B1)",
            )
        )
        filled = bot_http.fill_pending(phase, plan.waiting)
        out.append(
            Figure(
                "B6 pending",
                f"/agent-pending answered, {plan.waiting:,} waiting",
                "ms",
                bot_http.run_pending(phase, plan.listings),
                target="p50 ≤ 100 ms",
                check=at_most(p50=100),
                detail={"fill_seconds": round(filled, 2), "waiting": plan.waiting},
            )
        )
        out.append(
            Figure(
                "B6 home",
                f"App Home tab opened → views.publish received, {plan.waiting:,} waiting",
                "ms",
                bot_http.run_home(phase, plan.listings),
                target="p50 ≤ 100 ms",
                check=at_most(p50=100),
                detail={"waiting": plan.waiting},
            )
        )


def agent_only(bench: Bench, plan: Plan, out: list[Figure]) -> None:
    """B3 at three history sizes; no worker runs, so the agent has the machine to itself."""
    with bench.phase("agent", bot=False, workers=0) as phase:
        for size, label, target in (
            (10 * KB, "10 KB", 2),
            (100 * KB, "100 KB", 4),
            (MB, "1 MB", 25),
        ):
            cost = agent_side.run_pause_cost(phase, size, plan.pause)
            out.append(
                Figure(
                    f"B3 {label}",
                    f"PauseChain raised → run_agent returns, {label} history",
                    "ms",
                    cost.samples,
                    cost.floor,
                    f"p50 ≤ {target} ms",
                    at_most(p50=target),
                    detail={"stored_history_bytes": cost.stored_bytes[:1]},
                )
            )
            phase.conn.flushdb()
        cost = agent_side.run_pause_cost(phase, 10 * KB, plan.pause, previewed=True)
        out.append(
            Figure(
                "B3 preview",
                "PauseChain raised → run_agent returns, 10 KB history and a 10 KB preview",
                "ms",
                cost.samples,
                cost.floor,
                "p50 ≤ 5 ms",
                at_most(p50=5),
                detail={"stored_history_bytes": cost.stored_bytes[:1],
                        "preview_chars": tools.PREVIEW_CHARS},
            )
        )  # fmt: skip
        phase.conn.flushdb()


def throughput_all(bench: Bench, plan: Plan, out: list[Figure]) -> None:
    """B5 for both worker classes, with 1 worker, then 2."""
    for worker_class in ("SimpleWorker", "Worker"):
        name = f"b5-{worker_class}"
        env = {"APPROVALS_TOOL_MODULES": "bench.tools,bench.ungated,bench.jobs"}
        with bench.phase(name, bot=False, workers=1, worker_class=worker_class, env=env) as phase:
            profile = throughput.resume_profile(phase)  # the same work for any worker count
            for workers in (1, 2):
                if workers > len(phase.workers):
                    phase.start_worker()
                    phase.wait_for_workers()
                rates: list[float] = []
                floors: list[float] = []
                details = []
                for _ in range(plan.rounds):
                    noop = throughput.noop_rate(phase, plan.approvals, workers)
                    floor = throughput.floor_rate(phase, plan.approvals, workers, profile)
                    floors.append(floor["rate"])
                    measured = throughput.approval_rate(phase, plan.approvals, workers)
                    rates.append(measured["rate"])
                    details.append({"approvals": measured, "floor": floor, "noop": noop})
                out.append(
                    Figure(
                        f"B5 {worker_class} x{workers}",
                        f"approvals resumed+completed per second, {workers} `{worker_class}`",
                        "/s",
                        rates,
                        floors,
                        f"≥ {B5_RATIO}x a job making a resume's Redis and Slack calls (floor)",
                        floor_ratio_at_least(B5_RATIO),
                        higher_is_better=True,
                        detail={
                            "rounds": details,
                            "approvals_per_round": plan.approvals,
                            "redis_round_trips_per_resume": profile["round_trips"],
                            "slack_calls_per_resume": [c[0] for c in profile["calls"]],
                        },
                    )
                )


def retention_sweep(bench: Bench, plan: Plan, out: list[Figure]) -> None:
    """B9: finished approvals with 10 KB histories swept into a SQLite archive by one
    worker, beside B2's bursts of clicks and approvals still waiting."""
    url = f"sqlite:///{bench.folder / 'archive.db'}"
    archive_upgrade(url)
    env = {"APPROVALS_ARCHIVE_URL": url, "BENCH_TOOL_LOG": str(bench.folder / "tools-b9.jsonl")}
    with bench.phase("retention", workers=1, worker_class="SimpleWorker", env=env) as phase:
        memory = retention.run_memory(phase, plan.finished, plan.still_waiting, 10 * KB)
        out.append(
            Figure(
                "B9 memory",
                f"Redis memory after {plan.finished:,} finished approvals were swept / before "
                f"they came ({plan.still_waiting:,} waiting)",
                "x",
                [memory["ratio"]],
                target="≤ 1.10",
                check=at_most(p50=1.10),
                detail=memory,
            )
        )
        quiet, beside, still = retention.run_clicks(
            phase, plan.finished, 10 * KB, plan.bursts, plan.clicks
        )
        out.append(
            Figure(
                "B9 clicks",
                f"click → HTTP 200, {plan.clicks} clicks in flight while retention sweeps "
                f"{plan.finished:,} approvals",
                "ms",
                beside.figure,
                quiet.figure,
                "all 200, p99 ≤ 150 ms",
                at_most(p99=150),
                failures=beside.failures,
                detail={"still_sweeping_after_the_bursts": still, "not_200": beside.not_200},
            )
        )
        archived = retention.run_archive(url)
        out.append(
            Figure(
                "B9 archive",
                "approvals in the archive / finished approvals swept",
                "x",
                [archived["archived"] / (2 * plan.finished)],
                target="exactly 1.00",
                check=exactly(1.0),
                detail=archived,
            )
        )


def api_waiters(bench: Bench, plan: Plan, out: list[Figure]) -> None:
    """B10: ``approvals api`` with many callers waiting at once (no bot or worker needed: the
    decisions are made through ``review.decide``, the function the bot's buttons call)."""
    with bench.phase("api", bot=False) as phase:
        waits = api_wait.run_api_wait(phase, plan.callers)
        out.append(
            Figure(
                "B10",
                f"decision → waiting API caller answered, {plan.callers} waiting",
                "ms",
                waits.samples,
                waits.floor,
                "all answered, p50 ≤ 20 ms",
                at_most(p50=20),
                failures=waits.failures,
            )
        )


def failover(bench: Bench, plan: Plan, out: list[Figure]) -> None:
    """B11: a primary, two replicas and three Sentinels of its own; the primary SIGKILLed."""
    env = {
        "SLACK_BOT_TOKEN": "xoxb-bench",
        "SLACK_API_URL": bench.standin.base_url,
        "APPROVALS_CHANNEL": "C0BENCH",
    }
    runs = failovers.run_failover(bench.folder, plan.failovers, env)
    out.append(
        Figure(
            "B11",
            "primary SIGKILLed → first decision recorded on the new primary",
            "ms",
            runs.samples,
            runs.floor,
            "nothing lost, ≤ 2,000 ms over Sentinel's own promotion (the floor)",
            at_most_over_floor(2000),
            failures=runs.failures,
            detail={
                "approvals_written_before_each_kill": failovers.WRITTEN,
                "down_after_milliseconds": failovers.DOWN_AFTER_MS,
            },
        )
    )


def stale_check(bench: Bench, plan: Plan, out: list[Figure]) -> None:
    """B13: the worker's check of a decided call's state, in this process (no service)."""
    checks, floor = stale.run_stale_check(bench.folder, plan.loop)
    out.append(
        Figure(
            "B13",
            "state checked again before an approved tool runs (`fingerprint`)",
            "ms",
            checks,
            floor,
            "p50 ≤ 1 ms",
            at_most(p50=1),
        )
    )


def slack_burst(bench: Bench, plan: Plan, out: list[Figure]) -> None:
    """B12: a burst of pauses into one channel, two workers posting at Slack's pace (the
    full run keeps Slack's own rate; the quick one a faster one, to stay quick)."""
    env = {
        **slack_pace.env(plan.burst_pace),
        "BENCH_TOOL_LOG": str(bench.folder / "tools-b12.jsonl"),
    }
    with bench.phase("pace", bot=False, workers=2, worker_class="Worker", env=env) as phase:
        burst = slack_pace.run_burst(phase, plan.burst_pauses, plan.burst_pace)
        failed = (
            (not burst["in_pause_order"]) + (not burst["posted_once"]) + burst["refused_by_slack"]
        )
        out.append(
            Figure(
                "B12",
                f"{plan.burst_pauses} pauses at once into one channel → last card in Slack, "
                f"at {plan.burst_pace:g} post/s / the ideal {plan.burst_pauses}/pace",
                "x",
                [burst["seconds"] / burst["ideal_seconds"]],
                target="all in order, once, none refused; ≤ 1.2x",
                check=at_most(p50=1.2),
                failures=failed,
                detail={**burst, "pace_per_second": plan.burst_pace, "workers": 2},
            )
        )


GROUPS: dict[str, Group] = {
    "default": default_worker,
    "fast": fast_worker,
    "bot": bot_only,
    "agent": agent_only,
    "throughput": throughput_all,
    "retention": retention_sweep,
    "api": api_waiters,
    "failover": failover,
    "stale": stale_check,
    "pace": slack_burst,
}
ORDER = [
    "B1",
    "B1 fast",
    "B1 polling",
    "B1 speed-up",
    "B2",
    "B3",
    "B4",
    "B5",
    "B6",
    "B7",
    "B8",
    "B9",
    "B10",
    "B11",
    "B12",
    "B13",
]


def speedup(figures: list[Figure]) -> Figure | None:
    """B1 against the polling design of the same run: how many times faster its median is."""
    found = {f.key: f for f in figures if f.error is None and f.samples}
    gated, polled = found.get("B1"), found.get("B1 polling")
    if gated is None or polled is None:
        return None
    return Figure(
        "B1 speed-up",
        "polling design's median / B1's median (`Worker`)",
        "x",
        [polled.median / gated.median],
        target=f"≥ {SPEEDUP}x",
        check=at_least(SPEEDUP),
        higher_is_better=True,
        detail={"polling_median_ms": polled.median, "b1_median_ms": gated.median},
    )


def _order(figure: Figure) -> int:
    """The table's order (B1 .. B8); figures of one number keep the order they ran in."""
    for i, prefix in reversed(list(enumerate(ORDER))):
        if figure.key.startswith(prefix):
            return i
    return len(ORDER)


def docs_target(given: Path | None, quick: bool) -> Path | None:
    """Where the Markdown page goes: ``--docs``, else the committed page, except that a quick
    run (too few samples to mean much) leaves the committed page alone unless asked."""
    if given is not None:
        return given
    return None if quick else DOCS


def load_average() -> str:
    """The 1, 5 and 15-minute load averages: other work on the machine skews every figure."""
    if not os.path.exists("/proc/loadavg"):
        return ""
    with open("/proc/loadavg", encoding="utf-8") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def machine() -> dict[str, str]:
    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info if "model name" in line), "")
    versions = {p: importlib.metadata.version(p) for p in ("rq", "redis", "slack-bolt", "llm")}
    return {
        "cores": str(os.cpu_count()),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        **versions,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few samples: prove it still works")
    parser.add_argument("--only", default="", help=f"comma-separated groups of {list(GROUPS)}")
    parser.add_argument("--out", type=Path, default=Path("artifacts/bench.json"))
    parser.add_argument("--keep", type=Path, help="keep logs and files in this folder")
    parser.add_argument(
        "--docs",
        type=Path,
        help=f"write the Markdown report here (default: {DOCS}; with --quick, only when given)",
    )
    args = parser.parse_args(argv)
    plan = Plan.quick() if args.quick else Plan.full()
    chosen = [g.strip() for g in args.only.split(",") if g.strip()] or list(GROUPS)
    unknown = set(chosen) - set(GROUPS)
    if unknown:
        parser.error(f"unknown groups {sorted(unknown)}; choose from {list(GROUPS)}")
    # On SIGTERM, unwind normally so every phase stops the processes it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    load_before = load_average()
    figures: list[Figure] = []
    crashed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="approvals-bench-") as temporary:
        folder = Path(args.keep) if args.keep else Path(temporary)
        folder.mkdir(parents=True, exist_ok=True)
        bench = Bench(folder)
        try:
            for name in chosen:
                print(f"bench: {name} ...", file=sys.stderr, flush=True)
                try:
                    GROUPS[name](bench, plan, figures)
                except Exception as exc:
                    traceback.print_exc()
                    crashed.append(name)
                    figures.append(Figure(name, f"group {name}", "ms", [], error=repr(exc)[:200]))
        finally:
            bench.close()
    extra = speedup(figures)
    if extra is not None:
        figures.append(extra)
    figures.sort(key=_order)
    seconds = round(time.monotonic() - started, 1)
    meta = {
        "quick": args.quick,
        "seconds": seconds,
        "groups": chosen,
        "machine": machine(),
        "load_average": {"before": load_before, "after": load_average()},
    }
    write_json(args.out, figures, meta)
    target = docs_target(args.docs, args.quick)
    if target is not None:
        docs.write(args.out, target, command=" ".join(["python -m bench", *(argv or sys.argv[1:])]))
    print(table(figures))
    print(f"\n{len(figures)} figures in {seconds} s; JSON in {args.out}", file=sys.stderr)
    print(f"load average before/after: {load_before} / {load_average()}", file=sys.stderr)
    if crashed:
        print(f"crashed: {', '.join(crashed)}", file=sys.stderr)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
