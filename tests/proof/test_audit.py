"""The audit trail: every event of a full run, with time and actor, shown by `approvals show`."""

from __future__ import annotations

import getpass
import json
import threading
import time

import jwt
import pytest
from click.testing import CliRunner

from approvals import run_agent, store
from approvals.cli.main import cli
from approvals.config import Settings
from approvals.decisions import review
from approvals.models import DecisionKind, Status
from approvals.proof import audit, keys, receipts, webhooks
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, list_files
from tests.e2e import card_of, click, submit_edit, wait_status
from tests.factories import make_approval


def test_a_full_run_leaves_a_complete_audit_trail(services, slack, env, conn):
    """Paused, card, refused click, edit with old/new arguments, resume, tool result, end."""
    prompt = script(calls(("list_files", {"path": "."}), ("delete_path", {"path": "a"})), say("ok"))
    pause_id = run_agent(
        "scripted", prompt, tools=[list_files, delete_path], agent="auditor", requested_by="UREQ"
    ).pause_id
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "approve", pause_id, "UREQ", card.ts)  # self-approval: refused
    slack.wait_for(lambda: slack.responses())
    submit_edit(services.bot_url, pause_id, {"path": "b"}, user="UALICE")
    wait_status(conn, pause_id, Status.COMPLETED)
    wait_until_published = slack.wait_for(
        lambda: any(
            e["event"] == "resume_finished" for e in store.audit.audit_trail(conn, pause_id)
        )
    )
    assert wait_until_published

    trail = store.audit.audit_trail(conn, pause_id)
    events = [e["event"] for e in trail]
    assert events == [
        "paused",
        "card_posted",
        "refused",
        "edited",
        "resume_started",
        "resume_finished",
    ]
    by_event = {e["event"]: e for e in trail}
    assert by_event["paused"]["actor"] == "auditor"
    assert by_event["refused"]["actor"] == "UREQ"
    assert "someone else" in by_event["refused"]["reason"]
    assert by_event["edited"]["actor"] == "UALICE"
    assert by_event["edited"]["proposed"] == '{"path": "a"}'
    assert by_event["edited"]["approved"] == '{"path": "b"}'
    assert by_event["resume_finished"]["status"] == "completed"
    assert by_event["resume_finished"]["executed_arguments"] == '{"path": "b"}'
    assert by_event["resume_finished"]["tool_output"].endswith("deleted b")
    assert all(float(e["at"]) > 0 for e in trail)
    times = [float(e["at"]) for e in trail]
    assert times == sorted(times)

    shown = CliRunner().invoke(cli, ["show", pause_id])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert '"status": "completed"' in shown.output
    for event in events:
        assert any(f" {event} " in line for line in lines), event


# --- the chain: each entry names the hash of the one before it ---------------------------------


@pytest.fixture
def signed(env, conn, tmp_path, monkeypatch):
    """A pending approval, and a CLI that holds a signing key."""
    key = str(tmp_path / "signing.pem")
    keys.generate_key(key)
    monkeypatch.setenv("APPROVALS_SIGNING_KEY", key)
    approval = make_approval()
    store.records.create(conn, approval, []).execute()
    return approval


def test_an_operator_approval_carries_a_receipt_and_the_chain_verifies(signed, conn):
    """`approve` from the CLI signs a receipt; `show --verify` checks chain and signature."""
    assert CliRunner().invoke(cli, ["approve", signed.id]).exit_code == 0
    trail = store.audit.audit_trail(conn, signed.id)
    decided = next(e for e in trail if e["event"] == "approved")
    assert decided["receipt"] == store.records.load(conn, signed.id).receipt
    claims = jwt.decode(decided["receipt"], options={"verify_signature": False})
    assert claims["approvers"] == [f"cli:{getpass.getuser()}"]
    assert claims["decided_by"] == "person"
    shown = CliRunner().invoke(cli, ["show", signed.id, "--verify"])
    assert shown.exit_code == 0, shown.output
    assert "verified: 2 audit entries chained, 1 receipt(s) signed" in shown.output


@pytest.mark.parametrize("tamper", ["edit", "delete", "insert"])
def test_show_verify_catches_an_edited_audit_entry(signed, conn, tamper):
    """Changing, removing or inserting an entry in Redis breaks the chain: exit 1, and where."""
    store.audit.append(conn, signed.id, "refused", "UEVE", reason="not an approver")
    assert CliRunner().invoke(cli, ["approve", signed.id]).exit_code == 0
    key = store.keys.audit_key(signed.id)
    if tamper == "edit":
        entry = json.loads(conn.lindex(key, 1))
        entry["actor"] = "UMALLORY"
        conn.lset(key, 1, json.dumps(entry))
    elif tamper == "delete":
        conn.lrem(key, 1, conn.lindex(key, 1))
    else:
        conn.linsert(
            key, "BEFORE", conn.lindex(key, 1), store.audit.audit_entry("approved", "UEVE")
        )
    shown = CliRunner().invoke(cli, ["show", signed.id, "--verify"])
    assert shown.exit_code == 1
    assert "does not follow entry" in shown.output
    assert "does not verify" in shown.output


def test_show_verify_refuses_a_trail_removed_whole_or_from_its_start(signed, conn):
    """A trail deleted whole, or cut so that what is left begins a new chain, does not
    verify: "no entries" is never read as "nothing wrong"."""
    key = store.keys.audit_key(signed.id)
    conn.delete(key)
    shown = CliRunner().invoke(cli, ["show", signed.id, "--verify"])
    assert shown.exit_code == 1
    assert "the audit trail is empty" in shown.output
    store.audit.append(conn, signed.id, "refused", "UEVE", reason="a fresh chain after the cut")
    shown = CliRunner().invoke(cli, ["show", signed.id, "--verify"])
    assert shown.exit_code == 1
    assert "entry 1 is not 'paused'" in shown.output


def test_a_decision_rewritten_to_other_arguments_no_longer_matches_its_receipt(env, conn, tmp_path):
    """An edit entry whose arguments were changed is caught by its receipt, not only the chain."""
    key = str(tmp_path / "k.pem")
    keys.generate_key(key)
    token = receipts.sign_receipt(
        key,
        approval_id="a1",
        tool="delete_path",
        arguments={"path": "b"},
        tool_call_id="tc_1",
        decision="edit",
        approvers=["UALICE"],
        requested_by=None,
        agent="x",
        ttl=600,
    )
    first = json.dumps({"event": "paused", "prev": store.audit.GENESIS}).encode()
    second = json.dumps(
        {
            "event": "edited",
            "approved": '{"path": "/etc"}',
            "receipt": token,
            "prev": store.audit.entry_hash(first),
        }
    )
    check = audit.check_lines("a1", [first, second.encode()], keys.jwks(Settings(signing_key=key)))
    assert check.problems == [
        "entry 2 (edited): its approved arguments differ from the ones its receipt was signed for"
    ]


def test_entries_written_at_the_same_moment_still_form_one_chain(signed, conn):
    """Many writers at once (bot clicks, workers): the compare-and-append keeps one chain."""
    threads = [
        threading.Thread(target=store.audit.append, args=(conn, signed.id, "refused", f"U{n}"))
        for n in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check = audit.check_trail(conn, signed.id, {"keys": []})
    assert (check.entries, check.problems) == (21, [])


def test_audit_export_writes_ndjson_since_a_time(signed, conn):
    """`audit export --since` prints one JSON object per entry, with its approval and hash."""
    assert CliRunner().invoke(cli, ["approve", signed.id]).exit_code == 0
    exported = CliRunner().invoke(
        cli, ["audit", "export", "--since", "2020-01-01T00:00:00Z", "--format", "ndjson"]
    )
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in exported.output.splitlines()]
    assert [e["event"] for e in lines] == ["paused", "approved"]
    assert all(e["approval_id"] == signed.id for e in lines)
    assert lines[1]["prev"] == store.audit.entry_hash(store.audit.audit_lines(conn, signed.id)[0])
    later = CliRunner().invoke(cli, ["audit", "export", "--since", str(time.time() + 60)])
    assert later.output == ""


def test_audit_ttl_expires_a_trail_once_its_approval_finished(env, conn):
    """APPROVALS_AUDIT_TTL: a finished approval's trail expires that long after its last
    state change; a waiting one's never does (its chain would restart halfway); unset, none
    expires."""
    kept = Settings.from_env(env)
    limited = Settings.from_env({**env, "APPROVALS_AUDIT_TTL": "3600"})
    for approval_id in ("waiting1", "done1", "done2"):
        store.records.create(conn, make_approval(id=approval_id), []).execute()

    def finish(approval_id: str) -> None:
        review.decide(conn, limited, approval_id, DecisionKind.APPROVE, "UALICE")
        store.transitions.transition(conn, approval_id, Status.RUNNING)
        store.transitions.transition(conn, approval_id, Status.COMPLETED)

    finish("done1")
    webhooks.drain(conn, limited)  # every worker drains the outbox; it applies the TTL
    assert conn.ttl(store.keys.audit_key("waiting1")) == -1
    assert 3500 < conn.ttl(store.keys.audit_key("done1")) <= 3600
    finish("done2")
    webhooks.drain(conn, kept)
    assert conn.ttl(store.keys.audit_key("done2")) == -1
