"""`approvals bot --processes N`: N bot processes answer on one port; one that dies is replaced."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from approvals import run_agent
from approvals.models import Status
from bench.harness import get
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.e2e import card_of, click, tool_runs, wait_status
from tests.processes import bot_url, start_bot, start_worker, wait_for_workers, wait_until


def _replicas(parent: int) -> set[int]:
    """The bot processes the parent supervises (its children that still run)."""
    children: set[int] = set()
    for task in os.listdir(f"/proc/{parent}/task"):
        with open(f"/proc/{parent}/task/{task}/children", encoding="ascii") as listed:
            children.update(int(pid) for pid in listed.read().split())
    return {pid for pid in children if _alive(pid)}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _listening_inodes(pid: int) -> set[str]:
    """The socket inodes a process holds open."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:"):
            inodes.add(target)
    return inodes


def test_two_bot_processes_share_one_port_and_a_dead_one_is_replaced(
    env, slack, conn, tmp_path: Path
):
    """Both replicas hold the one listening socket; SIGKILL one and the other keeps answering
    while a new one starts; a click through them still decides, runs and shows its result."""
    bot = start_bot(env, tmp_path / "bot.log", args=("--processes", "2"))
    seen: set[int] = set()
    worker = start_worker(env, tmp_path / "worker.log", f"bp-{time.time_ns()}")
    try:
        url = bot_url(bot)
        health = url.rsplit("/slack/events", 1)[0] + "/healthz"
        parent = bot.popen.pid
        first = wait_until(lambda: len(_replicas(parent)) == 2 and _replicas(parent), 60, "2 bots")
        seen |= first
        shared = set.intersection(*(_listening_inodes(pid) for pid in first))
        assert shared, "the replicas hold no socket in common"
        wait_for_workers(env, [worker], 1)

        victim, survivor = sorted(first)
        os.kill(victim, signal.SIGKILL)
        # A connection the victim took in the instant before it died is reset with it.
        wait_until(lambda: not _alive(victim), 10, "the killed replica to die")
        assert [get(health) for _ in range(20)] == [200] * 20  # the survivor answers at once
        second = wait_until(
            lambda: len(_replicas(parent) - {victim}) == 2 and _replicas(parent),
            60,
            "a replacement replica",
        )
        seen |= second
        assert survivor in second and victim not in second
        assert "bot-" in bot.output() and "exited with code" in bot.output()

        prompt = script(calls(("delete_path", {"path": "p"})), say("done"))
        pause_id = run_agent("scripted", prompt, tools=[delete_path]).pause_id
        card = card_of(slack, pause_id)
        status, _ = click(slack, url, "approve", pause_id, card_ts=card.ts)
        assert status == 200
        assert wait_status(conn, pause_id, Status.COMPLETED).decision.actor == "UALICE"
        assert len(tool_runs(env, "delete_path")) == 1
    finally:
        bot.stop()
        worker.stop()
    assert seen and not any(_alive(pid) for pid in seen), "a replica outlived the bot"
