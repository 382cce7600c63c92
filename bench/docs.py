"""``docs/performance.md``, written from the JSON of a run (``python -m bench`` calls it).

The page is generated: its figures are only ever the ones in the JSON beside it, and each
figure's explanation is fixed text that says what is measured, in words, so the page never
holds a number that did not come from the run it describes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

#: What each figure measures, by key prefix (the longest prefix that matches wins).
EXPLAINED: dict[str, str] = {
    "B1": (
        "From a signed Approve click sent to `approvals bot` over HTTP to the first line of the "
        "gated tool running in `approvals worker` (the stock RQ `Worker`, which forks a "
        "work-horse per job). Both ends read the machine's wall clock. The floor beside it, "
        "sampled between clicks, is one Redis LPUSH → BLPOP hand-off to another process plus "
        "one HTTP round trip to the bot's `/healthz`: the two hops a click cannot avoid."
    ),
    "B1 fast": (
        "The same as B1 with RQ's `SimpleWorker`, which runs each job in the worker process "
        "itself instead of a forked work-horse."
    ),
    "B1 polling": (
        "The design approval gates commonly use instead: the agent stays alive and checks "
        "every couple of seconds whether a decision was recorded, then runs the tool itself. "
        "Clicks land at random points of its polling cycle. No target: it is the comparison "
        "for the next row."
    ),
    "B1 speed-up": (
        "The polling design's median divided by B1's median, both from this run: how many "
        "times sooner the gated tool starts when the click enqueues the resume directly."
    ),
    "B2": (
        "A burst of signed Approve clicks, all sent at once, each on its own new connection "
        "(as Slack sends them), from a separate client process, to the bot on gunicorn; the "
        "time until each HTTP answer. Every click must get an HTTP 200: any other answer, or none "
        "before the burst's deadline, fails the figure. The floor is the same burst with a bad "
        "signature, which Bolt refuses before any listener runs: what the server costs per "
        "request before our code does anything. The work each click starts after its answer "
        "(recording the decision, redrawing the card) runs in the bot as in production; the "
        "worker is held until the burst is answered, so the resumes it would start do not take "
        "the CPU of the machine the bench shares between every part."
    ),
    "B10": (
        "Many callers wait at once, each on the waiting `GET` of its own approval (`?wait=`), "
        "against one `approvals api` process; each approval is then decided through the function "
        "the Slack buttons call, each once the previous caller has its answer. The figure is the "
        "time from a decision to its "
        "caller's answer; every caller must be answered. The floor is Redis's own hand-off: an "
        "`XADD` on one connection until a blocked `XREAD` on another returns."
    ),
    "B11": (
        "A Redis primary, two replicas and three Sentinels of the bench's own (they count a "
        "silent primary as down after a second), with approvals written and confirmed by a replica "
        "before the primary is SIGKILLed. The figure is from the kill to the first decision "
        "recorded (through the function the Slack buttons call, on a client given only the "
        "Sentinels, retried as a person would); the floor is from the kill to the first "
        "Sentinel naming the new primary: detection and promotion, which no client can beat. "
        "Every approval written before the kill, and the decision, must be on the new primary."
    ),
    "B13": (
        "What the worker adds to a resume to check that the state a decision depended on has "
        "not changed, after it claims the approval and before the tool starts: finding the "
        "gate's `fingerprint` function among the allowed modules, computing it in a thread "
        "under its time limit and comparing it with the one stored at the pause. The "
        "fingerprint hashes a small file and reads its modification time; the floor is that "
        "function called directly, which any check must pay."
    ),
    "B3": (
        "Inside the agent's process: from the gate raising `llm.PauseChain` to `run_agent` "
        "returning, at three sizes of saved history; the floor is one Redis SET of the same "
        "bytes."
    ),
    "B3 preview": (
        "B3 with the smallest history, the gated tool's gate computing a preview as large "
        "(a unified diff) when the call pauses: the preview function runs in a thread of its "
        "own within `APPROVALS_PREVIEW_TIMEOUT`, its head goes in the record, the whole of it "
        "in its own key, in the pause's one transaction. The floor is one round trip SETting the "
        "history's and the preview's bytes."
    ),
    "B4": (
        "From the gate raising `llm.PauseChain` to the approval card's `chat.postMessage` "
        "arriving at the Slack stand-in (the worker posts it); the floor is one Redis SET of "
        "the history's bytes."
    ),
    "B5": (
        "Decided approvals resumed, run to completion and shown on their cards per second, "
        "with every worker released at one instant. The floor is a job that asks Redis and "
        "Slack for what a resume asks, with none of our code: first one resume is run in the "
        "bench process, counting its Redis round trips (a command or a pipeline, sent and "
        "answered) and the Slack calls the stand-in receives; the floor job then makes that "
        "many Redis round trips and the same Slack calls with the same bodies, on the same "
        "worker class and count, in the same rounds. The target is a share of that floor, so "
        "it says what our code costs beyond the work a resume cannot avoid. RQ's own rate for "
        "jobs that do nothing is kept in the figure's detail, for context."
    ),
    "B12": (
        "Many agents pause at once, each in its own thread, into one channel, while two "
        "workers are held; the workers are then released at one instant. The Slack stand-in "
        "keeps a channel's pace the way Slack does (a rate, a short burst, a refusal with "
        "Retry-After above it) and the product is told the same rate. The figure is the time "
        "from the release to the last card reaching the stand-in, over the ideal: the number "
        "of cards divided by the pace. Every card must arrive once, in the order Redis recorded "
        "the pauses, and none may be refused: any of those fails the figure. The full run keeps "
        "Slack's own rate of about one post a second; the quick run a faster one."
    ),
    "B6 pending": (
        "`/agent-pending` sent to the bot → its answer received at the response URL, with "
        "that many approvals waiting, written the way the store writes them."
    ),
    "B6 home": (
        "The App Home tab opened (`app_home_opened` sent to the bot) → the bot's "
        "`views.publish` received by the Slack stand-in, with the same approvals waiting."
    ),
    "B7": (
        "Redis memory grown per waiting approval (its record, history, audit trail and card "
        "job), over the bytes of its saved history."
    ),
    "B8": (
        "Model calls and tool executions of runs that paused and were approved, over the same "
        "runs with no gate: the gate must not make a run call the model or a tool again."
    ),
    "B9 memory": (
        "Approvals with ten-kilobyte histories that finished a month ago, written key for key "
        "as the store writes them, beside approvals still waiting; one worker's retention sweep "
        "archives them into SQLite and removes them from Redis. Redis's used memory once the "
        "sweep is done, over its used memory with only the waiting approvals: it must come "
        "back to what an empty instance plus the waiting approvals take."
    ),
    "B9 clicks": (
        "B2's bursts of signed Approve clicks, sent while the retention sweep works off that "
        "many newly due approvals; the floor is the same bursts just before, with nothing to "
        "sweep. The sweep must not delay the bot's answers."
    ),
    "B9 archive": (
        "Approvals the archive holds after both sweeps, over the approvals that finished: "
        "every one must be there. The detail times queries people run on it: a count, the "
        "completed approvals by tool, and one approval rebuilt with its audit trail."
    ),
}


def explain(key: str) -> str:
    """The fixed explanation of the figure ``key``."""
    matches = [prefix for prefix in EXPLAINED if key == prefix or key.startswith(prefix + " ")]
    return EXPLAINED[max(matches, key=len)] if matches else ""


def _number(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return "—"
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "ms":
        return f"{value:.1f} ms" if value < 100 else f"{value:,.0f} ms"
    return f"{value:.2f}x" if unit == "x" else f"{value:.2f}"


def _met(figure: dict[str, Any]) -> str:
    if figure["error"]:
        return "crashed"
    met = {True: "met", False: "**missed**", None: "—"}[figure["met"]]
    failures = figure.get("failures") or 0
    return f"{met} ({failures} failed)" if failures else met


def render(data: dict[str, Any], command: str) -> str:
    """The Markdown page for the run ``data`` (the JSON ``python -m bench`` writes)."""
    machine = data["machine"]
    load = data["load_average"]
    lines = [
        "# Performance",
        "",
        f"<!-- Generated by `{command}` from its JSON; do not edit by hand. -->",
        "",
        f"Generated by `{command}` from the JSON it wrote; run it again to refresh this page.",
        "Every figure runs on the real parts: a private `redis-server`, `approvals bot` on "
        "gunicorn, `approvals worker` processes and a local Slack stand-in. Each is measured "
        "beside a floor taken in the same run on the same machine, so a slow machine shows "
        "in both.",
        "",
        f"- Machine: {machine['cores']} cores, {machine['cpu'] or 'unknown CPU'}; "
        f"{machine['platform']}",
        f"- Python {machine['python']}, rq {machine['rq']}, redis-py {machine['redis']}, "
        f"slack-bolt {machine['slack-bolt']}, llm {machine['llm']}",
        f"- Load average before / after: {load['before']} / {load['after']}; "
        f"the run took {data['seconds']} s{' (--quick: few samples)' if data['quick'] else ''}",
        "",
        "| # | figure | samples | p50 | p99 | floor p50 | p50 / floor | target | |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in data["figures"]:
        if f["error"]:
            lines.append(f"| {f['key']} | {f['title']} | 0 | crashed | | | | {f['target']} | |")
            continue
        high = f.get("p99", f.get("worst_round"))
        high_text = _number(high, f["unit"]) + (" (worst)" if "worst_round" in f else "")
        lines.append(
            f"| {f['key']} | {f['title']} | {f['n']} | {_number(f['median'], f['unit'])} "
            f"| {high_text} | {_number(f['floor_median'], f['unit'])} "
            f"| {_number(f['ratio'], 'x')} | {f['target']} "
            f"| {_met(f)} |"
        )
    lines += ["", "## What each figure measures", ""]
    seen: set[str] = set()
    for f in data["figures"]:
        text = explain(f["key"])
        if text and text not in seen:
            seen.add(text)
            lines += [f"**{f['key']}**: {text}", ""]
    lines += _details(data["figures"])
    return "\n".join(lines).rstrip() + "\n"


def _details(figures: list[dict[str, Any]]) -> list[str]:
    """Where B1's time goes (medians per stage), and B5's CPU per job and per approval."""
    lines = ["## Where the time goes", ""]
    for f in figures:
        stages = f["detail"].get("stages_median_ms")
        if stages:
            steps = ", ".join(f"{name} {ms:.1f} ms" for name, ms in stages.items())
            lines += [f"- {f['key']}, medians from the click: {steps}"]
    for f in figures:
        rounds = f["detail"].get("rounds")
        if f["key"].startswith("B5") and isinstance(rounds, list) and rounds:
            one = rounds[-1]
            lines += [
                f"- {f['key']}, CPU of the last round: per approval, workers "
                f"{one['approvals']['workers_cpu_ms']} ms and bench process (the Slack "
                f"stand-in) {one['approvals']['bench_cpu_ms']} ms; per no-op job, workers "
                f"{one['noop']['workers_cpu_ms']} ms"
            ]
    return lines if len(lines) > 2 else []


def write(json_path: Path, target: Path, command: str) -> None:
    """Read the run's JSON at ``json_path`` and write its page to ``target``."""
    data = json.loads(json_path.read_text(encoding="utf-8"))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(data, command), encoding="utf-8")
