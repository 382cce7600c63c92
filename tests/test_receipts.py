"""Receipts: real Ed25519 keys and real tokens, checked by ``verify_receipt`` and by PyJWT alone."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import jwt
import pytest

from approvals import InvalidReceipt, keys, receipts, verify_receipt
from approvals.config import Settings
from approvals.receipts import DecidedBy

ARGS = {"path": "/srv/data/old.csv", "force": False}


@pytest.fixture
def key_path(tmp_path: Path) -> str:
    path = tmp_path / "signing.pem"
    keys.generate_key(path)
    return str(path)


def _sign(key_path: str, **overrides: object) -> str:
    claims: dict[str, object] = {
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
    claims.update(overrides)
    return receipts.sign_receipt(key_path, **claims)  # type: ignore[arg-type]


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


def test_require_person_refuses_a_grant(key_path):
    """A call a grant released verifies, but not when a person's decision is required."""
    token = _sign(key_path, decided_by=DecidedBy.GRANT)
    jwks = _jwks(key_path)
    assert (
        verify_receipt(token, tool="delete_path", arguments=ARGS, keys=jwks).decided_by == "grant"
    )
    with pytest.raises(InvalidReceipt, match="no person approved"):
        verify_receipt(token, tool="delete_path", arguments=ARGS, keys=jwks, require_person=True)


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
        *("iss", "sub", "jti", "iat", "exp", "tool", "args_sha256", "tool_call_id"),
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
