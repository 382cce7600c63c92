"""``APPROVALS_MIN_REPLICAS``: a pause or a click counts only once replicas hold it.

A real primary and a real replica; the bot and a worker as processes. With the replica down,
no pause is reported and no click counts (the card keeps its buttons, the approval stays
pending, the clicker is told privately); with it back, both work, and nothing counted twice.
"""

from __future__ import annotations

import subprocess
import time

import pytest
import redis

from approvals import store
from approvals.config import Settings
from approvals.errors import NotReplicated
from approvals.models import Status
from tests.conftest import CHANNEL
from tests.e2e import action_blocks, card_of, click, pause, tool_runs, wait_status
from tests.processes import (
    bot_url,
    redis_binary,
    start_bot,
    start_redis,
    start_worker,
    wait_for_workers,
    wait_until,
)
from tests.slack_standin import SlackStandIn


def _replica(folder, primary_port: int, port: int | None = None):
    return start_redis(
        redis_binary(), folder, ["--replicaof", "127.0.0.1", str(primary_port)], port=port
    )


def _in_sync(primary: redis.Redis) -> bool:
    info = primary.info("replication")
    return any(
        isinstance(v, dict) and v.get("state") == "online"
        for k, v in info.items()
        if k.startswith("slave")
    )


@pytest.fixture
def replicated(env, tmp_path, monkeypatch):
    """A primary with one replica; the bot and a worker on it, with APPROVALS_MIN_REPLICAS=1."""
    (tmp_path / "primary").mkdir()
    (tmp_path / "replica").mkdir()
    primary_process, url = start_redis(redis_binary(), tmp_path / "primary")
    primary_port = int(url.rsplit(":", 1)[1])
    replica_process, replica_url = _replica(tmp_path / "replica", primary_port)
    values = {
        "REDIS_URL": f"{url}/0",
        "APPROVALS_MIN_REPLICAS": "1",
        "APPROVALS_MIN_REPLICAS_TIMEOUT": "0.3",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    env = {**env, **values}
    primary = redis.Redis.from_url(env["REDIS_URL"])
    wait_until(lambda: _in_sync(primary), 15, "the replica to sync")
    bot = start_bot(env, tmp_path / "bot.log")
    worker = start_worker(env, tmp_path / "worker.log", f"mr-{time.time_ns()}")
    state = {
        "replica": replica_process,
        "replica_port": int(replica_url.rsplit(":", 1)[1]),
        "primary_port": primary_port,
    }
    try:
        state["bot_url"] = bot_url(bot)
        wait_for_workers(env, [worker], 1)
        yield env, primary, state
    finally:
        for process in (bot, worker):
            process.stop()
        primary.close()
        for process in (state["replica"], primary_process):
            if process.poll() is None:
                process.terminate()
                process.wait(10)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(10)


def test_with_the_replica_down_no_pause_is_reported_and_no_click_counts(
    replicated, slack: SlackStandIn, tmp_path
):
    env, primary, state = replicated
    first = pause(arguments={"path": "first"})  # the replica is up: it pauses
    card = card_of(slack, first)

    _stop(state["replica"])
    wait_until(lambda: not _in_sync(primary), 15, "the primary to see its replica gone")

    with pytest.raises(NotReplicated, match="not recorded"):
        pause(arguments={"path": "second"})
    assert primary.zcard(store.keys.PENDING_KEY) == 1
    assert [k for k in primary.scan_iter(match="approvals:approval:*")] == [
        store.keys.approval_key(first).encode()
    ]

    status, _ = click(slack, state["bot_url"], "approve", first, "UALICE", card.ts)
    assert status == 200
    refusal = slack.wait_for(lambda: slack.responses() and slack.responses()[0])
    assert refusal["response_type"] == "ephemeral" and refusal["replace_original"] is False
    assert refusal["text"].startswith("Not recorded")
    assert store.records.load(primary, first).status is Status.PENDING
    assert action_blocks(card_of(slack, first)), "the card keeps its buttons"
    assert tool_runs(env) == []
    assert primary.zcard(store.keys.OWED_KEY) == 0
    expiry = primary.zscore(store.keys.DEADLINES_KEY, f"expire:{first}")
    assert expiry is not None, "its deadlines were put back"

    # The replica is back: the same click counts, once, and a new pause is reported.
    (tmp_path / "replica2").mkdir()
    state["replica"], _ = _replica(
        tmp_path / "replica2", state["primary_port"], port=state["replica_port"]
    )
    # Online is not yet acknowledging: a resynced replica acks its offset a moment later.
    settings = Settings.from_env(env)
    wait_until(lambda: store.replication.replicated(primary, settings), 15, "the replica's acks")
    status, _ = click(slack, state["bot_url"], "approve", first, "UALICE", card.ts)
    assert status == 200
    wait_status(primary, first, Status.COMPLETED)
    assert [r["arguments"]["path"] for r in tool_runs(env)] == ["first"]
    second = pause(arguments={"path": "second"})
    assert action_blocks(card_of(slack, second))
    cards = [m for m in slack.messages(CHANNEL) if m.thread_ts is None]
    assert len(cards) == 2, "one card each: the refused pause never got one"
