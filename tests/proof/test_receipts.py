"""Receipts: real Ed25519 keys and real tokens, checked by ``verify_receipt`` and by PyJWT alone."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path

import jwt
import pytest

from approvals import InvalidReceipt, run_agent, store, verify_receipt
from approvals.config import Settings
from approvals.decisions import grants, review
from approvals.models import DecisionKind, Policy, Status
from approvals.proof import keys, receipts
from approvals.proof.receipts import DecidedBy
from tests.agents.downstream_tools import (
    archive_table,
    call_service,
    delete_row,
    delete_row_ungated,
)
from tests.agents.scripted import calls, say, script
from tests.downstream import Downstream, fetch_jwks
from tests.e2e import card_of, click, submit_edit, wait_status
from tests.factories import make_approval
from tests.processes import (
    approvals_command,
    bot_url,
    start_bot,
    start_worker,
    stop_all,
    wait_for_workers,
    wait_until,
)

ARGS = {"path": "/srv/data/old.csv", "force": False}


@pytest.fixture
def key_path(tmp_path: Path) -> str:
    path = tmp_path / "signing.pem"
    keys.generate_key(path)
    return str(path)


_CLAIMS: dict[str, object] = {
    "approval_id": "a1b2c3",
    "tool": "delete_path",
    "arguments": ARGS,
    "tool_call_id": "tc_1",
    "decision": "approve",
    "approvers": ["UALICE"],
    "requested_by": "UBOB",
    "agent": "cleanup-bot",
    "ttl": 600,
}


def _sign(key_path: str, **overrides: object) -> str:
    return receipts.sign_receipt(key_path, **{**_CLAIMS, **overrides})  # type: ignore[arg-type]


def _jwks(*paths: str) -> dict[str, object]:
    return keys.jwks(Settings(signing_key=paths[0], verify_keys=paths[1:]))


def test_a_receipt_verifies_for_its_tool_and_arguments(key_path):
    """The claims come back as signed: approval, tool, call, decision, people, what decided."""
    receipt = verify_receipt(
        _sign(key_path), tool="delete_path", arguments=ARGS, keys=_jwks(key_path)
    )
    assert receipt.approval_id == "a1b2c3"
    assert receipt.tool_call_id == "tc_1"
    assert receipt.approvers == ("UALICE",)
    assert receipt.requested_by == "UBOB"
    assert receipt.agent == "cleanup-bot"
    assert receipt.decided_by is DecidedBy.PERSON
    assert receipt.expires_at - receipt.issued_at == 600


def test_key_order_and_spacing_of_the_arguments_do_not_matter(key_path):
    """The digest is over RFC 8785 canonical JSON, so any JSON library's dict matches."""
    reordered = json.loads('{"force": false,   "path": "/srv/data/old.csv"}')
    verify_receipt(_sign(key_path), tool="delete_path", arguments=reordered, keys=_jwks(key_path))


@pytest.mark.parametrize(
    ("tool", "arguments", "why"),
    [
        ("drop_table", ARGS, "for tool 'delete_path', not 'drop_table'"),
        ("delete_path", {**ARGS, "path": "/srv/data/old.csv "}, "arguments differ"),
        ("delete_path", {**ARGS, "force": True}, "arguments differ"),
        ("delete_path", {"path": "/srv/data/old.csv"}, "arguments differ"),
    ],
)
def test_another_tool_or_other_arguments_are_refused(key_path, tool, arguments, why):
    """One byte of difference in the arguments, or another tool, and the receipt is refused."""
    with pytest.raises(InvalidReceipt, match=why):
        verify_receipt(_sign(key_path), tool=tool, arguments=arguments, keys=_jwks(key_path))


def test_expired_and_future_receipts_are_refused(key_path):
    """A receipt past its expiry, or issued in the future, says so."""
    old = _sign(key_path, now=time.time() - 700)
    with pytest.raises(InvalidReceipt, match="expired"):
        verify_receipt(old, tool="delete_path", arguments=ARGS, keys=_jwks(key_path))
    future = _sign(key_path, now=time.time() + 120)
    with pytest.raises(InvalidReceipt, match="not valid yet"):
        verify_receipt(future, tool="delete_path", arguments=ARGS, keys=_jwks(key_path))


def test_unknown_key_and_bad_signature_are_refused(key_path, tmp_path):
    """A receipt of another key is unknown; a changed claim breaks the signature."""
    other = str(tmp_path / "other.pem")
    keys.generate_key(other)
    with pytest.raises(InvalidReceipt, match="unknown key"):
        verify_receipt(_sign(other), tool="delete_path", arguments=ARGS, keys=_jwks(key_path))
    header, payload, signature = _sign(key_path).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["tool"] = "drop_table"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(InvalidReceipt, match="signature does not match"):
        verify_receipt(
            f"{header}.{forged}.{signature}",
            tool="drop_table",
            arguments=ARGS,
            keys=_jwks(key_path),
        )


def test_a_token_with_another_algorithm_is_refused(key_path):
    """An HS256 token "signed" with the public key (the classic confusion) is refused."""
    kid = _jwks(key_path)["keys"][0]["kid"]  # type: ignore[index]
    token = jwt.encode({"sub": "x"}, "s" * 32, algorithm="HS256", headers={"kid": kid})
    with pytest.raises(InvalidReceipt, match="not EdDSA"):
        verify_receipt(token, tool="delete_path", arguments=ARGS, keys=_jwks(key_path))


@pytest.mark.parametrize(
    ("decided_by", "names", "why"),
    [
        (
            DecidedBy.GRANT,
            {"grant": "g-42", "granted_by": "UALICE"},
            "grant g-42 \\(made by UALICE\\) released it",
        ),
        (DecidedBy.RULE, {"rule": "reads-are-fine"}, "rule reads-are-fine released it"),
    ],
)
def test_require_person_refuses_a_grant_or_a_rule(key_path, decided_by, names, why):
    """A receipt for a call a grant or rule released names what decided it; it verifies,
    but not when the service requires that a person said yes."""
    token = _sign(key_path, decided_by=decided_by, **names)
    jwks = _jwks(key_path)
    receipt = verify_receipt(token, tool="delete_path", arguments=ARGS, keys=jwks)
    assert receipt.decided_by is decided_by
    assert {n: getattr(receipt, n) for n in names} == names
    with pytest.raises(InvalidReceipt, match=f"no person approved this call: {why}"):
        verify_receipt(token, tool="delete_path", arguments=ARGS, keys=jwks, require_person=True)


@pytest.mark.parametrize(
    ("decided_by", "names"),
    [
        (DecidedBy.GRANT, {"grant": "g-42"}),  # who made the grant is missing
        (DecidedBy.RULE, {}),
        (DecidedBy.PERSON, {"rule": "reads-are-fine"}),
    ],
)
def test_a_receipt_must_name_exactly_what_decided(key_path, decided_by, names):
    """Signing refuses a grant without its maker, a rule without its id, a person with a
    rule; a token signed that way anyway (by another implementation) is refused as malformed."""
    with pytest.raises(ValueError, match="receipt names"):
        _sign(key_path, decided_by=decided_by, **names)
    claims = {
        "iss": "approvals",
        "sub": "a1b2c3",
        "jti": "j1",
        "iat": int(time.time()),
        "exp": int(time.time()) + 600,
        "tool": "delete_path",
        "args_sha256": receipts.args_sha256(ARGS),
        "tool_call_id": "tc_1",
        "decision": "approve",
        "approvers": [],
        "requested_by": None,
        "agent": "x",
        "decided_by": decided_by.value,
        **names,
    }
    kid = _jwks(key_path)["keys"][0]["kid"]  # type: ignore[index]
    token = jwt.encode(
        claims, keys.load_private_key(key_path), algorithm="EdDSA", headers={"kid": kid}
    )
    with pytest.raises(InvalidReceipt, match="claims are malformed"):
        verify_receipt(token, tool="delete_path", arguments=ARGS, keys=_jwks(key_path))


def test_rotation_an_old_key_verifies_until_it_is_retired(key_path, tmp_path):
    """After a rotation the JWKS lists both keys; once retired, the old key's receipts fail."""
    old_receipt = _sign(key_path)
    old_public = tmp_path / "old.pub.pem"
    keys.write_public_key(key_path, old_public)
    new_key = str(tmp_path / "new.pem")
    keys.generate_key(new_key)
    during = _jwks(new_key, str(old_public))
    assert len(during["keys"]) == 2  # type: ignore[arg-type]
    verify_receipt(old_receipt, tool="delete_path", arguments=ARGS, keys=during)
    verify_receipt(_sign(new_key), tool="delete_path", arguments=ARGS, keys=during)
    with pytest.raises(InvalidReceipt, match="unknown key"):
        verify_receipt(old_receipt, tool="delete_path", arguments=ARGS, keys=_jwks(new_key))


def test_any_jwt_library_reads_it_with_the_jwks(key_path):
    """The contract: a compact JWS with the documented header, checkable by PyJWT alone."""
    token = _sign(key_path)
    jwks = _jwks(key_path)
    header = jwt.get_unverified_header(token)
    assert header == {"alg": "EdDSA", "kid": jwks["keys"][0]["kid"], "typ": "JWT"}  # type: ignore[index]
    key = jwt.PyJWKSet.from_dict(jwks)[header["kid"]]
    claims = jwt.decode(token, key, algorithms=["EdDSA"], issuer="approvals")
    assert set(claims) == {
        *("iss", "sub", "jti", "iat", "nbf", "exp", "tool", "args_sha256", "tool_call_id"),
        *("decision", "approvers", "requested_by", "agent", "decided_by"),
    }
    assert claims["args_sha256"] == receipts.args_sha256(ARGS)
    assert jwks["keys"][0].keys() == {"kty", "crv", "x", "kid", "alg", "use"}  # type: ignore[index]


def test_a_replayed_receipt_is_refused(key_path, conn):
    """The replay helper remembers a receipt's id in Redis for its lifetime."""
    receipt = verify_receipt(
        _sign(key_path), tool="delete_path", arguments=ARGS, keys=_jwks(key_path)
    )
    receipts.check_not_replayed(conn, receipt)
    with pytest.raises(InvalidReceipt, match="used already"):
        receipts.check_not_replayed(conn, receipt)
    assert 0 < conn.ttl(f"approvals:receipt:{receipt.jti}") <= 601


def test_a_key_is_never_overwritten(key_path):
    """Generating onto an existing file refuses: the key in use would be lost."""
    with pytest.raises(Exception, match="exists already"):
        keys.generate_key(key_path)
    assert Path(key_path).stat().st_mode & 0o777 == 0o600


# --- end to end: the bot signs, the worker hands it on, a real service checks it -------------


@pytest.fixture
def acting(env, tmp_path, conn, monkeypatch):
    """A data service, and a bot holding the signing key with a worker that does not."""
    key = str(tmp_path / "signing.pem")
    keys.generate_key(key)
    service = Downstream(jwks={"keys": []}, replays=conn).start()
    monkeypatch.setenv("DOWNSTREAM_URL", service.url)
    run_env = {**env, "DOWNSTREAM_URL": service.url, "APPROVALS_TOOL_MODULES": "tests.agents"}
    bot = start_bot(run_env, tmp_path / "bot.log", {"APPROVALS_SIGNING_KEY": key})
    worker = start_worker(run_env, tmp_path / "worker.log", f"w-receipts-{time.monotonic_ns()}")
    try:
        url = bot_url(bot)
        wait_for_workers(run_env, [worker], 1)
        service.jwks = fetch_jwks(url)  # GET /.well-known/jwks.json on the bot
        assert service.jwks == keys.jwks(Settings(signing_key=key))
        yield url, service, worker
    finally:
        stop_all([bot, worker])
        service.stop()


def _pause(env, row: str = "u-7") -> str:
    prompt = script(calls(("delete_row", {"table": "users", "row": row})), say("{results}"))
    outcome = run_agent("scripted", prompt, tools=[delete_row], agent="db-bot", requested_by="UBOB")
    assert outcome.pause_id is not None
    return outcome.pause_id


def test_a_call_approved_in_slack_is_accepted_by_the_service(acting, slack, env, conn):
    """Approve in Slack: the tool's receipt deletes the row; presenting it again is a replay."""
    bot, service, _ = acting
    pause_id = _pause(env)
    click(slack, bot, "approve", pause_id, "UALICE", card_of(slack, pause_id).ts)
    wait_status(conn, pause_id, Status.COMPLETED)
    assert service.deleted == [{"table": "users", "row": "u-7"}]
    first = service.answers[-1]
    assert (first.status, first.text) == (200, "deleted u-7 for UALICE")
    receipt = verify_receipt(
        first.token, tool="delete_row", arguments=first.arguments, keys=service.jwks
    )
    assert (receipt.approval_id, receipt.decision, receipt.requested_by) == (
        pause_id,
        "approve",
        "UBOB",
    )
    assert store.records.load(conn, pause_id).receipt == first.token
    replayed = call_service(first.arguments, first.token)
    assert replayed.startswith("403") and "used already" in replayed
    assert call_service(first.arguments, None).startswith("401")
    assert len(service.deleted) == 1


def test_the_receipt_is_handed_to_its_call_only(acting, slack, env, conn):
    """After the released call, the next call of the resumed chain (an ungated tool asking
    for the same deletion) gets no receipt: receipt() is None outside a released call."""
    bot, service, _ = acting
    row = {"table": "users", "row": "u-7"}
    prompt = script(calls(("delete_row", row)), calls(("delete_row_ungated", row)), say("ok"))
    pause_id = run_agent(
        "scripted", prompt, tools=[delete_row, delete_row_ungated], agent="db-bot"
    ).pause_id
    assert pause_id is not None
    click(slack, bot, "approve", pause_id, "UALICE", card_of(slack, pause_id).ts)
    wait_status(conn, pause_id, Status.COMPLETED)
    assert [(a.status, a.token is None) for a in service.answers] == [(200, False), (401, True)]
    assert service.deleted == [row]


def test_an_edited_call_succeeds_only_with_the_edited_receipt(acting, slack, env, conn):
    """After an edit the receipt names the edited arguments: the proposed ones are refused."""
    _, service, _ = acting
    bot = acting[0]
    pause_id = _pause(env, row="u-1")
    card_of(slack, pause_id)
    submit_edit(bot, pause_id, {"row": "u-2"})
    wait_status(conn, pause_id, Status.COMPLETED)
    assert service.deleted == [{"table": "users", "row": "u-2"}]
    token = service.answers[-1].token
    assert token is not None
    refused = call_service({"table": "users", "row": "u-1"}, token)
    assert refused.startswith("403") and "arguments differ" in refused
    assert jwt.decode(token, options={"verify_signature": False})["decision"] == "edit"


def test_a_tool_in_the_worker_process_cannot_produce_a_receipt(acting, slack, env, conn):
    """A compromised tool, run by the real worker process (which holds no key), tries to
    delete a row it was never approved for: with its own receipt, with one it signs with a
    key of its own, and with its receipt's claims rewritten. The service refuses each."""
    bot, service, worker = acting
    prompt = script(calls(("archive_table", {"table": "users"})), say("{results}"))
    pause_id = run_agent(
        "scripted", prompt, tools=[archive_table], agent="db-bot", requested_by="UBOB"
    ).pause_id
    assert pause_id is not None
    click(slack, bot, "approve", pause_id, "UALICE", card_of(slack, pause_id).ts)
    wait_status(conn, pause_id, Status.COMPLETED)
    [ended] = [
        e for e in store.audit.audit_trail(conn, pause_id) if e["event"] == "resume_finished"
    ]
    report = json.loads(ended["tool_output"])
    # It ran in the worker: in RQ's work-horse, forked by the worker process we started.
    assert worker.popen.pid in (report["pid"], report["parent"])
    assert report["signing_key"] is None and report["had_receipt"] is True
    assert report["own_receipt"].startswith("403") and "not 'delete_row'" in report["own_receipt"]
    assert report["own_key"].startswith("403") and "unknown key" in report["own_key"]
    assert report["edited_claims"].startswith("403")
    assert "signature does not match" in report["edited_claims"]
    assert [a.status for a in service.answers] == [403, 403, 403]
    assert service.deleted == []


def test_a_worker_refuses_to_start_holding_the_signing_key(env, tmp_path):
    """The worker never holds the key: given one, it stops at start-up and says why."""
    key = str(tmp_path / "k.pem")
    keys.generate_key(key)
    run = subprocess.run(
        approvals_command("worker", "--burst"),
        env={**os.environ, **env, "APPROVALS_SIGNING_KEY": key},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert "only the bot and the CLI may hold it" in run.stderr


# --- grants and rules: released in the process we distrust, so no receipt --------------------

RULES = """
[[rule]]
id = "scratch-rows"
tool = "delete_row"
when = 'args.table == "scratch"'
action = "approve"
"""


@pytest.fixture
def service(conn, key_path, monkeypatch):
    """The data service alone, trusting this deployment's key (no bot needed here)."""
    running = Downstream(jwks=_jwks(key_path), replays=conn).start()
    monkeypatch.setenv("DOWNSTREAM_URL", running.url)
    try:
        yield running
    finally:
        running.stop()


def _delete(agent: str, table: str, row: str):
    prompt = script(calls(("delete_row", {"table": table, "row": row})), say("{results}"))
    return run_agent("scripted", prompt, tools=[delete_row], agent=agent, requested_by="UBOB")


def test_a_call_a_rule_releases_has_no_receipt_and_the_service_refuses_it(
    service, env, conn, tmp_path, monkeypatch
):
    """The rule decides in the agent's own process, which holds no key: receipt() is None
    there, and a service that requires a person's receipt deletes nothing."""
    rules = tmp_path / "policy.toml"
    rules.write_text(RULES)
    monkeypatch.setenv("APPROVALS_POLICY", str(rules))
    outcome = _delete("db-bot", "scratch", "s-1")
    assert outcome.status == "completed"
    assert [(a.status, a.token) for a in service.answers] == [(401, None)]
    assert service.deleted == []
    [decided] = [a for a in store.pending.recent_decisions(conn, 10) if a.tool_name == "delete_row"]
    assert decided.decision is not None and decided.decision.decided_by is DecidedBy.RULE
    assert decided.receipt is None


def test_a_call_a_grant_releases_has_no_receipt_but_the_persons_call_has_one(
    service, env, conn, key_path
):
    """Alice approves with "this tool for 1 hour": her call's receipt is a person's; the next
    call, let through by her grant in the agent's process, has none and is refused."""
    settings = Settings.from_env({**env, "APPROVALS_SIGNING_KEY": key_path})
    first = _delete("db-bot", "users", "u-1")
    assert first.pause_id is not None
    grants.approve_with_scope(conn, settings, first.pause_id, grants.Scope.HOURS_1, "UALICE")
    token = store.records.load(conn, first.pause_id).receipt
    assert token is not None
    person = verify_receipt(
        token, tool="delete_row", arguments={"table": "users", "row": "u-1"}, keys=service.jwks
    )
    assert (person.decided_by, person.approvers) == (DecidedBy.PERSON, ("UALICE",))
    second = _delete("db-bot", "users", "u-2")
    assert second.status == "completed"  # the grant let it through without a card
    assert [(a.status, a.arguments["row"]) for a in service.answers] == [(401, "u-2")]
    assert service.deleted == []
    [granted] = [a for a in store.pending.recent_decisions(conn, 10) if a.id != first.pause_id]
    assert granted.decision is not None and granted.decision.decided_by is DecidedBy.GRANT
    assert granted.receipt is None


def test_a_run_that_starts_after_its_receipt_expired_is_refused_and_says_why(
    service, env, conn, key_path, tmp_path
):
    """The receipt's clock starts at the decision: when no worker takes the run until it has
    expired, the service refuses the call, and the audit trail says the receipt had expired."""
    decider = Settings.from_env(
        {**env, "APPROVALS_SIGNING_KEY": key_path, "APPROVALS_RECEIPT_TTL": "1"}
    )
    pause_id = _delete("db-bot", "users", "u-3").pause_id
    assert pause_id is not None
    review.decide(conn, decider, pause_id, DecisionKind.APPROVE, "UALICE")
    token = store.records.load(conn, pause_id).receipt
    assert token is not None
    expires = jwt.decode(token, options={"verify_signature": False})["exp"]
    wait_until(lambda: time.time() > expires + 1, 10, "the receipt to expire")
    run = subprocess.run(  # the worker arrives late, and holds no key
        approvals_command("worker", "--burst"),
        env={**os.environ, **env, "DOWNSTREAM_URL": service.url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert store.records.load(conn, pause_id).status is Status.COMPLETED
    assert [(a.status, "expired" in a.text) for a in service.answers] == [(403, True)]
    assert service.deleted == []
    events = [e["event"] for e in store.audit.audit_trail(conn, pause_id)]
    assert events.index("resume_started") < events.index("receipt_expired")
    assert events.index("receipt_expired") < events.index("resume_finished")


# --- who the receipt names ----------------------------------------------------------------------


def _decider(env, key_path) -> Settings:
    return Settings.from_env({**env, "APPROVALS_SIGNING_KEY": key_path})


def test_a_quorum_receipt_names_every_approver(env, conn, key_path):
    """With approvals_required=2, the receipt is signed at the second approval, naming both."""
    settings = _decider(env, key_path)
    approval = make_approval(policy=Policy(approvals_required=2))
    store.records.create(conn, approval, []).execute()
    review.decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
    assert store.records.load(conn, approval.id).receipt is None  # one vote releases nothing
    review.decide(conn, settings, approval.id, DecisionKind.APPROVE, "UBOB")
    token = store.records.load(conn, approval.id).receipt
    assert token is not None
    receipt = verify_receipt(
        token, tool="delete_path", arguments=approval.arguments, keys=keys.jwks(settings)
    )
    assert receipt.approvers == ("UALICE", "UBOB")


def test_reject_and_respond_release_nothing_and_get_no_receipt(env, conn, key_path):
    """Only a decision that runs the tool is signed."""
    settings = _decider(env, key_path)
    for kind, extra in ((DecisionKind.REJECT, {}), (DecisionKind.RESPOND, {"response": "no"})):
        approval = make_approval(id=f"a{kind.value}")
        store.records.create(conn, approval, []).execute()
        review.decide(conn, settings, approval.id, kind, "UALICE", **extra)
        assert store.records.load(conn, approval.id).receipt is None


def test_a_retry_signs_a_fresh_receipt(env, conn, key_path):
    """Retrying an interrupted run re-signs: the first receipt may have expired meanwhile."""
    settings = _decider(env, key_path)
    approval = make_approval()
    store.records.create(conn, approval, []).execute()
    review.decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
    first = store.records.load(conn, approval.id).receipt
    store.transitions.transition(conn, approval.id, Status.RUNNING)
    store.transitions.transition(conn, approval.id, Status.INTERRUPTED)
    review.retry(conn, settings, approval.id, "UCAROL")
    again = store.records.load(conn, approval.id).receipt
    assert again is not None and again != first
    claims = verify_receipt(
        again, tool="delete_path", arguments=approval.arguments, keys=keys.jwks(settings)
    )
    assert claims.approvers == ("UALICE",)  # who approved these arguments
    retried = [e for e in store.audit.audit_trail(conn, approval.id) if e["event"] == "retried"]
    assert retried[0]["receipt"] == again
