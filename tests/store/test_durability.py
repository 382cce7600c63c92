"""A pause, once acknowledged, survives a crash of Redis (with AOF), the bot and the worker."""

from __future__ import annotations

import signal
import time

from approvals import run_agent, store
from approvals.models import DecisionKind, Status
from tests.agents import tools
from tests.agents.scripted import calls, say, script
from tests.e2e import (
    approve_values,
    card_of,
    click,
    dead_workers_claims_lapse,
    pending_command,
    reply_containing,
    wait_status,
)
from tests.processes import (
    bot_url,
    redis_binary,
    start_bot,
    start_redis,
    start_worker,
    stop_all,
    wait_for_workers,
    wait_until,
)

AOF = ("--appendonly", "yes", "--appendfsync", "always")


def test_pauses_cards_and_scheduled_expiry_survive_a_redis_kill_9(
    env, slack, tmp_path, monkeypatch
):
    """kill -9 Redis (AOF, appendfsync always), bot and worker: nothing acknowledged is lost.

    Every pending approval and its card are still there; the workers reconnect; a decision
    still runs its tool once; the expiry, kept as a deadline in Redis, fires; and RQ's
    scheduler, which died with Redis, is restarted by worker maintenance, so a Slack retry
    still happens (within 2 minutes is the promise).
    """
    binary = redis_binary()
    assert binary is not None
    data = tmp_path / "aof"
    data.mkdir()
    server, base = start_redis(binary, data, AOF)
    port = base.rsplit(":", 1)[1]
    url = f"{base}/0"
    env = {**env, "REDIS_URL": url}
    monkeypatch.setenv("REDIS_URL", url)
    bot = start_bot(env, tmp_path / "bot.log")
    workers = [start_worker(env, tmp_path / "worker.log", f"d-{time.time_ns()}")]
    processes = [bot, *workers]
    try:
        bot_address = bot_url(bot)
        wait_for_workers(env, workers, 1)
        prompt = script(calls(("delete_path", {"path": "kept"})), say("done"))
        ids = [run_agent("scripted", prompt, tools=[tools.delete_path]).pause_id for _ in range(20)]
        expiring = run_agent(
            "scripted",
            script(calls(("purge_cache", {"region": "eu"})), say("ok")),
            tools=[tools.purge_cache],
        ).pause_id
        cards = {pause_id: card_of(slack, pause_id).ts for pause_id in [*ids, expiring]}
        # A card counts as posted once its ts is in Redis (the worker writes it just after
        # Slack answers): wait for that, then pull the plug.
        before = store.connection.connect(store_settings(url))
        wait_until(
            lambda: all(store.records.card_posted(before, pause_id) for pause_id in cards),
            20,
            "every card's ts saved",
        )
        before.close()

        # Everything dies at once; Redis comes back from its append-only file.
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        stop_all(processes, signal.SIGKILL)
        server, _ = start_redis(binary, data, AOF, port=int(port))
        conn = store.connection.connect(store_settings(url))
        assert store.pending.pending_count(conn) == 21
        for pause_id, ts in cards.items():
            approval = store.records.load(conn, pause_id)
            assert approval.status is Status.PENDING and approval.card_ts == ts
            assert store.records.load_history(conn, pause_id)

        bot = start_bot(env, tmp_path / "bot2.log")
        workers = [start_worker(env, tmp_path / "worker2.log", f"d2-{time.time_ns()}")]
        processes = [bot, *workers]
        bot_address = bot_url(bot)
        wait_for_workers(env, workers, 1)
        pending_command(slack, bot_address, user="UALICE")
        listed = slack.wait_for(lambda: slack.responses())[-1]
        shown = approve_values(listed["blocks"])
        assert shown == list(reversed([*ids, expiring]))[:15]  # all there, newest first

        click(slack, bot_address, "approve", ids[0], card_ts=cards[ids[0]])
        wait_status(conn, ids[0], Status.COMPLETED)
        assert len([r for r in _runs(env) if r["tool"] == "delete_path"]) == 1

        # The deadline was written with the pause: the new worker's sweep fires it.
        expired = wait_status(
            conn, expiring, Status.EXPIRED, Status.RUNNING, Status.COMPLETED, timeout=120
        )
        assert expired.decision.kind is DecisionKind.EXPIRE
        assert expired.decision.at - expired.expires_at < 120
        wait_until(lambda: store.pending.pending_count(conn) == 19, 30, "the rest to stay pending")
        # The expired run resumes (the model is told) and ends: let its messages land first.
        wait_status(conn, expiring, Status.COMPLETED)
        reply_containing(slack, cards[expiring], "Final answer")

        # RQ's scheduler (Slack retries) died with the old Redis; the new worker's maintenance
        # restarts it once the dead one's lock (kept in the AOF) lapses, which time passing
        # brings about: a card refused once is retried and posted.
        dead_workers_claims_lapse(conn)
        slack.fail_next("chat.postMessage", count=1, error="fatal_error")
        retried = run_agent("scripted", prompt, tools=[tools.delete_path]).pause_id
        wait_until(lambda: _card_posted(slack, retried), 120, "the retried card")
        refused = [c for c in slack.calls("chat.postMessage") if c["error"] == "fatal_error"]
        assert len(refused) == 1 and retried in str(refused[0]["args"])
        assert len([m for m in slack.messages() if retried in str(m.blocks)]) == 1
    finally:
        stop_all(processes)
        server.terminate()
        server.wait(10)


def _card_posted(slack, approval_id: str):
    return next((m for m in slack.messages() if approval_id in str(m.blocks)), None)


def store_settings(url: str):
    from approvals.config import Settings

    return Settings.from_env({"REDIS_URL": url})


def _runs(env):
    from tests.e2e import tool_runs

    return tool_runs(env)
