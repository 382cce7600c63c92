"""`approvals bot` in HTTP mode on gunicorn: worker processes on one port, a dead one replaced,
SIGTERM waiting for the work in flight, /healthz, and access lines in the project's format."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from approvals.models import Status
from bench.harness import get
from tests.e2e import card_of, click, pause, tool_runs, wait_status
from tests.processes import bot_url, start_bot, start_worker, stop_all, wait_for_workers, wait_until


def _children(parent: int) -> set[int]:
    """The live processes the parent started (gunicorn's workers)."""
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


def _health(url: str) -> str:
    return url.rsplit("/slack/events", 1)[0] + "/healthz"


def _pause(path: str = "p") -> str:
    return pause("delete_path", {"path": path})


def test_two_workers_share_one_port_and_a_dead_one_is_replaced(env, slack, conn, tmp_path: Path):
    """SIGKILL one of two workers: the other keeps answering while gunicorn starts a new one;
    a click through them still decides, runs and shows its result; nothing outlives the bot."""
    bot = start_bot(env, tmp_path / "bot.log", args=("--workers", "2"))
    seen: set[int] = set()
    worker = start_worker(env, tmp_path / "worker.log", f"bp-{time.time_ns()}")
    try:
        url = bot_url(bot)
        parent = bot.popen.pid
        first = wait_until(lambda: len(_children(parent)) == 2 and _children(parent), 60, "2")
        seen |= first
        wait_for_workers(env, [worker], 1)

        victim, survivor = sorted(first)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: not _alive(victim), 10, "the killed worker to die")
        assert [get(_health(url)) for _ in range(20)] == [200] * 20
        second = wait_until(
            lambda: len(_children(parent) - {victim}) == 2 and _children(parent),
            60,
            "a replacement worker",
        )
        seen |= second
        assert survivor in second and victim not in second

        pause_id = _pause()
        card = card_of(slack, pause_id)
        status, _ = click(slack, url, "approve", pause_id, card_ts=card.ts)
        assert status == 200
        assert wait_status(conn, pause_id, Status.COMPLETED).decision.actor == "UALICE"
        assert len(tool_runs(env, "delete_path")) == 1
    finally:
        stop_all([bot, worker])
    assert seen and not any(_alive(pid) for pid in seen), "a worker outlived the bot"


def test_sigterm_waits_for_the_work_a_click_started(env, slack, conn, tmp_path: Path):
    """A click is answered, then the bot is told to stop while its work waits on a slow Slack:
    the process exits cleanly only once the decision is recorded and shown on the card."""
    bot = start_bot(env, tmp_path / "bot.log", args=("--workers", "1"))
    worker = start_worker(env, tmp_path / "worker.log", f"drain-{time.time_ns()}")
    try:
        url = bot_url(bot)
        wait_for_workers(env, [worker], 1)
        pause_id = _pause()
        card = card_of(slack, pause_id)
        updates_before = len(slack.calls("chat.update"))
        slack.delay_next("chat.update", 2.0)
        status, _ = click(slack, url, "approve", pause_id, card_ts=card.ts)
        assert status == 200
        bot.popen.send_signal(signal.SIGTERM)
        assert bot.popen.wait(30) == 0
        # Everything the click started happened before the process ended.
        updates = slack.calls("chat.update")[updates_before:]
        assert updates and updates[0]["args"]["ts"] == card.ts
        assert "UALICE" in json.dumps(updates[0]["args"])
        wait_status(conn, pause_id, Status.COMPLETED)
        assert len(tool_runs(env, "delete_path")) == 1
    finally:
        stop_all([bot, worker])


def test_healthz_and_access_lines_in_json(env, slack, tmp_path: Path):
    """/healthz answers 200; with APPROVALS_LOG_FORMAT=json every line the server writes,
    access lines included, is one JSON object."""
    bot = start_bot(env, tmp_path / "bot.log", {"APPROVALS_LOG_FORMAT": "json"}, ("--workers", "1"))
    try:
        url = bot_url(bot)
        assert get(_health(url)) == 200
        assert get(url.rsplit("/slack/events", 1)[0] + "/nowhere") == 404

        def access_lines() -> list[dict[str, str]]:
            lines = [json.loads(line) for line in bot.output().splitlines() if line.startswith("{")]
            return [line for line in lines if line["logger"] == "gunicorn.access"]

        lines = wait_until(lambda: len(access_lines()) >= 2 and access_lines(), 10, "access")
        assert '"GET /healthz HTTP/1.1" 200' in lines[0]["message"]
        assert '"GET /nowhere HTTP/1.1" 404' in lines[1]["message"]
    finally:
        bot.stop()
    for line in bot.output().splitlines():
        if line.startswith("approvals bot listening on "):
            continue
        assert line.startswith("{") and json.loads(line)["level"], line
