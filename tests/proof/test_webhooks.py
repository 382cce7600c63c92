"""Webhooks: every state change reaches a real receiver, signed per Standard Webhooks (checked
with the ``standardwebhooks`` package's own verifier), retried with one id through failures."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner
from rq.job import Job
from rq.serializers import JSONSerializer
from standardwebhooks.webhooks import Webhook

from approvals import run_agent, store
from approvals.cli.main import cli
from approvals.config import Settings
from approvals.models import Policy, Status
from approvals.ops.doctor import Level, check_webhooks
from approvals.proof import webhooks
from approvals.store import queue
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path
from tests.e2e import card_of, click, wait_status
from tests.factories import make_approval
from tests.processes import bot_url, start_bot, start_worker, stop_all, wait_for_workers, wait_until

SECRET = "whsec_" + base64.b64encode(b"a test secret of 24 bytes").decode()


class Receiver:
    """An HTTP receiver that answers 500 to its first ``failures`` requests, then 204."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requests: list[tuple[int, dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver.lock:
                    status = 500 if len(receiver.requests) < receiver.failures else 204
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    receiver.requests.append((status, headers, body))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivered(self) -> dict[str, dict[str, object]]:
        """Verified bodies of the answered deliveries, by type."""
        found = {}
        for status, headers, body in list(self.requests):
            if status == 204:
                event = Webhook(SECRET).verify(body, headers)
                found[event["type"] + ":" + event["data"]["status"]] = event
        return found


@pytest.fixture
def hooked(env, tmp_path, monkeypatch):
    """A bot and a worker posting webhooks to a receiver whose first two answers fail."""
    receiver = Receiver(failures=2)
    hook_env = {"APPROVALS_WEBHOOK_URLS": receiver.url, "APPROVALS_WEBHOOK_SECRET": SECRET}
    for name, value in hook_env.items():
        monkeypatch.setenv(name, value)
    run_env = {**env, **hook_env}
    bot = start_bot(run_env, tmp_path / "bot.log")
    worker = start_worker(run_env, tmp_path / "worker.log", f"w-hooks-{os.getpid()}")
    try:
        url = bot_url(bot)
        wait_for_workers(run_env, [worker], 1)
        yield url, receiver
    finally:
        stop_all([bot, worker])
        receiver.server.shutdown()
        receiver.server.server_close()


def test_every_state_change_is_delivered_signed_and_retried_with_one_id(hooked, slack, conn):
    """paused, decided, running, completed arrive verified; failed attempts come again with
    the same id and body, and each event is answered once."""
    bot, receiver = hooked
    prompt = script(calls(("delete_path", {"path": "a"})), say("done"))
    pause_id = run_agent("scripted", prompt, tools=[delete_path], agent="hooked").pause_id
    click(slack, bot, "approve", pause_id, "UALICE", card_of(slack, pause_id).ts)
    wait_status(conn, pause_id, Status.COMPLETED)
    wanted = {
        "approval.paused:pending",
        "approval.decided:approved",
        "approval.running:running",
        "approval.completed:completed",
    }
    wait_until(lambda: wanted <= set(receiver.delivered()), 30, "every event to be delivered")
    delivered = receiver.delivered()
    decided = delivered["approval.decided:approved"]["data"]
    assert decided == {
        "id": pause_id,
        "status": "approved",
        "agent": "hooked",
        "tool": "delete_path",
        "decision": "approve",
        "receipt": None,  # this bot holds no signing key
    }
    attempts: dict[str, list[tuple[int, bytes]]] = {}
    for status, headers, body in receiver.requests:
        attempts.setdefault(headers["webhook-id"], []).append((status, body))
    assert len(attempts) == len(receiver.delivered()) == 4
    for tries in attempts.values():
        assert [s for s, _ in tries].count(204) == 1  # answered once
        assert len({b for _, b in tries}) == 1  # the same body on every retry
    first_status, first_headers, _ = receiver.requests[0]
    assert first_status == 500
    assert attempts[first_headers["webhook-id"]][-1][0] == 204  # retried, with the same id
    assert store.outbox.webhooks_failing(conn) == {}  # it answered since


def test_a_tampered_body_fails_the_receivers_verification(hooked, slack, conn):
    """The signature covers id, timestamp and body: one changed byte and verification fails."""
    _, receiver = hooked
    run_agent("scripted", script(calls(("delete_path", {"path": "a"}))), tools=[delete_path])
    wait_until(lambda: receiver.delivered(), 30, "the paused event")
    _, headers, body = next(r for r in receiver.requests if r[0] == 204)
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(SECRET).verify(body.replace(b"pending", b"approved"), headers)


def test_approvals_doctor_names_a_receiver_failing_for_a_day(env, conn, monkeypatch):
    """`approvals doctor --json`: the webhooks check warns, naming the receiver (its query
    string, where a token may hide, left out), and the command exits 2 (warnings)."""
    monkeypatch.setenv("APPROVALS_WEBHOOK_URLS", "http://hooks.test/in?token=s3cret")
    monkeypatch.setenv("APPROVALS_WEBHOOK_SECRET", SECRET)
    conn.hset(
        store.keys.WEBHOOK_FAILING_KEY,
        "http://hooks.test/in?token=s3cret",
        repr(time.time() - 90_000),
    )
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    [check] = [c for c in json.loads(result.output)["checks"] if c["name"] == "webhooks"]
    assert check["level"] == "warn" and "http://hooks.test/in" in check["message"]
    assert "s3cret" not in result.output
    assert result.exit_code == 2


def test_doctor_reports_a_receiver_failing_for_a_day(env, conn):
    """A receiver failing for more than a day is a warning; a recent failure is not yet."""
    settings = Settings.from_env(
        {**env, "APPROVALS_WEBHOOK_URLS": "http://x/h", "APPROVALS_WEBHOOK_SECRET": SECRET}
    )
    assert check_webhooks(conn, settings).level is Level.OK
    store.outbox.webhook_failed(conn, "http://x/h")
    assert check_webhooks(conn, settings).level is Level.OK
    conn.hset(store.keys.WEBHOOK_FAILING_KEY, "http://x/h", repr(time.time() - 90_000))
    found = check_webhooks(conn, settings)
    assert found.level is Level.WARN
    assert "http://x/h" in found.message and "a day" in found.message


def test_the_body_follows_the_contract(env, conn):
    """type, ISO-8601 timestamp and the six data fields, from an outbox entry."""
    event = {
        "id": "msg_1",
        "approval_id": "nope",
        "event": "resume_finished",
        "status": "failed",
        "at": "1700000000.5",
    }
    body = webhooks.body_of(conn, event)
    assert body["type"] == "approval.failed"
    assert body["timestamp"].startswith("2023-11-14T22:13:20")
    assert set(body["data"]) == {"id", "status", "agent", "tool", "decision", "receipt"}
    assert json.dumps(body)


def test_a_gates_own_webhook_receives_its_events(env, conn):
    """``requires_approval(webhook=...)``: that URL gets the approval's events too, signed."""
    receiver = Receiver(failures=0)
    try:
        settings = Settings.from_env({**env, "APPROVALS_WEBHOOK_SECRET": SECRET})
        approval = make_approval(policy=Policy(webhook=receiver.url))
        store.records.create(conn, approval, []).execute()
        assert webhooks.drain(conn, settings) == 1
        [job_id] = queue.get_queue(conn, settings).job_ids
        message_id, url = Job.fetch(job_id, connection=conn, serializer=JSONSerializer).args
        assert url == receiver.url
        assert webhooks.deliver(conn, settings, message_id, url) == "delivered (204)"
        assert webhooks.deliver(conn, settings, message_id, "http://elsewhere/") == (
            "not configured"
        )
        [(_, headers, body)] = receiver.requests
        assert Webhook(SECRET).verify(body, headers)["data"]["id"] == approval.id
        assert headers["webhook-id"] == message_id
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


def test_an_escalation_reaches_the_webhooks_as_approval_escalated(env, conn):
    """The escalation job audits "escalated"; the outbox turns it into its contract type."""
    approval = make_approval(id="esc1")
    store.records.create(conn, approval, []).execute()
    store.audit.append(conn, approval.id, "escalated", "system", to=["C0ESC"])
    events = [json.loads(raw) for raw in conn.lrange(store.keys.EVENTS_KEY, 0, -1)]
    escalated = [e for e in events if e["event"] == "escalated"]
    assert len(escalated) == 1
    body = webhooks.body_of(conn, escalated[0])
    assert body["type"] == "approval.escalated" and body["data"]["id"] == "esc1"


def test_a_burst_of_pauses_is_worked_off_in_one_look(env, conn):
    """A flood of state changes does not sit in the outbox: one look takes a whole batch, turns
    each into one job per receiver, and leaves nothing taken behind."""
    settings = Settings.from_env(
        {**env, "APPROVALS_WEBHOOK_SECRET": SECRET, "APPROVALS_WEBHOOK_URLS": "http://r.test/"}
    )
    for i in range(250):
        store.records.create(conn, make_approval(id=f"burst{i}"), []).execute()
    assert conn.llen(store.keys.EVENTS_KEY) == 250
    assert webhooks.drain(conn, settings) == 250
    assert conn.llen(store.keys.EVENTS_KEY) == 0 and conn.llen(store.keys.EVENTS_TAKING_KEY) == 0
    assert len(queue.get_queue(conn, settings).job_ids) == 250
    assert webhooks.drain(conn, settings, limit=100) == 0
