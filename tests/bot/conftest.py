"""``approvals bot`` in Socket Mode: the real process dials the Slack stand-in's WebSocket
through slack_sdk's ``SocketModeHandler``, next to a real ``approvals worker``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import Services
from tests.processes import start_bot, start_worker, stop_all, wait_for_workers
from tests.slack_standin import SlackStandIn


@dataclass
class SocketServices(Services):
    """The bot has no URL in Socket Mode: requests go through ``slack.deliver``."""

    connections_before: int = 0


@pytest.fixture
def socket_services(
    env: dict[str, str], slack: SlackStandIn, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[SocketServices]:
    """``approvals bot`` with ``SLACK_APP_TOKEN`` set and one ``approvals worker``, once the
    bot's WebSocket is open (its output is shown when the test fails)."""
    opened = slack.socket_mode.opened
    bot = start_bot({**env, "SLACK_APP_TOKEN": slack.app_token}, tmp_path / "bot.log")
    worker = start_worker(env, tmp_path / "worker.log", f"w-{os.getpid()}-{time.monotonic_ns()}")
    running = SocketServices(bot_url="", bot=bot, workers=[worker], connections_before=opened)
    try:
        slack.socket_mode.wait_for_connections(opened + 1, timeout=30)
        wait_for_workers(env, [worker], 1)
        yield running
    finally:
        stop_all([bot, worker, running.bot, *running.workers])
        failed = getattr(request.node, "rep_call", None)
        if failed is None or failed.failed:
            for process in (bot, worker):
                sys.stderr.write(f"\n----- {process.log.name} -----\n{process.output()[-6000:]}\n")
