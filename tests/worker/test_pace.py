"""Slack's pace at scale: a burst of pauses into one channel gives every card, once, in pause
order, never faster than Slack takes them, whichever worker posts them.

The stand-in keeps Slack's shape (a rate per channel, a short burst, 429 with Retry-After
above it) at ten posts a second rather than Slack's one, so a hundred cards take about ten
seconds, not a hundred; the product is told the same rate (``APPROVALS_SLACK_PACE``).
"""

from __future__ import annotations

import time
from collections import Counter

from rq import Queue

from approvals import run_agent, store
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.conftest import CHANNEL
from tests.e2e import approve_values, at_once
from tests.processes import start_worker, wait_for_workers, wait_until
from tests.slack_standin import Pace

#: The stand-in's pace in this test: Slack's shape, ten times Slack's rate.
STANDIN = Pace(per_second=10, burst=2)
#: The product's: the same rate, no burst (a post granted by Redis's clock may reach the
#: stand-in a little later or sooner than the one before it; its burst absorbs that).
PRODUCT = {"APPROVALS_SLACK_PACE": "10", "APPROVALS_SLACK_BURST": "1"}
#: Workers that start jobs soonest (no fork per job): the figure here is Slack's pace, and a
#: loaded machine's forks would otherwise be what the test waits for.
WORKERS = {"APPROVALS_WORKER_CLASS": "SimpleWorker"}
PAUSES = 100


def _cards(slack) -> list[str]:
    """The approval ids of the cards in the channel, in the order Slack received them."""
    return [i for message in slack.messages(CHANNEL) for i in approve_values(message.blocks)[:1]]


def test_a_hundred_pauses_at_once_give_a_hundred_cards_in_pause_order_at_slacks_pace(
    slack, env, conn, tmp_path, monkeypatch
):
    """100 agents pause at once into one channel, two workers post: every card once, in the
    order the pauses were recorded, and the stand-in never had to refuse one."""
    slack.set_pace(STANDIN)
    for name, value in PRODUCT.items():
        monkeypatch.setenv(name, value)
    env = {**env, **PRODUCT, **WORKERS}
    prompt = script(calls(("delete_path", {"path": "x"})), say("ok"))
    outcomes = at_once(
        *[lambda: run_agent("scripted", prompt, tools=[delete_path]) for _ in range(PAUSES)]
    )
    ids = {o.pause_id for o in outcomes}
    assert len(ids) == PAUSES
    # The order Redis recorded the pauses in: each pause's transaction queued its card job.
    queued = Queue("approvals", connection=conn).job_ids
    recorded = [job_id.removeprefix("card-") for job_id in queued]
    assert set(recorded) == ids

    workers = [
        start_worker(env, tmp_path / f"worker{n}.log", f"pace{n}-{time.time_ns()}") for n in (1, 2)
    ]
    try:
        wait_for_workers(env, workers, 2)
        wait_until(lambda: len(_cards(slack)) >= PAUSES, 90, f"{PAUSES} cards")
    finally:
        for worker in workers:
            worker.stop()

    cards = _cards(slack)
    assert max(Counter(cards).values()) == 1  # nobody got two cards
    assert cards == recorded  # in pause order
    posts = slack.calls("chat.postMessage")
    assert [p for p in posts if p["status"] != 200] == []  # never over the pace
    assert len(posts) == PAUSES
    ideal = (PAUSES - STANDIN.burst) / STANDIN.per_second
    assert posts[-1]["at"] - posts[0]["at"] >= ideal * 0.95  # paced, not sent at once
    for approval_id in ids:
        assert store.records.load(conn, approval_id).card_ts is not None
    assert store.pacing.waiting(conn, CHANNEL) == []
