"""Grants for API requests, end to end: a grant chosen on an API request's card lets the next
matching request of that agent through at once, with no card, one use taken; "this run" means
the caller's ``run_id``; ``grantable=False`` and quorum requests offer no grant."""

from __future__ import annotations

import json
import threading
from typing import Any

from approvals import store
from approvals.config import Settings
from approvals.decisions import grants
from approvals.models import Status
from approvals.models.grant import Scope
from tests.api.conftest import Stack
from tests.conftest import CHANNEL, wait_until
from tests.e2e import card_of, choose_scope, scope_labels, settled, wait_status


def _named(stack: Stack, approval_id: str) -> list[str]:
    """The messages in the channel whose blocks name the approval (a card does)."""
    return [m.ts for m in stack.slack.messages(CHANNEL) if approval_id in json.dumps(m.blocks)]


def _grant_of(stack: Stack, approval_id: str) -> grants.Grant:
    """The grant made on the approval's card (waits: it is written just after the decision)."""

    def made() -> grants.Grant | None:
        found = [g for g in grants.list_grants(stack.conn) if g.approval_id == approval_id]
        return found[0] if found else None

    return wait_until(made, 20, f"the grant made on {approval_id}")


def test_a_run_grant_from_an_api_card_lets_the_next_request_through(stack: Stack) -> None:
    """This tool, this run (the caller's run_id): the next request of that run, agent and
    requester is approved at once by the grant, audited with its creator, shown as the compact
    channel line, with no card; another run asks again, and a revoked grant lets nothing by."""
    client = stack.client(stack.token("granted"))
    first = client.request("deploy", {"svc": "web"}, requested_by="UCAROL", run_id="task-7")
    assert first["run_id"] == "task-7"
    card = card_of(stack.slack, first["id"])
    assert "This tool, this run" in scope_labels(card)
    got: dict[str, Any] = {}
    waiter = threading.Thread(target=lambda: got.update(client.wait(first["id"], timeout=30)))
    waiter.start()
    assert choose_scope(stack.bot_url, first["id"], Scope.RUN, card.ts) == 200
    waiter.join(30)
    assert got["status"] == "approved" and got["decision"]["actor"] == "UALICE"
    grant = _grant_of(stack, first["id"])
    assert (grant.scope, grant.agent, grant.requester) == (Scope.RUN, "granted", "UCAROL")

    second = client.request("deploy", {"svc": "api"}, requested_by="UCAROL", run_id="task-7")
    assert second["status"] == "approved" and second["receipt"] is None
    decision = second["decision"]
    assert (decision["decided_by"], decision["grant_id"]) == ("grant", grant.id)
    assert decision["actor_name"] == f"grant {grant.id} of {grant.created_by_name}"
    assert decision["arguments"] == {"svc": "api"}
    trail = store.audit.audit_trail(stack.conn, second["id"])
    assert (trail[-1]["event"], trail[-1]["grant"], trail[-1]["grant_creator"]) == (
        "approved", grant.id, "UALICE",
    )  # fmt: skip
    line = wait_until(
        lambda: [m for m in stack.slack.messages(CHANNEL) if f"grant `{grant.id}`" in m.text],
        20,
        "the compact line",
    )
    assert len(line) == 1
    assert [g.uses for g in grants.list_grants(stack.conn) if g.id == grant.id] == [1]
    assert settled(lambda: _named(stack, second["id"])) == []  # no card for it
    assert client.report(second["id"], ok=True, output="done")["status"] == "completed"

    other_run = client.request("deploy", {"svc": "db"}, requested_by="UCAROL", run_id="task-8")
    assert other_run["status"] == "pending"
    other_agent = stack.client(stack.token("not-granted"))
    made = other_agent.request("deploy", {"svc": "db"}, requested_by="UCAROL", run_id="task-7")
    assert made["status"] == "pending"

    grants.revoke(stack.conn, Settings.from_env(stack.env), grant.id, "cli:ops", is_operator=True)
    after = client.request("deploy", {"svc": "cache"}, requested_by="UCAROL", run_id="task-7")
    assert after["status"] == "pending"
    card_of(stack.slack, after["id"])


def test_an_hours_grant_covers_later_requests_until_it_expires(stack: Stack) -> None:
    """This tool for 1 hour, made on an API card without a run_id (so "this run" is not
    offered): later requests of that agent and requester pass until the grant's end."""
    client = stack.client(stack.token("hourly"))
    first = client.request("rotate_key", {"name": "a"})
    card = card_of(stack.slack, first["id"])
    assert "This tool, this run" not in scope_labels(card)
    assert "This tool for 1 hour" in scope_labels(card)
    assert choose_scope(stack.bot_url, first["id"], Scope.HOURS_1, card.ts) == 200
    wait_status(stack.conn, first["id"], Status.APPROVED)
    grant = _grant_of(stack, first["id"])
    assert client.request("rotate_key", {"name": "b"})["status"] == "approved"
    # An hour later (the grant's record says when it ends; nothing else is changed):
    raw = stack.conn.hget(store.keys.grant_key(grant.id), "record")
    assert isinstance(raw, bytes)
    record = json.loads(raw)
    record["expires_at"] = record["created_at"] - 1
    stack.conn.hset(store.keys.grant_key(grant.id), "record", json.dumps(record))
    assert client.request("rotate_key", {"name": "c"})["status"] == "pending"


def test_grantable_false_and_quorum_requests_offer_no_grant(stack: Stack) -> None:
    """grantable=False, or two approvals required: the card offers no scope menu."""
    client = stack.client(stack.token("no-grants"))
    single = client.request("wipe", {"disk": "a"}, grantable=False, run_id="r1")
    quorum = client.request("wipe", {"disk": "b"}, approvals_required=2, run_id="r1")
    assert scope_labels(card_of(stack.slack, single["id"])) == []
    assert scope_labels(card_of(stack.slack, quorum["id"])) == []
    assert store.records.load(stack.conn, single["id"]).policy.grantable is False
