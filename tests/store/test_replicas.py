"""Replicas: two bots and two workers on one Redis behave like one."""

from __future__ import annotations

import time

import pytest

from approvals import run_agent, store
from approvals.models import Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.e2e import at_once, card_of, click, model_calls, tool_runs, wait_status
from tests.processes import bot_url, start_bot, start_worker, stop_all, wait_for_workers


@pytest.fixture
def replicas(env, tmp_path):
    """Two `approvals bot` and two `approvals worker` processes sharing one Redis."""
    bots = [start_bot(env, tmp_path / f"bot{i}.log") for i in range(2)]
    workers = [
        start_worker(env, tmp_path / f"worker{i}.log", f"r{i}-{time.time_ns()}") for i in range(2)
    ]
    try:
        urls = [bot_url(b) for b in bots]
        wait_for_workers(env, workers, 2)
        yield urls
    finally:
        stop_all([*bots, *workers])


def test_fifty_simultaneous_clicks_across_two_bots_make_one_decision(replicas, slack, env, conn):
    """50 approvers click at once on two bot replicas: 1 transition, 1 job, 1 run, 49 answers."""
    prompt = script(calls(("delete_path", {"path": "shared"})), say("done"))
    pause_id = run_agent("scripted", prompt, tools=[delete_path]).pause_id
    card = card_of(slack, pause_id)
    users = [f"U{i:03d}" for i in range(50)]
    statuses = at_once(
        *[
            lambda user=user, i=i: click(
                slack, replicas[i % 2], "approve", pause_id, user, card.ts
            )[0]
            for i, user in enumerate(users)
        ]
    )
    assert statuses == [200] * 50
    done = wait_status(conn, pause_id, Status.COMPLETED)
    winner = done.decision.actor
    answers = slack.wait_for(lambda: len(slack.responses()) >= 49 and slack.responses())
    assert len(answers) == 49
    assert all(f"already approved by <@{winner}>" in a["text"] for a in answers)
    trail = [e["event"] for e in store.audit.audit_trail(conn, pause_id)]
    assert trail.count("approved") == 1 and trail.count("resume_started") == 1
    assert trail.count("refused") == 49
    assert len(tool_runs(env, "delete_path")) == 1
    assert len(model_calls(env)) == 2


def test_many_agents_through_two_bots_and_two_workers(replicas, slack, env, conn):
    """Ten paused agents approved through alternating bots: every one runs exactly once."""
    ids = []
    for i in range(10):
        prompt = script(calls(("delete_path", {"path": f"p{i}"})), say(f"done {i}"))
        ids.append(run_agent("scripted", prompt, tools=[delete_path]).pause_id)
    for i, pause_id in enumerate(ids):
        click(slack, replicas[i % 2], "approve", pause_id, card_ts=card_of(slack, pause_id).ts)
    for i, pause_id in enumerate(ids):
        assert wait_status(conn, pause_id, Status.COMPLETED).result.text == f"done {i}"
    runs = tool_runs(env, "delete_path")
    assert sorted(r["arguments"]["path"] for r in runs) == sorted(f"p{i}" for i in range(10))
    assert len({r["pid"] for r in runs}) >= 1
    cards = [m for m in slack.messages() if m.thread_ts is None]
    assert len(cards) == 10  # one card per approval, whichever worker posted it
