"""Redis with Sentinel: a primary, two replicas and three Sentinels as real processes; the
product is given only where the Sentinels are, and follows a failover without a restart."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import pytest
import redis
from rq.scheduler import RQScheduler

from approvals import store
from approvals.config import Settings
from approvals.models import Status
from approvals.ops import doctor
from approvals.ops.doctor import Level
from tests.conftest import CHANNEL
from tests.e2e import card_of, click, pause, tool_runs, wait_status
from tests.processes import (
    ROOT,
    bot_url,
    redis_binary,
    start_bot,
    start_worker,
    wait_for_workers,
    wait_until,
)
from tests.sentinels import Topology, restart_node, start_topology


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory):
    running = start_topology(redis_binary(), tmp_path_factory.mktemp("sentinel"))
    yield running
    running.stop()


def _fail_over(topology: Topology) -> None:
    """SIGKILL the primary, wait for its successor, and bring the old one back as a replica
    (so the next test again has a primary and two replicas)."""
    old = topology.kill_primary()
    topology.failover_done(old)
    restart_node(topology, old)
    topology.wait_ready(2)


def _eventually(action, what: str):
    """``action()`` once it stops failing: a command made while the Sentinels promote a
    replica fails (nothing answers as the primary yet), and the same client then succeeds."""

    def attempt():
        try:
            return (action(),)
        except redis.RedisError:
            return None

    return wait_until(attempt, 20, what, 0.05)[0]


def test_every_client_finds_the_primary_through_the_sentinels_and_follows_a_failover(
    topology, tmp_path
):
    """The store's client, ``approvals api``'s asyncio client, RQ's scheduler (which rebuilds
    its connection from the worker's) and the CLI, given only the Sentinels: each reaches the
    primary, and after the primary is killed each reaches the new one, the same client
    objects, nothing rebuilt; what was written (and acknowledged by a replica) is there."""
    env = topology.env(db=1)
    settings = Settings.from_env(env)
    conn = store.connection.connect(settings)
    scheduler = RQScheduler(["approvals"], connection=conn).connection
    conn.set("before", "kept")
    assert conn.wait(2, 2000) == 2
    assert scheduler.get("before") == b"kept"
    old_port = topology.primary_port()

    async def async_client_reads(client) -> bytes | None:
        return await client.get("before")

    aconn = store.connection.connect_async(settings, max_connections=10, socket_timeout=5)
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(async_client_reads(aconn)) == b"kept"

        _fail_over(topology)

        assert topology.primary_port() != old_port
        assert _eventually(lambda: conn.get("before"), "the store's client") == b"kept"
        assert _eventually(lambda: conn.set("after", "new"), "a write on the new primary")
        assert _eventually(lambda: scheduler.get("after"), "RQ's scheduler") == b"new"

        def async_read() -> bytes | None:
            return loop.run_until_complete(async_client_reads(aconn))

        assert _eventually(async_read, "the api's client") == b"kept"
        loop.run_until_complete(aconn.aclose())
    finally:
        loop.close()
        conn.close()

    cli = subprocess.run(
        [sys.executable, "-m", "approvals", "pending"],
        env={**_plain_env(), **env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    # REDIS_URL's host and port point nowhere: the answer came from the new primary.
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout == "Nothing is waiting for approval.\n"


def _plain_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "APPROVALS_"))}


def test_doctor_reports_the_primary_its_replicas_and_the_sentinels(topology):
    """``approvals doctor`` through the Sentinels: where the primary is, each replica with its
    lag and persistence, the Sentinels in agreement; a minimum of replicas that cannot be met
    fails."""
    settings = Settings.from_env({**topology.env(db=1), "APPROVALS_MIN_REPLICAS": "2"})
    conn = store.connection.connect(settings, timeout=5, connect_timeout=5)
    try:
        redis_check = doctor.check_redis(conn, settings)
        assert redis_check.level is Level.OK
        assert "the primary of 'approvals' (Sentinels 127.0.0.1:" in redis_check.message
        replication = doctor.check_replication(conn, settings)
        assert replication.level is Level.OK, replication.message
        assert replication.message.startswith("2 replica(s): 127.0.0.1:")
        assert replication.message.count("online, lag") == 2
        assert replication.message.count("AOF on") == 2
        sentinels = doctor.check_sentinels(settings)
        assert sentinels.level is Level.OK, sentinels.message
        primary = f"127.0.0.1:{topology.primary_port()}"
        assert sentinels.message == (
            f"3 of 3 Sentinels agree: the primary of 'approvals' is {primary}"
        )
        assert doctor.check_persistence(conn).level is Level.OK

        too_many = Settings.from_env({**topology.env(db=1), "APPROVALS_MIN_REPLICAS": "3"})
        refused = doctor.check_replication(conn, too_many)
        assert refused.level is Level.FAIL
        assert "APPROVALS_MIN_REPLICAS is 3: with 2 in sync" in refused.message
    finally:
        conn.close()

    nowhere = Settings.from_env(
        {**topology.env(db=1), "REDIS_SENTINELS": "127.0.0.1:9,127.0.0.1:9"}
    )
    assert doctor.check_sentinels(nowhere).level is Level.FAIL


def test_the_primary_killed_while_agents_pause_and_people_click_loses_nothing(
    topology, env, slack, tmp_path, monkeypatch
):
    """The bot and a worker given only the Sentinels, with ``APPROVALS_MIN_REPLICAS=1``;
    agents pause and people approve while the primary is SIGKILLed. Every pause an agent was
    told about is still there, every approved tool ran once, every card exists once, and the
    service answered on the new primary with no process restarted."""
    values = {**topology.env(db=2), "APPROVALS_MIN_REPLICAS": "1"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    env = {**env, **values}
    settings = Settings.from_env(env)
    conn = store.connection.connect(settings)
    conn.flushdb()
    bot = start_bot(env, tmp_path / "bot.log")
    worker = start_worker(env, tmp_path / "worker.log", f"failover-{time.time_ns()}")
    told: list[str] = []  # pauses the agent was told about
    refused: list[str] = []  # what the agents were told instead, while there was no primary
    stop = threading.Event()
    try:
        url = bot_url(bot)
        wait_for_workers(env, [worker], 1)
        pids = (bot.popen.pid, worker.popen.pid)

        def agents_and_people() -> None:
            """Pause, then approve the one before, over and over (errors are what people and
            agents would see, and they try again)."""
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    told.append(pause(arguments={"path": f"p{n}"}))
                except Exception as exc:
                    refused.append(f"{type(exc).__name__}: {exc}")
                if len(told) >= 2:
                    click(slack, url, "approve", told[-2], "UALICE")

        before = 4
        loop = threading.Thread(target=agents_and_people, daemon=True)
        loop.start()
        wait_until(lambda: len(told) >= before, 30, "pauses before the failover")
        old = topology.kill_primary()
        new = topology.failover_done(old)
        after = len(told)
        wait_until(lambda: len(told) >= after + 3, 30, "pauses on the new primary")
        stop.set()
        loop.join(60)

        # People retry what did not count (or was never clicked), until each is decided.
        for approval_id in told:
            card = card_of(slack, approval_id)
            if store.records.load(conn, approval_id).status is Status.PENDING:
                click(slack, url, "approve", approval_id, "UALICE", card.ts)
            wait_until(
                lambda a=approval_id, c=card: _approved_or_retried(conn, slack, url, a, c),
                30,
                f"{approval_id} to be approved",
            )
        # A resume job the failover caught mid-run is found abandoned by RQ's own check, which
        # waits about a minute past the job's heartbeat (fixed in RQ), then it runs again.
        for approval_id in told:
            wait_status(conn, approval_id, Status.COMPLETED, timeout=150)

        paths = sorted(r["arguments"]["path"] for r in tool_runs(env))
        assert len(paths) == len(set(paths)) == len(told), "every approved tool ran once"
        cards = [m for m in slack.messages(CHANNEL) if m.thread_ts is None]
        for approval_id in told:
            assert sum(approval_id in str(m.blocks) for m in cards) == 1, approval_id
        assert (bot.popen.pid, worker.popen.pid) == pids
        assert bot.popen.poll() is None and worker.popen.poll() is None
        assert topology.primary_port() == new.port != old.port
        assert len(told) >= before + 3
    finally:
        stop.set()
        bot.stop()
        worker.stop()
        conn.close()
        restart_node(topology, old) if "old" in locals() else None


def _approved_or_retried(conn, slack, url, approval_id, card) -> bool:
    """Whether the approval left pending; if not, click again (what a person would do)."""
    if store.records.load(conn, approval_id).status is not Status.PENDING:
        return True
    click(slack, url, "approve", approval_id, "UALICE", card.ts)
    return False
