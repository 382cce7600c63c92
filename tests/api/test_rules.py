"""APPROVALS_POLICY applied to API requests, end to end through the real API, bot, worker and
Slack stand-in: the same rules, verdicts and audit lines as a paused llm call (the stack's
rules are in tests/api/conftest.py, each for an agent of its own)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from approvals import store
from approvals.client import ApiError, Client
from approvals.models import Status
from tests.api.conftest import Stack
from tests.conftest import CHANNEL, wait_until
from tests.e2e import card_of, scope_labels, settled
from tests.processes import start_api


def _events(stack: Stack, approval_id: str) -> list[dict[str, Any]]:
    return store.audit.audit_trail(stack.conn, approval_id)


def _cards_of(stack: Stack, approval_id: str, channel: str = CHANNEL) -> list[str]:
    """The ts of every message in ``channel`` whose blocks name the approval."""
    return [m.ts for m in stack.slack.messages(channel) if approval_id in json.dumps(m.blocks)]


def test_a_rule_approves_at_once_with_no_card(stack: Stack) -> None:
    """The rule approves: the first answer is already approved by the rule, with no receipt
    (no key holder saw it), it is audited and in the recent decisions, and no card is posted;
    a call the rule does not cover waits for a person."""
    client = stack.client(stack.token("rules-approve"))
    made = client.request("publish", {"path": "docs/intro.md"}, summary="Publish the intro")
    assert made["status"] == "approved" and made["receipt"] is None
    decision = made["decision"]
    assert (decision["kind"], decision["actor"], decision["decided_by"], decision["rule_id"]) == (
        "approve", "rule:docs-are-fine", "rule", "docs-are-fine",
    )  # fmt: skip
    assert decision["arguments"] == {"path": "docs/intro.md"}
    assert client.wait(made["id"], timeout=5)["status"] == "approved"
    trail = _events(stack, made["id"])
    assert [e["event"] for e in trail] == ["paused", "approved"]
    assert trail[-1]["rule"] == "docs-are-fine"
    assert made["id"] in [a.id for a in store.pending.recent_decisions(stack.conn, limit=200)]
    other = client.request("publish", {"path": "src/app.py"})
    assert other["status"] == "pending"
    card_of(stack.slack, other["id"])
    done = client.report(made["id"], ok=True, output="published")
    assert done["status"] == "completed"
    assert [e["event"] for e in _events(stack, made["id"])][-1] == "result_reported"
    assert settled(lambda: _cards_of(stack, made["id"])) == []


def test_a_rule_rejects_with_its_reason(stack: Stack) -> None:
    """The rule rejects: the caller reads the rule's reason, nothing may be reported as done."""
    client = stack.client(stack.token("rules-reject"))
    made = client.request("deploy", {"env": "prod"})
    assert made["status"] == "rejected"
    assert made["decision"]["reason"] == "prod is frozen until Monday"
    assert made["decision"]["actor"] == "rule:prod-is-frozen"
    assert made["decision"]["arguments"] is None
    with pytest.raises(ApiError) as refused:
        client.report(made["id"], ok=True)
    assert refused.value.status == 409
    assert store.records.load(stack.conn, made["id"]).status is Status.REJECTED
    assert client.request("deploy", {"env": "staging"})["status"] == "pending"


def test_a_require_rule_sets_approvers_quorum_expiry_and_channel(stack: Stack) -> None:
    """The rule requires two of its approvers, in its channel, within its expiry: the card goes
    there, offers no grant, and the audit trail says which rule asked for it."""
    client = stack.client(stack.token("rules-require"))
    made = client.request("drop_table", {"table": "users"}, approvers=["UCAROL"], expires_in=999)
    assert made["status"] == "pending"
    approval = store.records.load(stack.conn, made["id"])
    assert approval.policy.approvers == ("UALICE", "UBOB")
    assert approval.policy.approvals_required == 2
    assert (approval.channel, approval.rule_id) == ("C0PROD", "two-sres")
    assert approval.expires_at - approval.created_at == pytest.approx(120)
    (card,) = wait_until(lambda: _cards_of(stack, made["id"], "C0PROD"), 20, "the card in C0PROD")
    assert scope_labels(stack.slack.message("C0PROD", card)) == []  # a quorum: no grants
    events = [e["event"] for e in _events(stack, made["id"])]
    assert events[:2] == ["paused", "rule_required"]


def test_a_shadow_rule_is_recorded_and_changes_nothing(stack: Stack) -> None:
    """A shadow rule that would reject: the request waits for a person as usual."""
    client = stack.client(stack.token("rules-shadow"))
    made = client.request("deploy", {"env": "prod"})
    assert made["status"] == "pending"
    card_of(stack.slack, made["id"])
    (shadow,) = [e for e in _events(stack, made["id"]) if e["event"] == "rule_shadow"]
    assert (shadow["rule"], shadow["would"]) == ("would-reject", "reject")


def test_a_rule_that_fails_to_evaluate_asks_a_person(stack: Stack) -> None:
    """The rule's expression reads an argument the request lacks: a card, never an approval,
    and the API's log and the audit trail say why."""
    client = stack.client(stack.token("rules-broken"))
    made = client.request("restart", {"service": "web"})
    assert made["status"] == "pending"
    card_of(stack.slack, made["id"])
    (failed,) = [e for e in _events(stack, made["id"]) if e["event"] == "rule_failed"]
    assert failed["error"].startswith("needs-a-ticket:")
    api = stack.processes[2]
    wait_until(lambda: "policy rule failed on restart" in api.output(), 10, "the API's warning")
    covered = client.request("restart", {"service": "web", "ticket": "OPS-1"})
    assert covered["status"] == "approved"


def test_a_broken_policy_file_refuses_every_request_until_fixed(
    stack: Stack, tmp_path: Path
) -> None:
    """Fail closed: a policy file that does not parse answers 503 and creates nothing; once
    fixed, it is read again and requests are asked as usual."""
    broken = tmp_path / "policy.toml"
    broken.write_text('[[rule]]\nid = "x"\naction = "approve"\nwhen = "args.path ==="\n')
    env = {**stack.env, "APPROVALS_POLICY": str(broken)}
    api, url = start_api(env, tmp_path / "api.log")
    try:
        client = Client(url, stack.token("rules-file-broken"))
        with client:
            with pytest.raises(ApiError) as refused:
                client.request("publish", {"path": "docs/a.md"})
            assert refused.value.status == 503
            assert "'when' is not valid CEL" in str(refused.value.detail)
            assert client.pending() == []
            broken.write_text("")  # fixed: no rules
            later = broken.stat().st_mtime + 2  # a new mtime even on a coarse-clocked disk
            os.utime(broken, (later, later))
            assert client.request("publish", {"path": "docs/a.md"})["status"] == "pending"
    finally:
        api.stop()
