"""The installed import names are approvals' own: an agent's folder may hold a ``worker.py``,
a ``bot.py`` and an ``api/`` of its own, and jobs queued before the move still run."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import redis
from rq import Queue
from rq.serializers import JSONSerializer

from approvals import store
from approvals.config import Settings
from approvals.decisions.review import decide
from approvals.models import DecisionKind, Status
from approvals.store import queue
from tests.e2e import approve_on_card, card_of, pause, tool_runs, wait_status
from tests.processes import (
    ROOT,
    approvals_command,
    bot_url,
    start_api,
    start_bot,
    start_worker,
    stop_all,
    wait_for_workers,
)

PROBE = (
    "import importlib.util as u; "
    "print(*[n for n in ('approvals', 'bot', 'worker', 'api') if u.find_spec(n)])"
)
SHADOW = "raise ImportError('the agent folder's own {name} was imported by approvals')\n"


def _agent_folder(tmp_path: Path) -> Path:
    """A folder such as a user's agent lives in, with the common names taken."""
    folder = tmp_path / "agent"
    (folder / "api").mkdir(parents=True)
    (folder / "worker.py").write_text(SHADOW.format(name="worker.py"))
    (folder / "bot.py").write_text(SHADOW.format(name="bot.py"))
    (folder / "api" / "__init__.py").write_text(SHADOW.format(name="api/"))
    return folder


def _pause(target: str) -> str:
    return pause("delete_path", {"path": target}, answer=f"done with {target}")


def test_the_distribution_installs_nothing_but_approvals(tmp_path: Path) -> None:
    """``pip install approvals`` claims one top-level import name, ``approvals``: from a
    folder of its own, Python finds no ``bot``, ``worker`` or ``api`` module."""
    top_level = importlib.metadata.distribution("approvals").read_text("top_level.txt") or ""
    assert top_level.split() == ["approvals"]
    found = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert found.stdout.split() == ["approvals"]


def test_bot_worker_api_and_cli_run_beside_a_users_worker_bot_and_api(env, slack, tmp_path):
    """From a folder holding its own ``worker.py``, ``bot.py`` and ``api/`` (first on the
    import path): the bot, a worker and the API start, the CLI answers, and an approved call
    runs its tool once."""
    folder = _agent_folder(tmp_path)
    bot = start_bot(env, tmp_path / "bot.log", cwd=folder)
    worker = start_worker(env, tmp_path / "worker.log", f"names-{tmp_path.name}", cwd=folder)
    api, _ = start_api(env, tmp_path / "api.log", cwd=folder)
    try:
        wait_for_workers(env, [worker], 1)
        approval_id = _pause("/tmp/beside-the-users-modules")
        approve_on_card(slack, bot_url(bot), approval_id)
        conn = redis.Redis.from_url(env["REDIS_URL"])
        wait_status(conn, approval_id, Status.COMPLETED)
        assert [r["arguments"]["path"] for r in tool_runs(env, "delete_path")] == [
            "/tmp/beside-the-users-modules"
        ]
        shown = subprocess.run(
            approvals_command("show", approval_id),
            cwd=folder,
            env={**env, "PYTHONPATH": f"{folder}:{ROOT}"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert approval_id in shown.stdout
    finally:
        stop_all([bot, worker, api])
    for process in (bot, worker, api):
        assert "was imported by approvals" not in process.output()


def test_a_resume_queued_under_the_old_job_path_still_runs(env, slack, conn, tmp_path):
    """A resume job an older version queued as ``worker.jobs.resume_approval`` is run by
    today's worker: the tool runs once and the card shows the result."""
    approval_id = _pause("/tmp/queued-before-the-upgrade")
    settings = Settings.from_env()
    decide(conn, settings, approval_id, DecisionKind.APPROVE, "UALICE")
    rq_queue = Queue(settings.queue, connection=conn, serializer=JSONSerializer)
    rq_queue.remove(f"resume-{approval_id}")
    conn.delete(f"rq:job:resume-{approval_id}")
    rq_queue.enqueue(
        "worker.jobs.resume_approval", approval_id, job_id=f"resume-{approval_id}"
    )  # as the version before the move wrote it
    assert queue.MOVED["worker.jobs."] == "approvals.worker.jobs."

    worker = start_worker(env, tmp_path / "worker.log", f"old-path-{tmp_path.name}")
    try:
        card_of(slack, approval_id)
        wait_status(conn, approval_id, Status.COMPLETED)
    finally:
        worker.stop()
    assert len(tool_runs(env, "delete_path")) == 1
    assert store.records.load(conn, approval_id).status is Status.COMPLETED
    assert sys.modules.get("worker") is None
