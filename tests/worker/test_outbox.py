"""Every card gets posted, once, even when Slack throttles and fails."""

from __future__ import annotations

import time
from collections import Counter

from approvals import run_agent, store
from approvals.models import Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.conftest import CHANNEL
from tests.e2e import approve_values, at_once
from tests.processes import start_worker, wait_for_workers, wait_until


def _card_ids(slack) -> list[str]:
    return [i for message in slack.messages(CHANNEL) for i in approve_values(message.blocks)]


def test_two_hundred_pauses_through_429s_and_500s_each_get_exactly_one_card(
    services, slack, env, conn, tmp_path
):
    """Slack answers 429 (Retry-After) and 500 to the first calls: all 200 cards, no duplicate."""
    services.workers.append(start_worker(env, tmp_path / "worker2.log", f"o2-{time.time_ns()}"))
    wait_for_workers(env, services.workers, 2)
    slack.fail_next("chat.postMessage", count=4, status=429, retry_after=1)
    slack.fail_next("chat.postMessage", count=12, status=500)
    slack.fail_next("chat.postMessage", count=4, status=429, retry_after=1)

    prompt = script(calls(("delete_path", {"path": "x"})), say("ok"))
    started = time.monotonic()
    outcomes = at_once(
        *[lambda: run_agent("scripted", prompt, tools=[delete_path]) for _ in range(200)]
    )
    ids = [o.pause_id for o in outcomes]
    assert len(set(ids)) == 200 and store.pending.pending_count(conn) == 200

    wait_until(lambda: len(_card_ids(slack)) >= 200, 120, "200 cards")
    elapsed = time.monotonic() - started
    counts = Counter(_card_ids(slack))
    assert set(counts) == set(ids)
    assert max(counts.values()) == 1  # nobody got two cards
    posts = slack.calls("chat.postMessage")
    failed = [c for c in posts if c["status"] != 200]
    assert len(failed) == 20  # every injected fault was met, and retried
    assert elapsed >= 1  # the 429s' Retry-After was honoured, not ignored
    for pause_id in ids:
        approval = store.records.load(conn, pause_id)
        assert approval.status is Status.PENDING and approval.card_ts is not None
