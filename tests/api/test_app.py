"""``approvals api`` over real HTTP, with the bot, a worker and the Slack stand-in: each kind of
decision reaches the caller waiting for it, and the API refuses what it must."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from approvals import store
from approvals.api.bodies import ApprovalBody
from approvals.client import ApiError, Client
from approvals.models import UNSET, GateOptions, Status
from approvals.models.options import SET_BY_API
from tests.api.conftest import Stack
from tests.api.contract import check, conforms
from tests.conftest import CHANNEL
from tests.e2e import (
    block_text,
    card_of,
    click,
    reply_containing,
    submit_edit,
    submit_reject,
    submit_respond,
    wait_status,
)

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "force": {"type": "boolean"}},
    "required": ["path"],
}


def _waiting(client: Client, approval_id: str) -> tuple[threading.Thread, dict[str, Any]]:
    """A caller blocked in ``wait`` on another thread; its answer lands in the dict."""
    got: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: got.update(client.wait(approval_id, timeout=30)))
    thread.start()
    return thread, got


def test_approve_reaches_the_waiting_caller_and_its_result_the_thread(stack: Stack) -> None:
    """Approve in Slack: the waiting caller gets it; its reported result shows in the thread."""
    client = stack.client(stack.token("deployer"))
    made = client.request(
        "deploy", {"path": "web"}, summary="Deploy web", preview="*web* to prod", schema=SCHEMA
    )
    assert made["status"] == "pending" and made["receipt"] is None and "card_url" in made
    card = card_of(stack.slack, made["id"])
    assert "*web* to prod" in block_text(card)
    thread, got = _waiting(client, made["id"])
    status, _ = click(stack.slack, stack.bot_url, "approve", made["id"], card_ts=card.ts)
    assert status == 200
    thread.join(30)
    assert got["status"] == "approved"
    assert got["decision"]["kind"] == "approve" and got["decision"]["actor"] == "UALICE"
    assert got["decision"]["arguments"] == {"path": "web"}
    assert got["card_url"].endswith("/p" + card.ts.replace(".", ""))
    done = client.report(made["id"], ok=True, output="deployed 3 pods")
    assert done["status"] == "completed" and done["result"]["ok"] is True
    assert all(conforms(stack.api_url, "ApprovalAnswer", a) for a in (made, dict(got), done))
    reply_containing(stack.slack, card.ts, "deployed 3 pods")
    events = [e["event"] for e in store.audit.audit_trail(stack.conn, made["id"])]
    assert events[-2:] == ["approved", "result_reported"] or "result_reported" in events
    with pytest.raises(ApiError) as again:
        client.report(made["id"], ok=True)
    assert again.value.status == 409


def test_edit_reject_and_respond_reach_the_caller(stack: Stack) -> None:
    """Edit (checked against the caller's schema), Reject with reason, Respond: each answered."""
    client = stack.client(stack.token("editor"))
    edited = client.request("deploy", {"path": "web"}, schema=SCHEMA)
    rejected = client.request("deploy", {"path": "db"}, reason_required=True)
    responded = client.request("lookup", {"q": "x"})
    card = card_of(stack.slack, edited["id"])
    click(stack.slack, stack.bot_url, "edit", edited["id"], card_ts=card.ts)
    status, _ = submit_edit(stack.bot_url, edited["id"], {"path": 'web"'})  # a string still
    assert status == 200
    card_of(stack.slack, rejected["id"])
    card_of(stack.slack, responded["id"])
    assert submit_reject(stack.bot_url, rejected["id"], "not on a Friday")[0] == 200
    assert submit_respond(stack.bot_url, responded["id"], "the answer is 42")[0] == 200
    got = client.wait(edited["id"], timeout=20)
    assert got["status"] == "edited" and got["decision"]["arguments"]["path"] == 'web"'
    assert conforms(stack.api_url, "ApprovalAnswer", got)
    got = client.wait(rejected["id"], timeout=20)
    assert got["status"] == "rejected" and got["decision"]["reason"] == "not on a Friday"
    assert got["decision"]["arguments"] is None
    assert conforms(stack.api_url, "ApprovalAnswer", got)
    got = client.wait(responded["id"], timeout=20)
    assert got["status"] == "responded" and got["decision"]["response"] == "the answer is 42"
    assert conforms(stack.api_url, "ApprovalAnswer", got)


def test_expiry_reaches_the_caller(stack: Stack) -> None:
    """Nobody decides in time: the waiting caller is told ``expired`` (one wait longer than
    redis-py's default read timeout, which must not cut it short)."""
    client = stack.client(stack.token("sleepy"))
    made = client.request("deploy", {"path": "web"}, expires_in=6)
    got = client.wait(made["id"], timeout=25)
    assert got["status"] == "expired" and got["decision"]["kind"] == "expire"
    assert conforms(stack.api_url, "ApprovalAnswer", got)


def test_a_caller_restarting_mid_wait_gets_the_answer_on_its_next_get(stack: Stack) -> None:
    """A wait that ended (the caller restarted) loses nothing: the next GET has the decision."""
    token = stack.token("restarts")
    first = stack.client(token)
    made = first.request("deploy", {"path": "web"})
    url = f"{stack.api_url}/v1/approvals/{made['id']}"
    headers = {"Authorization": f"Bearer {token}"}
    with pytest.raises(httpx.ReadTimeout):  # the caller gives up mid-wait (it restarts)
        httpx.get(url, params={"wait": 30}, headers=headers, timeout=1)
    assert first.get(made["id"])["status"] == "pending"
    card = card_of(stack.slack, made["id"])
    click(stack.slack, stack.bot_url, "approve", made["id"], card_ts=card.ts)
    wait_status(stack.conn, made["id"], Status.APPROVED)
    again = stack.client(token)
    assert again.get(made["id"], wait=30)["decision"]["kind"] == "approve"


def test_an_idempotent_retry_returns_the_same_approval(stack: Stack) -> None:
    """The same idempotency key from the same agent: one approval, one card."""
    client = stack.client(stack.token("retrier"))
    one = client.request("deploy", {"path": "web"}, idempotency_key="deploy-web-1")
    two = client.request("deploy", {"path": "web"}, idempotency_key="deploy-web-1")
    other = client.request("deploy", {"path": "web"}, idempotency_key="deploy-web-2")
    assert one["id"] == two["id"] != other["id"]
    card_of(stack.slack, one["id"])
    cards = [m for m in stack.slack.messages(CHANNEL) if one["id"] in str(m.blocks)]
    assert len(cards) == 1


def test_tokens_are_refused_across_agents_and_tools(stack: Stack) -> None:
    """401 without a valid token; 403 for another agent or tool; 404 for another's approval."""
    mine = stack.client(stack.token("alpha", ("deploy",)))
    theirs = stack.client(stack.token("beta"))
    made = mine.request("deploy", {"path": "web"})
    for call, status in (
        (lambda: mine.request("deploy", {}, agent="beta"), 403),
        (lambda: mine.request("drop_table", {}), 403),
        (lambda: theirs.get(made["id"]), 404),
        (lambda: theirs.report(made["id"], ok=True), 404),
        (lambda: stack.client("apv_forged").get(made["id"]), 401),
    ):
        with pytest.raises(ApiError) as refused:
            call()
        assert refused.value.status == status
    assert [a["id"] for a in theirs.pending()] == []
    assert made["id"] in [a["id"] for a in mine.pending()]


def test_clear_4xx_answers(stack: Stack) -> None:
    """413 over the size cap, 422 naming the field, 404 for a malformed id, 429 over the rate:
    each with the body the OpenAPI document lists for it."""
    token = stack.token("careless")
    headers = {"Authorization": f"Bearer {token}"}
    url = stack.api_url + "/v1/approvals"
    big = {"tool": "t", "arguments": {"x": "y" * 200_000}}
    too_big = httpx.post(url, json=big, headers=headers)
    assert too_big.status_code == 413
    wrong = httpx.post(url, json={"tool": "t", "arguments": []}, headers=headers)
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"] == ["body", "arguments"]
    schema = {"tool": "t", "arguments": {"path": 3}, "schema": SCHEMA}
    unfit = httpx.post(url, json=schema, headers=headers)
    assert unfit.status_code == 422
    assert unfit.json()["detail"][0]["loc"] == ["body", "arguments", "path"]
    for answer in (too_big, wrong, unfit):
        check(stack.api_url, "/v1/approvals", "POST", answer)
    for malformed in ("/..%2fx", "/approvals:pending"):
        answer = httpx.get(url + malformed, headers=headers)
        assert answer.status_code == 404
        check(stack.api_url, "/v1/approvals/{approval_id}", "GET", answer)
    (record,) = [r for r in stack.conn.hvals(store.keys.TOKENS_KEY) if b"careless" in r]
    minute = int(time.time() // 60)
    stack.conn.set(store.keys.rate_key(json.loads(record)["id"], minute), 10_000, ex=120)
    limited = httpx.get(url, headers=headers)
    assert limited.status_code in (429, 200)  # 200 only when the minute turned just now
    if limited.status_code == 429:
        assert limited.headers["Retry-After"]
        check(stack.api_url, "/v1/approvals", "GET", limited)


def test_the_body_offers_the_gate_options_the_api_may_set_and_hands_them_on() -> None:
    """The body's fields are the request's own and the options GateOptions offers to the API,
    with their bounds; what a body leaves out, or sets to null, is the option's default."""
    properties = ApprovalBody.model_json_schema(by_alias=True)["properties"]
    asked = {"tool", "arguments", "schema", "preview", "fingerprint", "agent", "requested_by",
             "idempotency_key", "run_id"}  # fmt: skip
    assert set(properties) == asked | set(SET_BY_API)
    assert {"webhook", "allow_self_approval", "on_reject"}.isdisjoint(properties)
    body = ApprovalBody.model_validate(
        {"tool": "deploy", "arguments": {}, "approvers": ["UALICE"], "expires_in": None,
         "remind_after": 0, "escalate_to": ["C0ESC"], "summary": "Deploy {x}"}
    )  # fmt: skip
    assert body.options() == GateOptions(
        approvers=["UALICE"], remind_after=0, escalate_to=["C0ESC"], summary="Deploy {x}"
    )
    assert body.options().expires_in is UNSET


def test_the_openapi_document_is_served(stack: Stack) -> None:
    """The reference: /v1/openapi.json lists every route."""
    doc = httpx.get(stack.api_url + "/v1/openapi.json").json()
    assert set(doc["paths"]) >= {
        "/v1/approvals",
        "/v1/approvals/{approval_id}",
        "/v1/approvals/{approval_id}/result",
    }
    properties = doc["components"]["schemas"]["ApprovalBody"]["properties"]
    assert {"schema", "run_id", "grantable", "remind_after", "escalate_after"} <= set(properties)
    assert "escalate_to" in properties and "description" in properties["run_id"]


def test_a_callers_fingerprint_comes_back_in_the_decision_and_the_receipt(
    stack: Stack, tmp_path
) -> None:
    """The caller names the state its request depends on; an operator approves (signing, as
    the CLI does): the decision and the receipt both name that state, and ``verify_receipt``
    refuses the receipt once the service finds another state."""
    import dataclasses

    from approvals.config import Settings
    from approvals.decisions import review
    from approvals.errors import InvalidReceipt
    from approvals.models import DecisionKind
    from approvals.proof import keys, receipts

    client = stack.client(stack.token("migrator"))
    made = client.request("migrate", {"name": "users"}, fingerprint="alembic:4f2a9c")
    key = str(tmp_path / "signing.pem")
    keys.generate_key(key)
    keys.write_public_key(key, f"{key}.pub.pem")
    operator = dataclasses.replace(Settings.from_env(stack.env), signing_key=key)
    review.decide(stack.conn, operator, made["id"], DecisionKind.APPROVE, "cli:carol")

    got = client.wait(made["id"], timeout=30)
    assert got["decision"]["fingerprint"] == "alembic:4f2a9c"
    assert conforms(stack.api_url, "ApprovalAnswer", got)
    public = [keys.load_public_key(f"{key}.pub.pem")]
    receipt = receipts.verify_receipt(
        got["receipt"], tool="migrate", arguments={"name": "users"}, keys=public,
        fingerprint="alembic:4f2a9c",
    )  # fmt: skip
    assert receipt.fingerprint == "alembic:4f2a9c"
    with pytest.raises(InvalidReceipt, match="the state changed since the approval"):
        receipts.verify_receipt(
            got["receipt"], tool="migrate", arguments={"name": "users"}, keys=public,
            fingerprint="alembic:77e0b1",
        )  # fmt: skip
    too_long = httpx.post(
        f"{stack.api_url}/v1/approvals",
        json={"tool": "migrate", "arguments": {}, "fingerprint": "x" * 201},
        headers={"Authorization": f"Bearer {stack.token('migrator')}"},
    )
    assert too_long.status_code == 422 and "fingerprint" in too_long.text
