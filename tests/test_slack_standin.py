"""The Slack stand-in and the signed-request helpers, proven with the real slack_sdk and Bolt.

Other tests trust these two modules to behave like Slack; these tests are why they may.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from slack_bolt import Ack, App, Respond
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import RateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.webhook import WebhookClient
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.slack_requests import (
    block_actions_payload,
    event_callback_payload,
    send_command,
    send_event,
    send_interaction,
    signature_headers,
    slash_command_form,
    view_submission_payload,
)
from tests.slack_standin import NoAck, NotConnected, Pace, SlackStandIn

SECRET = "test-signing-secret"


@pytest.fixture
def standin() -> Iterator[SlackStandIn]:
    server = SlackStandIn().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(standin: SlackStandIn) -> WebClient:
    return WebClient(token=standin.token, base_url=standin.base_url)


def _blocks(n: int) -> list[dict[str, Any]]:
    return [{"type": "section", "text": {"type": "mrkdwn", "text": f"b{i}"}} for i in range(n)]


def test_auth_test_reports_the_bot(client: WebClient) -> None:
    """auth.test answers with the configured bot user and team."""
    resp = client.auth_test()
    assert (resp["user_id"], resp["team_id"], resp["bot_id"]) == ("UBOT", "T0001", "B0001")


def test_post_message_is_recorded(client: WebClient, standin: SlackStandIn) -> None:
    """chat.postMessage assigns increasing ts values and records the message."""
    first = client.chat_postMessage(channel="C1", text="hello", blocks=_blocks(2))
    second = client.chat_postMessage(channel="C1", text="again")
    assert first["ts"] == "1700000000.000100" and second["ts"] > first["ts"]
    assert first["message"]["user"] == "UBOT"
    message = standin.message("C1", first["ts"])
    assert (message.text, len(message.blocks), message.thread_ts) == ("hello", 2, None)
    assert [m.text for m in standin.messages("C1")] == ["hello", "again"]
    assert standin.calls("chat.postMessage")[0]["args"]["blocks"] == _blocks(2)


def test_post_message_needs_channel_and_content(client: WebClient) -> None:
    """A message without a channel or without text/blocks is refused as Slack does."""
    with pytest.raises(SlackApiError) as no_channel:
        client.api_call("chat.postMessage", json={"text": "x"})
    assert no_channel.value.response["error"] == "channel_not_found"
    with pytest.raises(SlackApiError) as no_text:
        client.api_call("chat.postMessage", json={"channel": "C1"})
    assert no_text.value.response["error"] == "no_text"


def test_update_applies_new_content_and_keeps_history(
    client: WebClient, standin: SlackStandIn
) -> None:
    """chat.update replaces text and blocks and appends its args to updates."""
    ts = client.chat_postMessage(channel="C1", text="pending", blocks=_blocks(1))["ts"]
    resp = client.chat_update(channel="C1", ts=ts, text="approved", blocks=_blocks(3))
    assert resp["text"] == "approved"
    message = standin.message("C1", ts)
    assert (message.text, len(message.blocks)) == ("approved", 3)
    assert [u["text"] for u in message.updates] == ["approved"]


def test_update_of_unknown_message_is_refused(client: WebClient) -> None:
    """chat.update on a ts that was never posted answers message_not_found."""
    with pytest.raises(SlackApiError) as err:
        client.chat_update(channel="C1", ts="1.000001", text="x")
    assert err.value.response["error"] == "message_not_found"


def test_thread_reply_is_listed_under_its_parent(client: WebClient, standin: SlackStandIn) -> None:
    """A post with thread_ts shows up in thread() and carries thread_ts."""
    parent = client.chat_postMessage(channel="C1", text="card")["ts"]
    reply = client.chat_postMessage(channel="C1", text="approved by U1", thread_ts=parent)
    assert reply["message"]["thread_ts"] == parent
    assert [m.text for m in standin.thread("C1", parent)] == ["approved by U1"]


def test_post_to_user_id_lands_in_a_dm(client: WebClient, standin: SlackStandIn) -> None:
    """Posting to a user id answers a D channel that chat.update needs instead of the user id."""
    resp = client.chat_postMessage(channel="U1", text="please approve")
    assert resp["channel"] == standin.dm_channel("U1")
    client.chat_update(channel=resp["channel"], ts=resp["ts"], text="done")
    assert standin.message("U1", resp["ts"]).text == "done"
    with pytest.raises(SlackApiError):
        client.chat_update(channel="U1", ts=resp["ts"], text="done")


def test_ephemeral_is_recorded_per_user(client: WebClient, standin: SlackStandIn) -> None:
    """chat.postEphemeral answers a message_ts and is listed for its user."""
    resp = client.chat_postEphemeral(channel="C1", user="U7", text="only you")
    assert resp["message_ts"]
    assert [e["text"] for e in standin.ephemerals("U7")] == ["only you"]
    assert standin.ephemerals("U8") == []


def test_views_open_then_update(client: WebClient, standin: SlackStandIn) -> None:
    """views.open returns a view id that views.update accepts, and both are recorded."""
    view = {"type": "modal", "title": {"type": "plain_text", "text": "Edit"}, "blocks": []}
    opened = client.views_open(trigger_id="111.222.abc", view={**view, "callback_id": "edit"})
    view_id = opened["view"]["id"]
    assert view_id == "V0001" and opened["view"]["callback_id"] == "edit"
    client.views_update(view_id=view_id, hash=opened["view"]["hash"], view=view)
    with pytest.raises(SlackApiError) as stale:
        client.views_update(view_id=view_id, hash=opened["view"]["hash"], view=view)
    assert stale.value.response["error"] == "hash_conflict"
    recorded = standin.views()
    assert [v["method"] for v in recorded] == ["views.open", "views.update"]
    assert recorded[0]["trigger_id"] == "111.222.abc" and recorded[1]["view_id"] == view_id


def test_wrong_token_is_invalid_auth(standin: SlackStandIn) -> None:
    """A token other than the configured one answers invalid_auth."""
    with pytest.raises(SlackApiError) as err:
        WebClient(token="xoxb-wrong", base_url=standin.base_url).auth_test()
    assert err.value.response["error"] == "invalid_auth"
    assert standin.calls()[0]["error"] == "invalid_auth"


def test_unknown_method_is_refused(client: WebClient) -> None:
    """A method the stand-in does not implement answers unknown_method."""
    with pytest.raises(SlackApiError) as err:
        client.api_call("chat.delete", json={"channel": "C1", "ts": "1.1"})
    assert err.value.response["error"] == "unknown_method"


def test_form_bodies_and_query_methods(client: WebClient, standin: SlackStandIn) -> None:
    """Form fields (blocks as a JSON string) and GET-style query methods are understood."""
    standin.usergroups = {"S123": ["U1", "U2"]}
    client.api_call("chat.postMessage", params={"channel": "C1", "blocks": json.dumps(_blocks(1))})
    assert standin.messages("C1")[0].blocks == _blocks(1)
    assert client.usergroups_users_list(usergroup="S123")["users"] == ["U1", "U2"]
    assert client.users_info(user="U1")["user"]["real_name"] == "User U1"
    assert client.conversations_info(channel="C1")["channel"]["id"] == "C1"
    with pytest.raises(SlackApiError) as err:
        client.usergroups_users_list(usergroup="S999")
    assert err.value.response["error"] == "no_such_subteam"


def test_conversations_members_pages_like_slack(client: WebClient, standin: SlackStandIn) -> None:
    """limit and cursor page the members; the last page's next_cursor is empty; a made-up
    cursor or an unknown channel is an error, as in Slack."""
    standin.channel_members = {"C9": [f"U{n}" for n in range(5)]}
    first = client.conversations_members(channel="C9", limit=2)
    assert first["members"] == ["U0", "U1"]
    cursor = first["response_metadata"]["next_cursor"]
    second = client.conversations_members(channel="C9", limit=2, cursor=cursor)
    last = client.conversations_members(
        channel="C9", limit=2, cursor=second["response_metadata"]["next_cursor"]
    )
    assert second["members"] == ["U2", "U3"] and last["members"] == ["U4"]
    assert last["response_metadata"]["next_cursor"] == ""
    for args, error in (({"channel": "C9", "cursor": "nope"}, "invalid_cursor"),
                        ({"channel": "C0"}, "channel_not_found")):  # fmt: skip
        with pytest.raises(SlackApiError) as err:
            client.conversations_members(**args)
        assert err.value.response["error"] == error


def test_response_url_records_body(standin: SlackStandIn, client: WebClient) -> None:
    """A response URL answers "ok" and replace_original updates the message it is bound to."""
    ts = client.chat_postMessage(channel="C1", text="card")["ts"]
    url = standin.new_response_url(channel="C1", message_ts=ts)
    resp = WebhookClient(url).send(text="Approved", replace_original=True)
    assert (resp.status_code, resp.body) == (200, "ok")
    assert standin.responses() == [
        {"text": "Approved", "replace_original": True, "response_url": url}
    ]
    assert standin.message("C1", ts).text == "Approved"
    assert WebhookClient(standin.url + "/response/999").send(text="x").status_code == 404


def test_response_url_allows_five_uses(standin: SlackStandIn) -> None:
    """The sixth post to one response URL is refused, as Slack does."""
    webhook = WebhookClient(standin.new_response_url())
    assert [webhook.send(text="x").status_code for _ in range(6)] == [200] * 5 + [404]


def test_rate_limit_is_retried_by_the_sdk(standin: SlackStandIn) -> None:
    """A queued 429 is honoured by RateLimitErrorRetryHandler: the retry succeeds."""
    client = WebClient(
        token=standin.token,
        base_url=standin.base_url,
        retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=1)],
    )
    standin.fail_next("chat.postMessage", retry_after=0)
    assert client.chat_postMessage(channel="C1", text="hi")["ok"]
    assert [c["status"] for c in standin.calls("chat.postMessage")] == [429, 200]
    assert len(standin.messages()) == 1


def test_rate_limit_carries_retry_after(client: WebClient, standin: SlackStandIn) -> None:
    """Without a retry handler the 429 surfaces with Slack's Retry-After header and body."""
    standin.fail_next("chat.update", retry_after=7)
    with pytest.raises(SlackApiError) as err:
        client.chat_update(channel="C1", ts="1.1", text="x")
    assert err.value.response.status_code == 429
    assert err.value.response.headers["Retry-After"] == "7"
    assert err.value.response["error"] == "ratelimited"


def test_fail_next_with_error_and_server_error(client: WebClient, standin: SlackStandIn) -> None:
    """fail_next(error=...) answers ok:false; a 5xx fault answers that status once."""
    standin.fail_next("views.open", error="expired_trigger_id")
    view = {"type": "modal", "title": {"type": "plain_text", "text": "Edit"}, "blocks": []}
    with pytest.raises(SlackApiError) as expired:
        client.views_open(trigger_id="1.2.3", view=view)
    assert expired.value.response["error"] == "expired_trigger_id"
    standin.fail_next("auth.test", status=503)
    with pytest.raises(SlackApiError) as unavailable:
        client.auth_test()
    assert unavailable.value.response.status_code == 503
    assert client.auth_test()["ok"]


def test_fifty_one_blocks_are_refused(client: WebClient, standin: SlackStandIn) -> None:
    """More than 50 blocks, or a block without a type, is invalid_blocks (400 on response URLs)."""
    client.chat_postMessage(channel="C1", text="ok", blocks=_blocks(50))
    with pytest.raises(SlackApiError) as err:
        client.chat_postMessage(channel="C1", text="too many", blocks=_blocks(51))
    assert err.value.response["error"] == "invalid_blocks"
    with pytest.raises(SlackApiError):
        client.chat_postMessage(channel="C1", text="bad", blocks=[{"text": "no type"}])
    resp = WebhookClient(standin.new_response_url()).send(text="x", blocks=_blocks(51))
    assert (resp.status_code, resp.body) == (400, "invalid_blocks")
    assert len(standin.messages()) == 1 and standin.responses() == []


def test_posts_over_a_channels_pace_are_refused_with_retry_after(
    client: WebClient, standin: SlackStandIn
) -> None:
    """Given Slack's pace, a channel takes its burst, then refuses the next post (429
    ``ratelimited`` with Retry-After) until its interval passed; other channels, other
    methods, and a stand-in without a pace are not held to it."""
    standin.set_pace(Pace(per_second=2, burst=2))
    client.chat_postMessage(channel="C1", text="one")
    client.chat_postMessage(channel="C1", text="two")
    with pytest.raises(SlackApiError) as refused:
        client.chat_postMessage(channel="C1", text="three")
    assert refused.value.response.status_code == 429
    assert refused.value.response["error"] == "ratelimited"
    assert refused.value.response.headers["Retry-After"] == "1"
    client.chat_postMessage(channel="C2", text="elsewhere")  # its own pace
    ts = standin.messages("C1")[0].ts
    client.chat_update(channel="C1", ts=ts, text="edited")  # not a post
    time.sleep(0.5)  # one interval
    client.chat_postMessage(channel="C1", text="three, on time")
    assert [m.text for m in standin.messages("C1")] == ["edited", "two", "three, on time"]
    standin.set_pace(None)
    for n in range(5):
        client.chat_postMessage(channel="C1", text=f"unpaced {n}")


def test_wait_for_times_out_with_a_summary(client: WebClient, standin: SlackStandIn) -> None:
    """wait_for returns the truthy value, or fails listing the recorded calls."""
    client.chat_postMessage(channel="C1", text="hi")
    assert standin.wait_for(lambda: standin.messages("C1"))[0].text == "hi"
    with pytest.raises(AssertionError, match=r"chat\.postMessage C1 -> 200 ok"):
        standin.wait_for(lambda: standin.messages("C2"), timeout=0.1)


def test_signature_headers_pass_the_sdk_verifier() -> None:
    """signature_headers signs as Slack does; stale timestamps still fail verification."""
    body = "payload=%7B%7D"
    verifier = SignatureVerifier(SECRET)
    assert verifier.is_valid_request(body, signature_headers(SECRET, body))
    stale = signature_headers(SECRET, body, timestamp=int(time.time()) - 600)
    assert not verifier.is_valid_request(body, stale)
    assert not verifier.is_valid_request(body, signature_headers("other", body))


# --------------------------------------------------------------------------- Bolt end to end


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Keep access logs out of test output."""


@pytest.fixture
def bolt_url(standin: SlackStandIn) -> Iterator[str]:
    """A small Bolt app over real HTTP whose listeners exercise each payload helper."""
    app = App(
        client=WebClient(token=standin.token, base_url=standin.base_url), signing_secret=SECRET
    )

    @app.action("approve")
    def handle_approve(ack: Ack, body: dict[str, Any], respond: Respond, client: WebClient) -> None:
        ack()
        respond(text=f"Approved {body['actions'][0]['value']}", replace_original=True)
        channel, ts = body["container"]["channel_id"], body["container"]["message_ts"]
        client.chat_postMessage(channel=channel, thread_ts=ts, text=f"by <@{body['user']['id']}>")

    @app.command("/agent-pending")
    def handle_pending(ack: Ack, respond: Respond, command: dict[str, str]) -> None:
        ack()
        respond(text=f"nothing pending for {command['user_id']}")

    @app.view("edit")
    def handle_edit(ack: Ack, view: dict[str, Any]) -> None:
        value = view["state"]["values"]["args"]["args_input"]["value"]
        ack(response_action="errors", errors={"args": f"{view['private_metadata']}:{value}"})

    @app.event("app_home_opened")
    def handle_home(event: dict[str, Any], client: WebClient) -> None:
        client.views_publish(user_id=event["user"], view={"type": "home", "blocks": []})

    server = make_server(
        "127.0.0.1", 0, SlackRequestHandler(app), _ThreadingWSGIServer, _QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/slack/events"
    server.shutdown()
    server.server_close()
    thread.join()


def test_bolt_app_handles_signed_requests(
    bolt_url: str, standin: SlackStandIn, client: WebClient
) -> None:
    """Bolt accepts each helper's request, and respond()/WebClient calls reach the stand-in."""
    ts = client.chat_postMessage(channel="C0CARDS", text="card")["ts"]
    url = standin.new_response_url(channel="C0CARDS", message_ts=ts)
    click = block_actions_payload(
        user_id="U1", action_id="approve", value="ap-1", message_ts=ts, response_url=url
    )
    assert send_interaction(bolt_url, SECRET, click)[0] == 200
    standin.wait_for(lambda: standin.thread("C0CARDS", ts))
    assert standin.message("C0CARDS", ts).text == "Approved ap-1"

    form = slash_command_form(user_id="U2", response_url=standin.new_response_url())
    assert send_command(bolt_url, SECRET, form)[0] == 200
    standin.wait_for(lambda: len(standin.responses()) == 2)
    assert standin.responses()[1]["text"] == "nothing pending for U2"

    values = {"args": {"args_input": {"type": "plain_text_input", "value": "{}"}}}
    submit = view_submission_payload(
        user_id="U1", callback_id="edit", private_metadata="ap-1", values=values
    )
    status, body = send_interaction(bolt_url, SECRET, submit)
    assert (status, json.loads(body)["errors"]) == (200, {"args": "ap-1:{}"})

    assert send_event(bolt_url, SECRET, {"type": "app_home_opened", "user": "U3"})[0] == 200
    standin.wait_for(lambda: standin.views())
    assert standin.views()[0]["user_id"] == "U3"

    assert send_interaction(bolt_url, "wrong-secret", click)[0] == 401
    stale = int(time.time()) - 600
    assert send_interaction(bolt_url, SECRET, click, timestamp=stale)[0] == 401


def test_a_delayed_call_is_answered_late_and_others_meanwhile(
    client: WebClient, standin: SlackStandIn
) -> None:
    """``delay_next`` slows one call down; calls to other methods are not held up by it."""
    ts = client.chat_postMessage(channel="C1", text="x")["ts"]
    standin.delay_next("chat.update", 0.5)
    assert standin.delays_left("chat.update") == 1
    finished: list[float] = []
    slow = threading.Thread(
        target=lambda: (
            client.chat_update(channel="C1", ts=ts, text="y"),
            finished.append(time.monotonic()),
        )
    )
    started = time.monotonic()
    slow.start()
    client.chat_postMessage(channel="C1", text="meanwhile")
    answered_meanwhile = time.monotonic()
    slow.join(10)
    assert standin.delays_left("chat.update") == 0  # the slow call took its delay
    assert finished and finished[0] - started >= 0.5
    assert answered_meanwhile < finished[0]
    client.chat_update(channel="C1", ts=ts, text="z")  # only the next call was delayed
    assert standin.message("C1", ts).text == "z"


# --------------------------------------------------------------------------- Socket Mode


@pytest.fixture
def socket_app(standin: SlackStandIn) -> Iterator[SocketModeHandler]:
    """A small Bolt app connected through slack_sdk's own ``SocketModeHandler``."""
    app = App(
        client=WebClient(token=standin.token, base_url=standin.base_url),
        request_verification_enabled=False,
    )

    @app.action("approve")
    def handle_approve(ack: Ack, respond: Respond, body: dict[str, Any]) -> None:
        ack()
        respond(text=f"Approved {body['actions'][0]['value']}")

    @app.command("/agent-pending")
    def handle_pending(ack: Ack, command: dict[str, str]) -> None:
        ack(text=f"nothing pending for {command['user_id']}")

    @app.view("edit")
    def handle_edit(ack: Ack, view: dict[str, Any]) -> None:
        ack(response_action="errors", errors={"args": view["private_metadata"]})

    @app.event("app_home_opened")
    def handle_home(event: dict[str, Any], client: WebClient) -> None:
        client.views_publish(user_id=event["user"], view={"type": "home", "blocks": []})

    handler = SocketModeHandler(app, standin.app_token)
    handler.connect()  # type: ignore[no-untyped-call]
    standin.socket_mode.wait_for_connections(1, timeout=10)
    yield handler
    handler.close()  # type: ignore[no-untyped-call]


def test_socket_mode_envelopes_reach_bolt_and_acks_come_back(
    socket_app: SocketModeHandler, standin: SlackStandIn
) -> None:
    """Each kind of envelope reaches Bolt's listener; deliver returns what the ack carried."""
    assert [c["method"] for c in standin.calls()] == ["auth.test", "apps.connections.open"]
    url = standin.new_response_url()
    click = block_actions_payload(user_id="U1", action_id="approve", value="ap-1", response_url=url)
    assert standin.deliver("interactive", click) == {}
    standin.wait_for(lambda: standin.responses())
    assert standin.responses()[0]["text"] == "Approved ap-1"

    form = slash_command_form(user_id="U2", response_url=standin.new_response_url())
    assert standin.deliver("slash_commands", form) == {"text": "nothing pending for U2"}

    submit = view_submission_payload(
        user_id="U1", callback_id="edit", private_metadata="ap-1", values={}
    )
    answer = standin.deliver("interactive", submit)
    assert answer == {"response_action": "errors", "errors": {"args": "ap-1"}}

    event = event_callback_payload({"type": "app_home_opened", "user": "U3", "tab": "home"})
    assert standin.deliver("events_api", event) == {}
    standin.wait_for(lambda: standin.views())
    assert standin.views()[0]["user_id"] == "U3"

    envelopes = [d["envelope"] for d in standin.socket_mode.deliveries()]
    assert [(e["type"], e["accepts_response_payload"]) for e in envelopes] == [
        ("interactive", False),
        ("slash_commands", True),
        ("interactive", True),
        ("events_api", False),
    ]
    assert (envelopes[3]["retry_attempt"], envelopes[3]["retry_reason"]) == (0, "")
    acks = [d["ack"]["envelope_id"] for d in standin.socket_mode.deliveries()]
    assert acks == [e["envelope_id"] for e in envelopes]


def test_after_a_disconnect_message_the_sdk_reconnects(
    socket_app: SocketModeHandler, standin: SlackStandIn
) -> None:
    """Slack's refresh: the client opens a new connection, closes the old, and still acks."""
    assert standin.socket_mode.disconnect() == 1
    standin.socket_mode.wait_for_connections(2, timeout=10)
    standin.socket_mode.wait_for_closed(open_at_most=1, timeout=10)
    assert len(standin.calls("apps.connections.open")) == 2
    form = slash_command_form(user_id="U2", response_url=standin.new_response_url())
    assert standin.deliver("slash_commands", form) == {"text": "nothing pending for U2"}


def test_a_connection_is_greeted_with_hello_and_a_ticket_opens_only_one(
    standin: SlackStandIn, client: WebClient
) -> None:
    """The URL from apps.connections.open works once; hello says how many are connected."""
    url = WebClient(base_url=standin.base_url).apps_connections_open(app_token=standin.app_token)[
        "url"
    ]
    assert url.startswith(standin.socket_mode.url + "/link/?ticket=")
    with connect(url) as socket:
        hello = json.loads(socket.recv(timeout=5))
        assert hello["type"] == "hello" and hello["num_connections"] == 1
        assert hello["connection_info"] == {"app_id": "A0001"}
        with pytest.raises(InvalidStatus) as refused:
            connect(url)
        assert refused.value.response.status_code == 401


def test_deliver_fails_at_its_deadline_without_an_app_or_an_ack(standin: SlackStandIn) -> None:
    """No app connected: NotConnected; an app that never acks: NoAck, and it is recorded."""
    with pytest.raises(NotConnected):
        standin.deliver("events_api", event_callback_payload({"type": "x"}), timeout=0.2)
    url = WebClient(base_url=standin.base_url).apps_connections_open(app_token=standin.app_token)[
        "url"
    ]
    with connect(url) as socket:
        socket.recv(timeout=5)  # hello
        with pytest.raises(NoAck):
            standin.deliver("events_api", event_callback_payload({"type": "x"}), timeout=0.2)
        assert json.loads(socket.recv(timeout=5))["type"] == "events_api"
    assert [d["ack"] for d in standin.socket_mode.deliveries()] == [None, None]


@pytest.mark.parametrize(
    ("method", "token", "error"),
    [
        ("apps.connections.open", "xoxb-test-token", "not_allowed_token_type"),
        ("apps.connections.open", "xapp-1-wrong", "invalid_auth"),
        ("auth.test", "xapp-1-A0001-test-app-token", "not_allowed_token_type"),
    ],
)
def test_each_token_works_only_where_slack_takes_it(
    standin: SlackStandIn, method: str, token: str, error: str
) -> None:
    """The app-level token opens connections only; the bot token does everything else."""
    with pytest.raises(SlackApiError) as refused:
        WebClient(token=token, base_url=standin.base_url).api_call(method)
    assert refused.value.response["error"] == error
