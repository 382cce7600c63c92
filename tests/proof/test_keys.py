"""`approvals keys generate|rotate|jwks` and `approvals receipt verify`, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from approvals import store
from approvals.cli.main import cli
from approvals.models import Status
from approvals.proof import keys, receipts
from tests.factories import make_approval


def _invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli, list(args), env=env)


def test_generate_prints_the_kid_that_jwks_publishes(tmp_path: Path):
    """The kid printed at generation is the one in the JWKS, with the contract's fields."""
    path = str(tmp_path / "k.pem")
    generated = _invoke("keys", "generate", path)
    assert generated.exit_code == 0, generated.output
    shown = _invoke("keys", "jwks", env={"APPROVALS_SIGNING_KEY": path})
    [jwk] = json.loads(shown.output)["keys"]
    assert jwk["kid"] == generated.output.strip()
    assert (jwk["kty"], jwk["crv"], jwk["alg"], jwk["use"]) == ("OKP", "Ed25519", "EdDSA", "sig")
    assert "d" not in jwk  # never the private part


def test_rotate_keeps_the_old_key_verifying(tmp_path: Path):
    """Rotation prints the new settings; the old key's public half stays in the JWKS."""
    old = str(tmp_path / "old.pem")
    old_kid = keys.generate_key(old)
    new = str(tmp_path / "new.pem")
    rotated = _invoke("keys", "rotate", new, env={"APPROVALS_SIGNING_KEY": old})
    assert rotated.exit_code == 0, rotated.output
    assert f"APPROVALS_SIGNING_KEY={new}" in rotated.output
    assert f"APPROVALS_VERIFY_KEYS={old}.pub.pem" in rotated.output
    settled = {"APPROVALS_SIGNING_KEY": new, "APPROVALS_VERIFY_KEYS": f"{old}.pub.pem"}
    kids = [k["kid"] for k in json.loads(_invoke("keys", "jwks", env=settled).output)["keys"]]
    assert kids == [keys.kid_of(keys.load_private_key(new).public_key()), old_kid]


def test_receipt_verify_explains_and_says_why_it_fails(tmp_path: Path):
    """The claims are printed; a match says valid, other arguments exit 1 with the reason."""
    path = str(tmp_path / "k.pem")
    keys.generate_key(path)
    token = receipts.sign_receipt(
        path,
        approval_id="a1",
        tool="delete_path",
        arguments={"path": "a"},
        tool_call_id="tc_1",
        decision="approve",
        approvers=["UALICE"],
        requested_by=None,
        agent="x",
        ttl=600,
    )
    env = {"APPROVALS_SIGNING_KEY": path}
    good = _invoke("receipt", "verify", token, "--args", '{"path": "a"}', env=env)
    assert good.exit_code == 0, good.output
    assert '"UALICE"' in good.output and "valid:" in good.output
    bad = _invoke("receipt", "verify", token, "--args", '{"path": "b"}', env=env)
    assert bad.exit_code == 1
    assert "arguments differ" in bad.output
    other = _invoke("receipt", "verify", token, "--args", '{"path": "a"}', "--tool", "rm", env=env)
    assert other.exit_code == 1 and "not 'rm'" in other.output


def test_an_unreadable_signing_key_stops_the_cli_before_it_decides(env, conn, tmp_path: Path):
    """Fail closed and early: no decision is recorded that no receipt could back."""
    approval = make_approval()
    store.records.create(conn, approval, []).execute()
    missing = {"APPROVALS_SIGNING_KEY": str(tmp_path / "nowhere.pem")}
    refused = _invoke("approve", approval.id, env=missing)
    assert refused.exit_code == 1
    assert "cannot read key" in refused.output
    assert store.records.load(conn, approval.id).status is Status.PENDING
