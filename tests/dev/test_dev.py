"""``approvals dev`` and ``approvals demo`` as a user runs them: real processes, real Redis,
the real bot and worker, clicks through the sandbox's page API (the browser tests click the
same API through Chromium)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import redis
from rq import Worker

from approvals import store, verify_receipt
from approvals.config import Settings
from approvals.models import Status
from approvals.proof import keys
from tests.conftest import BOT_TOKEN, CHANNEL, SIGNING_SECRET, approvals_command, wait_until
from tests.dev.conftest import CLEAN_ENV, ROOT, alive, descendants, start_dev


def messages(dev) -> dict[str, str]:
    """Message ts -> its HTML, for every message in the channel."""
    found = {}
    for part in re.split(r'(?=<div class="msg[ "])', dev.state()["main"]):
        ts = re.search(r'data-ts="([\d.]+)"', part)
        if ts:
            found[ts.group(1)] = part
    return found


def card_of(dev, approval_id, timeout=10.0):
    """(ts, HTML) of the card with buttons for ``approval_id``, once it is posted."""

    def find():
        cards = messages(dev).items()
        return next(
            ((ts, html) for ts, html in cards if f'data-value="{approval_id}"' in html), None
        )

    return wait_until(find, timeout, f"the card of {approval_id}")


def card_showing(dev, ts, text, timeout=20.0):
    """The card's HTML once it shows ``text`` (the worker and bot redraw it)."""

    def shown():
        html = messages(dev).get(ts, "")
        return html if text in html else None

    return wait_until(shown, timeout, f"the card to show {text!r}")


def approve(dev, approval_id, ts):
    action = {
        "action_id": "approval_approve",
        "block_id": f"decide-{approval_id}",
        "value": approval_id,
    }
    container = {"type": "message", "channel": dev.info["channel"], "ts": ts}
    assert dev.post("click", {"container": container, "action": action}) == {
        "ok": True,
        "error": None,
    }


def build_folder(dev) -> Path:
    """The build folder of the latest demo run."""
    runs = sorted((dev.data_dir / "demo").iterdir(), key=lambda p: int(p.name))
    return runs[-1] / "build"


def test_the_demo_card_appears_at_once_and_approving_it_runs_the_tool(dev):
    """`approvals demo` pauses; its card is in the sandbox; a click deletes the file."""
    assert dev.info["redis_url"].startswith("unix://")
    approval_id = dev.demo()
    began = time.monotonic()
    ts, html = card_of(dev, approval_id, timeout=5)
    print(f"the card was on the page {time.monotonic() - began:.2f}s after the demo returned")
    build = build_folder(dev)
    assert f"Delete {build}/app.o" in html and "demo-cleanup" in html and "@teammate" in html

    approve(dev, approval_id, ts)
    answer = f"Done: deleted {build}/app.o."
    thread = wait_until(
        lambda: answer in (t := dev.state(thread=ts)["thread"]) and t, 20, "the final answer"
    )
    assert "Approved by" in thread
    html = card_showing(dev, ts, "Completed")
    # Two replies: who approved, then what the tool returned with the final answer.
    assert "data-action-id" not in html and "2 replies" in html
    assert not (build / "app.o").exists() and (build / "util.o").exists()


def test_a_second_approvals_dev_on_the_same_data_is_refused(dev):
    done = subprocess.run(
        approvals_command("dev", "--port", "0", "--data-dir", str(dev.data_dir)),
        env={**os.environ, **dev.env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    owner = f"another approvals dev (pid {dev.process.popen.pid}) owns {dev.data_dir.resolve()}"
    assert owner in done.stderr


def test_crashed_children_are_reported_and_restarted(dev):
    """Kill the worker and the bot: both come back (the bot on a new port), and cards work."""
    ready_before = dev.output().count("ready. Open")
    children = descendants(dev.process.popen.pid)
    worker = next(p for p, cmd in children.items() if " approvals worker" in cmd)
    bot = next(p for p, cmd in children.items() if " approvals bot" in cmd)
    os.kill(worker, signal.SIGKILL)
    os.kill(bot, signal.SIGKILL)
    wait_until(lambda: "worker exited with code -9" in dev.output(), 10, "the worker's report")
    wait_until(lambda: "bot exited with code -9" in dev.output(), 10, "the bot's report")
    wait_until(
        lambda: dev.output().count("ready. Open") > ready_before, 30, "the bot to listen again"
    )
    approval_id = dev.run_demo()
    ts, _ = card_of(dev, approval_id, timeout=20)
    approve(dev, approval_id, ts)
    card_showing(dev, ts, "Completed")


def test_its_env_file_is_what_a_second_terminal_needs_and_doctor_passes_with_it(dev):
    """``set -a; . .approvals/env`` in a clean shell, then ``approvals doctor``: every check
    passes against the running stack (it once failed on ``SLACK_BOT_TOKEN is not set``)."""
    env_file = dev.data_dir / "env"
    assert f"need this environment, from {env_file}" in dev.output()
    assert "the worker imports tools from approvals.dev.demo (more: --tools MODULE)" in (
        dev.output()
    )
    assert env_file.stat().st_mode & 0o077 == 0  # the sandbox's tokens are yours only
    doctor = shlex.join(approvals_command("doctor"))
    done = subprocess.run(
        ["bash", "-c", f"set -a; . {shlex.quote(str(env_file))}; set +a; {doctor}"],
        env={**os.environ, **CLEAN_ENV, "LLM_USER_PATH": dev.env["LLM_USER_PATH"]},
        cwd=dev.data_dir.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    checks = dict(line.split(maxsplit=2)[1::-1] for line in done.stdout.splitlines())
    assert set(checks.values()) == {"ok"}, done.stdout
    assert {"redis", "workers", "slack", "channel"} <= set(checks)


def test_a_pause_survives_kill_9_and_ctrl_c_stops_everything(tmp_path):
    """SIGKILL of approvals dev leaves no process behind and loses no pause (AOF); the next
    start shows the same card, which still works; Ctrl-C then stops everything cleanly."""
    data = tmp_path / "data"
    first = start_dev(data, tmp_path / "first.log")
    approval_id = first.run_demo()
    card_of(first, approval_id)
    children = descendants(first.process.popen.pid)
    assert sum(1 for cmd in children.values() if "redis-server" in cmd) == 1
    first.stop(signal.SIGKILL)
    wait_until(lambda: not [p for p in children if alive(p)], 15, "every child to stop")

    second = start_dev(data, tmp_path / "second.log")
    try:
        listed = subprocess.run(
            approvals_command("pending"),
            env={**os.environ, "REDIS_URL": second.info["redis_url"], "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert approval_id in listed.stdout
        ts, html = card_of(second, approval_id)
        assert "Waiting for a decision" in html
        approve(second, approval_id, ts)
        card_showing(second, ts, "Completed")
        assert not (build_folder(second) / "app.o").exists()
        socket = Path(second.info["redis_url"].removeprefix("unix://").split("?")[0])
        children = descendants(second.process.popen.pid)
    finally:
        second.stop(signal.SIGINT)
    assert second.process.popen.returncode == 0
    assert second.output().rstrip().endswith("approvals dev: stopped")
    assert not socket.exists() and not (data / "dev.json").exists()
    assert not (data / "env").exists()  # its tokens died with the sandbox
    assert not [pid for pid in children if alive(pid)]


def test_with_redis_url_and_slack_tokens_set_it_uses_them(tmp_path, redis_server, slack):
    """No Redis of its own and no sandbox: the bot talks to the configured Web API (here the
    tests' Slack stand-in) and the card lands in that workspace's channel."""
    url = redis_server.new_db()
    extra = {
        "REDIS_URL": url,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.base_url,
        "APPROVALS_CHANNEL": CHANNEL,
    }
    listening = r"\[bot\] approvals bot listening on"
    dev = start_dev(tmp_path / "data", tmp_path / "dev.log", extra, ready=listening)
    try:
        assert f"approvals dev: using REDIS_URL={url}" in dev.output()
        assert "connecting to your Slack workspace (HTTP on port 0)" in dev.output()
        assert "Slack sandbox" not in dev.output() and not (tmp_path / "data" / "redis").exists()
        # gunicorn says it listens before its worker builds the app (which calls auth.test).
        slack.wait_for(lambda: slack.calls("auth.test"), 30)
        conn = redis.Redis.from_url(url)
        wait_until(lambda: Worker.all(connection=conn), 30, "the worker to use that Redis")
        done = subprocess.run(
            approvals_command("demo", "--data-dir", str(dev.data_dir)),
            env={**os.environ, **dev.env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "its card at your Slack channel" in done.stdout
        approval_id = re.search(r"approval ([0-9a-f]{16})", done.stdout).group(1)
        assert store.records.load(conn, approval_id).status is Status.PENDING
        card = slack.wait_for(lambda: slack.messages(CHANNEL), 10)[0]
        assert card.blocks[0]["text"]["text"] == "Approval needed: delete_path"
        conn.close()
    finally:
        dev.stop()


def test_with_a_signing_key_the_worker_runs_and_the_decision_is_signed(tmp_path):
    """APPROVALS_SIGNING_KEY set: the bot gets it and the worker does not, so the worker
    starts once and stays up, and the approved call carries a receipt that verifies."""
    key = str(tmp_path / "signing.pem")
    keys.generate_key(key)
    dev = start_dev(tmp_path / "data", tmp_path / "dev.log", {"APPROVALS_SIGNING_KEY": key})
    try:
        approval_id = dev.demo()
        ts, _ = card_of(dev, approval_id)
        approve(dev, approval_id, ts)
        card_showing(dev, ts, "Completed")
        conn = redis.Redis.from_url(dev.info["redis_url"])
        approval = store.records.load(conn, approval_id)
        receipt = next(
            e["receipt"] for e in store.audit.audit_trail(conn, approval_id) if "receipt" in e
        )
        conn.close()
        claims = verify_receipt(
            receipt,
            tool="delete_path",
            arguments=approval.arguments,
            keys=keys.jwks(Settings(signing_key=key)),
        )
        assert claims.approval_id == approval_id
        assert "worker exited" not in dev.output()
    except BaseException:
        print(f"\n----- approvals dev -----\n{dev.output()[-8000:]}")
        raise
    finally:
        dev.stop()


def test_demo_without_approvals_dev_says_what_to_do(tmp_path):
    done = subprocess.run(
        approvals_command("demo", "--data-dir", str(tmp_path)),
        env={**os.environ, "REDIS_URL": "", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert f"approvals dev is not running with --data-dir {tmp_path}; start it" in done.stderr


def test_with_socket_mode_the_sandbox_talks_to_the_bot_over_its_websocket(tmp_path):
    """`approvals dev --socket-mode`: the bot dials the sandbox, and a click on the demo's card
    goes down that WebSocket: the tool runs and the card shows Completed; so do commands."""
    dev = start_dev(tmp_path / "data", tmp_path / "dev.log", args=("--socket-mode",))
    try:
        output = dev.output()
        assert "(the bot in Socket Mode)" in output
        assert "[bot] approvals bot connecting to Slack in Socket Mode" in output
        assert "listening on" not in output and dev.state()["bot"] is True
        approval_id = dev.demo()
        ts, _ = card_of(dev, approval_id)
        build = build_folder(dev)

        approve(dev, approval_id, ts)
        html = card_showing(dev, ts, "Completed")
        assert "data-action-id" not in html
        assert not (build / "app.o").exists() and (build / "util.o").exists()

        assert dev.post("send", {"text": "/agent-pending all"}) == {"ok": True, "error": None}
        main = wait_until(
            lambda: 'data-container="ephemeral"' in (m := dev.state()["main"]) and m,
            20,
            "the listing",
        )
        assert "Nothing is waiting" in main and "dispatch_failed" not in main
    except BaseException:
        print(f"\n----- approvals dev -----\n{dev.output()[-8000:]}")
        raise
    finally:
        dev.stop()


def test_the_terminal_says_each_thing_once_and_nothing_while_idle(tmp_path):
    """A pause and an approval in `approvals dev`'s terminal: no warning, none of RQ's idle or
    repeated lines (registry sweeps, pub/sub, "Job OK", result lifespans), one line per job,
    and no line twice."""
    dev = start_dev(tmp_path / "data", tmp_path / "dev.log")
    try:
        approval_id = dev.demo()
        ts, _ = card_of(dev, approval_id)
        approve(dev, approval_id, ts)
        card_showing(dev, ts, "Completed")
        resumed = f"approvals.worker.jobs.resume_approval('{approval_id}')"
        wait_until(lambda: resumed in dev.output(), 20, "the resume's line")
    finally:
        dev.stop()
    output = dev.output()
    assert "WARNING" not in output and "Warning" not in output, output
    for chatter in ("cleaning registries", "subscribing to channel", "Job OK", "result is kept"):
        assert chatter not in output, output
    for job in ("post_card", "resume_approval"):
        assert output.count(f"approvals.worker.jobs.{job}('{approval_id}')") == 1, output
    # What each line says while it runs, without its time: nothing is said twice. (Stopping is
    # RQ's own business: its maintenance may take the scheduler lock again while it drains.)
    running = output.split("approvals dev: stopping", 1)[0]
    said = [re.sub(r"^(\[\w+\] )?[\d-]+ [\d:,]+ ", r"\1", line) for line in running.splitlines()]
    repeated = {line for line in said if line.strip() and said.count(line) > 1}
    assert not repeated, output
