"""``/metrics`` checked by Prometheus's own ``promtool check metrics``: a real scrape of the
bot's and a worker's, after a pause, a decision and a resume, has no error and no lint."""

from __future__ import annotations

import re
import subprocess
import urllib.request
from pathlib import Path

from approvals import run_agent
from approvals.models import Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.e2e import card_of, click, wait_status
from tests.outside import needed_tool
from tests.processes import Process, approvals_command, bot_url, start_bot, stop_all, wait_until


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


def _promtool(exposition: str) -> tuple[int, str]:
    """``promtool check metrics`` on an exposition: its exit code and all it said."""
    why = "promtool is missing (Debian's prometheus package ships it; .ci/run installs it)"
    promtool = needed_tool("promtool", why)
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=exposition, capture_output=True, text=True
    )
    return checked.returncode, (checked.stdout + checked.stderr).strip()


def test_promtool_finds_nothing_in_a_real_scrape_of_the_bot_and_a_worker(
    env, conn, slack, tmp_path: Path
):
    """After a pause, an approval and its resume, both scrape targets serve an exposition
    promtool accepts without a lint warning, and it counts what happened."""
    bot = start_bot(env, tmp_path / "bot.log")
    worker = Process(approvals_command("worker", "--metrics-port", "0"), env, tmp_path / "w.log")
    try:
        url = bot_url(bot)
        port = wait_until(
            lambda: re.search(r"metrics at http://0.0.0.0:(\d+)/metrics", worker.output()),
            30,
            "the worker's metrics port",
        ).group(1)
        prompt = script(calls(("delete_path", {"path": "a"})), say("done"))
        pause_id = run_agent("scripted", prompt, tools=[delete_path], agent="metered").pause_id
        assert pause_id is not None
        click(slack, url, "approve", pause_id, "UALICE", card_of(slack, pause_id).ts)
        wait_status(conn, pause_id, Status.COMPLETED)
        scrapes = {
            "bot": _scrape(url.removesuffix("/slack/events") + "/metrics"),
            "worker": _scrape(f"http://127.0.0.1:{port}/metrics"),
        }
    finally:
        stop_all([bot, worker])

    checked = {target: _promtool(exposition) for target, exposition in scrapes.items()}

    assert checked == {"bot": (0, ""), "worker": (0, "")}
    for exposition in scrapes.values():
        assert 'approvals_decisions_total{kind="approve"} 1.0' in exposition
        assert 'approvals_resumes_ended_total{outcome="completed"} 1.0' in exposition
        assert "approvals_slack_calls_total" in exposition
