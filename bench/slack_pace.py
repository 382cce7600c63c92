"""B12: a burst of pauses into one channel: every card posted, once, in pause order, at the
pace Slack takes them, by two workers.

The stand-in keeps Slack's shape for the figure (a rate per channel, a short burst, 429 with
Retry-After above it) and the product is told the same rate (``APPROVALS_SLACK_PACE``). The
workers are held while the agents pause, so the order Redis recorded the pauses in can be
read off the queue (each pause's transaction queued its card job); then they are released at
one instant, and the clock stops when the last card reaches the stand-in.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from approvals import run_agent
from approvals.slack.cards import APPROVE_ACTION
from bench import tools
from bench.harness import CHANNEL, MODEL, Phase, calls, script
from tests.processes import wait_until
from tests.slack_standin import Pace

#: Cards the product lets through back to back in a quiet channel, in this figure; the
#: stand-in allows one more, so a post granted by Redis's clock a moment before it reaches
#: Slack is not refused for that moment.
PRODUCT_BURST = 1


def env(per_second: float) -> dict[str, str]:
    """The settings the product runs with for the figure."""
    return {"APPROVALS_SLACK_PACE": str(per_second), "APPROVALS_SLACK_BURST": str(PRODUCT_BURST)}


def _pause_at_once(phase: Phase, pauses: int) -> list[str]:
    """``pauses`` agents, each in its own thread, released at one instant; their pause ids."""
    barrier = threading.Barrier(pauses)
    ids: list[str] = [""] * pauses

    def one(index: int) -> None:
        prompt = script(calls(("act", {"target": f"b12-{index}"})), {"text": "done"})
        barrier.wait()
        outcome = run_agent(
            MODEL, prompt, tools=[tools.act], agent="bench", settings=phase.settings
        )
        ids[index] = outcome.pause_id or ""

    threads = [threading.Thread(target=one, args=(i,)) for i in range(pauses)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(ids), "an agent did not pause"
    return ids


def _card_ids(phase: Phase) -> list[str]:
    """The approval behind each card in the channel, in the order Slack received them."""
    found = []
    for message in phase.standin.messages(CHANNEL):
        for block in message.blocks:
            for element in block.get("elements", []) if block.get("type") == "actions" else []:
                if element.get("action_id") == APPROVE_ACTION:
                    found.append(str(element["value"]))
                    break
    return found


def run_burst(phase: Phase, pauses: int, per_second: float) -> dict[str, Any]:
    """Seconds from the workers' release to the last card in Slack, and what Slack saw."""
    phase.standin.set_pace(Pace(per_second, PRODUCT_BURST + 1))
    try:
        workers = len(phase.workers)
        key = phase.hold(workers)
        ids = _pause_at_once(phase, pauses)
        recorded = [j.removeprefix("card-") for j in phase.queue().job_ids if j.startswith("card-")]
        assert sorted(recorded) == sorted(ids), "a pause queued no card job"
        mark = phase.standin.mark()
        released = time.perf_counter()
        phase.release(key, workers)
        wait_until(lambda: len(_card_ids(phase)) >= pauses, 60 + 3 * pauses / per_second, "cards")
        posts = [a for a in phase.standin.since(mark) if a.path.endswith("/chat.postMessage")]
        seconds = max(a.at for a in posts) - released
        cards = _card_ids(phase)
        statuses = Counter(c["status"] for c in phase.standin.calls("chat.postMessage"))
        return {
            "seconds": seconds,
            "ideal_seconds": pauses / per_second,
            "in_pause_order": cards == recorded,
            "posted_once": len(cards) == len(set(cards)) == pauses,
            "refused_by_slack": sum(n for status, n in statuses.items() if status != 200),
        }
    finally:
        phase.standin.set_pace(None)
