"""The sandbox over real HTTP: Slack's rules for triggers and response URLs, what it signs and
sends to the bot, how it applies the bot's answers, its page API's guards, and persistence.

The bot here is a small recording HTTP server, so each answer can be chosen; the real bot is
driven through the sandbox in ``test_dev.py`` and ``test_browser.py``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.webhook import WebhookClient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from approvals.dev.sandbox import workspace
from approvals.dev.sandbox.server import Sandbox
from tests.processes import wait_until

CHANNEL = "C0APPROVALS"
ME, MATE = "U0DEV", "U0MATE"
BUTTON = {
    "type": "actions",
    "block_id": "decide-1",
    "elements": [
        {
            "type": "button",
            "action_id": "approval_approve",
            "value": "id1",
            "text": {"type": "plain_text", "text": "Approve"},
        }
    ],
}
MODAL = {
    "type": "modal",
    "callback_id": "cb",
    "private_metadata": "id1",
    "title": {"type": "plain_text", "text": "Edit"},
    "submit": {"type": "plain_text", "text": "Approve"},
    "blocks": [],
}


class FakeBot:
    """Records signed requests; answers each with the next queued (status, body)."""

    def __init__(self, secret: str) -> None:
        self.verifier = SignatureVerifier(secret)
        self.requests: list[dict] = []
        self.answers: list[tuple[int, str]] = []
        bot = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                bot.requests.append(
                    {
                        "valid": bot.verifier.is_valid_request(body, dict(self.headers)),
                        "body": body,
                        "type": self.headers["Content-Type"],
                    }
                )
                status, answer = bot.answers.pop(0) if bot.answers else (200, "")
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/slack/events"

    def payload(self, n: int = -1) -> dict:
        return json.loads(parse_qs(self.requests[n]["body"])["payload"][0])

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sandbox(tmp_path):
    box = Sandbox(
        channel=CHANNEL,
        channel_name="approvals",
        users={ME: "dev", MATE: "mate"},
        state_file=tmp_path / "sandbox.json",
    ).start(port=0)
    yield box
    box.stop()


@pytest.fixture
def bot(sandbox):
    fake = FakeBot(sandbox.signing_secret)
    sandbox.set_bot_url(fake.url)
    yield fake
    fake.stop()


@pytest.fixture
def client(sandbox):
    return WebClient(token=sandbox.token, base_url=sandbox.api_url)


def page_post(sandbox, path, body, headers=None):
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        sandbox.url.rstrip("/") + path,
        data=data,
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def state(sandbox, user=ME, since=-1, **params):
    query = "&".join(f"{k}={v}" for k, v in {"user": user, "since": since, **params}.items())
    with urllib.request.urlopen(f"{sandbox.url}sandbox/state?{query}", timeout=30) as response:
        return json.loads(response.read())


def click(sandbox, container, user=ME):
    action = {"action_id": "approval_approve", "block_id": "decide-1", "value": "id1"}
    return page_post(
        sandbox, "/sandbox/click", {"user": user, "container": container, "action": action}
    )


def test_a_click_sends_the_signed_payload_slack_would_send(sandbox, bot, client):
    """The clicked message as it is now, a response URL, a fresh trigger, the person's name."""
    posted = client.chat_postMessage(channel=CHANNEL, text="card", blocks=[BUTTON])
    status, answer = click(sandbox, {"type": "message", "channel": CHANNEL, "ts": posted["ts"]})
    assert (status, answer) == (200, {"ok": True, "error": None})
    request = bot.requests[-1]
    assert request["valid"] and request["type"] == "application/x-www-form-urlencoded"
    payload = bot.payload()
    assert payload["type"] == "block_actions"
    assert payload["user"] == {"id": ME, "username": "dev", "name": "dev", "team_id": "T0001"}
    assert payload["container"] == {
        "type": "message",
        "message_ts": posted["ts"],
        "channel_id": CHANNEL,
        "is_ephemeral": False,
    }
    assert payload["message"]["blocks"] == [BUTTON] and payload["message"]["ts"] == posted["ts"]
    assert payload["actions"][0]["action_id"] == "approval_approve"
    assert payload["actions"][0]["block_id"] == "decide-1"
    assert payload["response_url"].startswith(sandbox.url + "response/")
    # The trigger opens exactly one modal, for the person who clicked.
    client.views_open(trigger_id=payload["trigger_id"], view=MODAL)
    assert "Edit" in state(sandbox)["modal"]["html"]
    assert state(sandbox, user=MATE)["modal"] is None
    with pytest.raises(SlackApiError, match="invalid_trigger_id"):
        client.views_open(trigger_id=payload["trigger_id"], view=MODAL)


def test_triggers_expire_after_three_seconds_and_unknown_ones_are_refused(
    sandbox, client, monkeypatch
):
    with pytest.raises(SlackApiError, match="invalid_trigger_id"):
        client.views_open(trigger_id="111.222.abc", view=MODAL)
    monkeypatch.setattr(workspace, "TRIGGER_SECONDS", 0.0)
    trigger = sandbox.workspace.issue_trigger(ME)
    time.sleep(0.01)  # the trigger's whole lifetime here
    with pytest.raises(SlackApiError, match="expired_trigger_id"):
        client.views_open(trigger_id=trigger, view=MODAL)


def test_response_url_answers_land_where_slack_puts_them(sandbox, bot, client):
    """A new answer is ephemeral; in_channel is public; replace/delete act on the origin."""
    posted = client.chat_postMessage(channel=CHANNEL, text="card", blocks=[BUTTON])
    click(sandbox, {"type": "message", "channel": CHANNEL, "ts": posted["ts"]})
    url = bot.payload()["response_url"]
    WebhookClient(url).send(text="only you see this")
    mine = state(sandbox)["main"]
    assert "Only visible to you" in mine and "only you see this" in mine
    assert "only you see this" not in state(sandbox, user=MATE)["main"]

    WebhookClient(url).send(text="for everyone", response_type="in_channel")
    assert "for everyone" in state(sandbox, user=MATE)["main"]

    WebhookClient(url).send(text="replaced card", replace_original=True)
    assert sandbox.workspace.message(CHANNEL, posted["ts"]).text == "replaced card"

    ephemeral_id = sandbox.workspace.snapshot(ME).ephemerals[0].id
    click(sandbox, {"type": "ephemeral", "id": ephemeral_id})
    payload = bot.payload()
    assert payload["container"]["is_ephemeral"] is True and "message" not in payload
    WebhookClient(payload["response_url"]).send(text="now changed", replace_original=True)
    assert "now changed" in state(sandbox)["main"]
    WebhookClient(payload["response_url"]).send(text="", delete_original=True)
    assert "now changed" not in state(sandbox)["main"]


def test_buttons_on_the_home_tab_carry_the_view_and_no_response_url(sandbox, bot, client):
    page_post(sandbox, "/sandbox/home", {"user": ME})
    event = json.loads(bot.requests[-1]["body"])
    assert bot.requests[-1]["valid"] and event["event"]["type"] == "app_home_opened"
    assert event["event"]["user"] == ME
    home = client.views_publish(user_id=ME, view={"type": "home", "blocks": [BUTTON]})["view"]
    assert 'data-action-id="approval_approve"' in state(sandbox, tab="home")["main"]
    click(sandbox, {"type": "view", "view_id": home["id"]})
    payload = bot.payload()
    assert payload["container"] == {"type": "view", "view_id": home["id"]}
    assert payload["view"]["blocks"] == [BUTTON] and "response_url" not in payload


def test_modal_submissions_follow_the_bots_answer(sandbox, bot, client):
    """errors: shown with what was typed; update: replaced; empty 200: closed; 500: a notice."""
    trigger = sandbox.workspace.issue_trigger(ME)
    view = {
        **MODAL,
        "blocks": [
            {
                "type": "input",
                "block_id": "arg-path",
                "label": {"type": "plain_text", "text": "path"},
                "element": {"type": "plain_text_input", "action_id": "value"},
            }
        ],
    }
    client.views_open(trigger_id=trigger, view=view)
    values = {"arg-path": {"value": {"type": "plain_text_input", "value": "/etc"}}}

    bot.answers.append(
        (200, json.dumps({"response_action": "errors", "errors": {"arg-path": "No."}}))
    )
    page_post(sandbox, "/sandbox/submit", {"user": ME, "values": values})
    submitted = json.loads(parse_qs(bot.requests[-1]["body"])["payload"][0])
    assert submitted["type"] == "view_submission" and bot.requests[-1]["valid"]
    assert submitted["view"]["private_metadata"] == "id1"
    assert submitted["view"]["state"]["values"] == values
    modal = state(sandbox)["modal"]["html"]
    assert '<div class="bk-error">No.</div>' in modal and 'value="/etc"' in modal

    bot.answers.append((500, "boom"))
    _status, answer = page_post(sandbox, "/sandbox/submit", {"user": ME, "values": values})
    assert answer["ok"] is False and "HTTP 500" in answer["error"]
    assert "We had some trouble connecting" in state(sandbox)["modal"]["html"]

    notice = {**MODAL, "title": {"type": "plain_text", "text": "Done"}, "submit": None}
    bot.answers.append((200, json.dumps({"response_action": "update", "view": notice})))
    page_post(sandbox, "/sandbox/submit", {"user": ME, "values": values})
    assert "Done" in state(sandbox)["modal"]["html"]

    bot.answers.append((200, ""))
    page_post(sandbox, "/sandbox/submit", {"user": ME, "values": {}})
    assert state(sandbox)["modal"] is None


def test_the_composer_sends_slash_commands_and_posts_messages(sandbox, bot):
    page_post(sandbox, "/sandbox/send", {"user": ME, "channel": CHANNEL, "text": "hello *team*"})
    assert "hello <strong>team</strong>" in state(sandbox, user=MATE)["main"]
    assert bot.requests == []  # the bot subscribes to no message events

    page_post(
        sandbox, "/sandbox/send", {"user": ME, "channel": CHANNEL, "text": "/agent-pending mine"}
    )
    form = parse_qs(bot.requests[-1]["body"])
    assert bot.requests[-1]["valid"]
    assert (form["command"], form["text"], form["user_name"]) == (
        ["/agent-pending"],
        ["mine"],
        ["dev"],
    )
    WebhookClient(form["response_url"][0]).send(text="3 waiting", response_type="ephemeral")
    assert "3 waiting" in state(sandbox)["main"]

    bot.answers.append((404, "no listener"))
    _status, answer = page_post(
        sandbox, "/sandbox/send", {"user": ME, "channel": CHANNEL, "text": "/nope"}
    )
    assert answer["ok"] is False
    assert '/nope failed with the error "dispatch_failed"' in state(sandbox)["main"]


def test_a_bot_that_is_down_is_reported_not_fatal(sandbox, client):
    sandbox.set_bot_url(None)
    assert state(sandbox)["bot"] is False
    posted = client.chat_postMessage(channel=CHANNEL, text="card", blocks=[BUTTON])
    status, answer = click(sandbox, {"type": "message", "channel": CHANNEL, "ts": posted["ts"]})
    assert status == 200 and answer == {
        "ok": False,
        "error": "HTTP 503: the bot is not running yet",
    }
    sandbox.set_bot_url("http://127.0.0.1:9/slack/events")  # nothing listens there
    status, answer = click(sandbox, {"type": "message", "channel": CHANNEL, "ts": posted["ts"]})
    assert "the bot did not answer" in answer["error"]
    _, gone = click(sandbox, {"type": "message", "channel": CHANNEL, "ts": "1.000000"})
    assert gone["ok"] is False and "that is gone" in gone["error"]


def test_the_page_api_refuses_cross_site_requests(sandbox, bot):
    """A web page elsewhere cannot click for you: JSON, this Host and this Origin only."""
    body = {"user": ME, "channel": CHANNEL, "text": "/agent-pending"}
    assert page_post(sandbox, "/sandbox/send", body, {"Content-Type": "text/plain"})[0] == 415
    assert page_post(sandbox, "/sandbox/send", body, {"Origin": "https://evil.test"})[0] == 403
    assert page_post(sandbox, "/sandbox/send", body, {"Host": "evil.test"})[0] == 403
    assert page_post(sandbox, "/sandbox/send", {**body, "user": "UNOBODY"})[0] == 400
    assert bot.requests == []
    origin = {"Origin": sandbox.url.rstrip("/")}
    assert page_post(sandbox, "/sandbox/send", body, origin)[0] == 200
    port = sandbox.url.rstrip("/").rsplit(":", 1)[1]
    by_name = {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"}
    assert page_post(sandbox, "/sandbox/send", body, by_name)[0] == 200
    assert (
        page_post(sandbox, "/sandbox/send", body, {"Origin": f"https://localhost:{port}"})[0] == 403
    )


def test_state_long_polls_until_something_changes(sandbox, client):
    now = state(sandbox)["revision"]
    threading.Timer(0.3, lambda: client.chat_postMessage(channel=CHANNEL, text="later")).start()
    began = time.monotonic()
    later = state(sandbox, since=now)
    assert later["revision"] > now and "later" in later["main"]
    assert 0.2 < time.monotonic() - began < 5


def test_the_channel_survives_a_restart_with_real_times(sandbox, client, tmp_path):
    first = client.chat_postMessage(channel=CHANNEL, text="before", blocks=[BUTTON])
    second = client.chat_postMessage(channel=CHANNEL, text="reply", thread_ts=first["ts"])
    assert abs(float(first["ts"]) - time.time()) < 60 and second["ts"] > first["ts"]
    sandbox.stop()
    again = Sandbox(
        channel=CHANNEL,
        channel_name="approvals",
        users={ME: "dev"},
        state_file=tmp_path / "sandbox.json",
    ).start(port=0)
    try:
        page = state(again)
        assert 'data-action-id="approval_approve"' in page["main"] and "1 reply" in page["main"]
        newer = WebClient(token=again.token, base_url=again.api_url).chat_postMessage(
            channel=CHANNEL, text="after"
        )
        assert newer["ts"] > second["ts"]
        assert "reply" in state(again, thread=first["ts"])["thread"]
    finally:
        again.stop()


def test_the_page_and_its_assets_are_served(sandbox):
    for path, kind in (
        ("", "text/html"),
        ("static/sandbox.js", "javascript"),
        ("static/sandbox.css", "css"),
    ):
        with urllib.request.urlopen(sandbox.url + path, timeout=5) as response:
            assert kind in response.headers["Content-Type"]
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(sandbox.url + "static/../server.py", timeout=5)


@dataclass
class SocketBot:
    """What a bot in Socket Mode, by hand, was sent, and the payloads its next acks carry."""

    hello: dict
    envelopes: list[dict] = field(default_factory=list)
    answers: list[dict] = field(default_factory=list)


@contextlib.contextmanager
def socket_bot(sandbox: Sandbox) -> Iterator[SocketBot]:
    """Dial the sandbox's WebSocket and ack every envelope (with the next queued payload)."""
    opened = WebClient(base_url=sandbox.api_url).apps_connections_open(app_token=sandbox.app_token)
    with connect(opened["url"]) as socket:
        bot = SocketBot(hello=json.loads(socket.recv(timeout=5)))

        def ack_all() -> None:
            with contextlib.suppress(ConnectionClosed):
                for message in socket:
                    envelope = json.loads(message)
                    bot.envelopes.append(envelope)
                    ack = {"envelope_id": envelope["envelope_id"]}
                    if bot.answers:
                        ack["payload"] = bot.answers.pop(0)
                    socket.send(json.dumps(ack))

        thread = threading.Thread(target=ack_all, daemon=True)
        thread.start()
        yield bot
    thread.join(5)


def test_in_socket_mode_actions_go_down_the_bots_websocket():
    """No WebSocket: the page says the bot is away; once it dials in, clicks and commands go
    to it as envelopes, and an ack's text shows as Slack shows a command's immediate answer."""
    box = Sandbox(channel=CHANNEL, channel_name="approvals", users={ME: "dev"}, socket_mode=True)
    box.start(port=0)
    try:
        assert state(box)["bot"] is False
        posted = WebClient(token=box.token, base_url=box.api_url).chat_postMessage(
            channel=CHANNEL, text="card", blocks=[BUTTON]
        )
        container = {"type": "message", "channel": CHANNEL, "ts": posted["ts"]}
        _, answer = click(box, container)
        assert answer == {"ok": False, "error": "HTTP 503: the bot is not connected yet"}

        with socket_bot(box) as bot:
            assert bot.hello["type"] == "hello" and state(box)["bot"] is True
            assert click(box, container)[1] == {"ok": True, "error": None}
            bot.answers.append({"text": "nothing is waiting"})
            sent = page_post(box, "/sandbox/send", {"user": ME, "text": "/agent-pending"})
            assert sent[1] == {"ok": True, "error": None}
            assert "nothing is waiting" in state(box)["main"]
            kinds = [
                (e["type"], e["payload"].get("type") or e["payload"]["command"])
                for e in bot.envelopes
            ]
            assert kinds == [("interactive", "block_actions"), ("slash_commands", "/agent-pending")]
        wait_until(lambda: state(box)["bot"] is False, 10, "the page to see the bot leave")
    finally:
        box.stop()
