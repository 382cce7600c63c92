"""Receipts checked in Node.js, as a JavaScript service would: ``jose`` against the JWKS the
bot serves, ``canonicalize`` (RFC 8785) for the arguments' hash, running exactly the code
docs/receipts.md shows; and it agrees with ``verify_receipt`` on every receipt."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from approvals import store
from approvals.calls import external
from approvals.config import Settings
from approvals.decisions import ijson, review
from approvals.errors import InvalidReceipt
from approvals.models import DecidedBy, DecisionKind
from approvals.proof import keys, receipts
from tests.decisions.test_ijson import IJSON_LEAVES
from tests.downstream import fetch_jwks
from tests.interop.node import HERE, run_node
from tests.processes import bot_url, start_bot

ROOT = HERE.parent.parent
TOOL = "sync"
TTL = 600
PLAIN = {"table": "users", "row": "u-7"}

#: Arguments every JSON parser reads alike (I-JSON), chosen where canonical forms differ most:
#: escapes, keys sorted by UTF-16 code units (not code points), the ES6 number forms.
HOSTILE: dict[str, dict[str, Any]] = {
    "text": {
        "path": "/srv/ünï cödé/😀/\u0000\u001f\u007f\u2028\u2029",
        "quoted": "\"\\/<>&'\b\f\n\r\t",
        "combining": "e\u0301 and \u00e9",
        "astral": "\U0001f600\U0010fffd",
    },
    "keys": {"ﬁ": 1, "😀": 2, "é": 3, "a": 4, "": 5, "A": 6, "\u0080": 7, "\u0000": 8},
    "numbers": {
        "safe_max": 2**53 - 1,
        "safe_min": -(2**53 - 1),
        "e21": 1e21,
        "e20": 1e20,
        "tenth": 0.1,
        "minus_zero": -0.0,
        "third": 1 / 3,
        "subnormal": 5e-324,
        "largest": 1.7976931348623157e308,
        "small": 1e-7,
        "negative_small": -1.5e-7,
        "integral_float": 2.0,
        "ids": [0, -1, 9007199254740990, 123456789012345],
    },
    "nested": {
        "deep": json.loads("[" * 40 + '{"k": {"v": [1, 2.5, "x", null, true]}}' + "]" * 40),
        "empty": [{}, [], "", 0, False, None],
        "mixed": {"z": {"y": {"x": [{"b": 1, "a": 2}]}}},
    },
    "large": {"blob": "ab\u00e9\U0001f600" * 4000, "many": list(range(2000))},
}


@pytest.fixture
def signing_bot(env, tmp_path: Path):
    """A bot in HTTP mode holding a signing key, with an older key still published: yields
    the JWKS address, the JWKS, and the two keys' files."""
    current, old = str(tmp_path / "signing.pem"), str(tmp_path / "old.pem")
    keys.generate_key(current)
    keys.generate_key(old)
    keys.write_public_key(old, f"{old}.pub.pem")
    published = {"APPROVALS_SIGNING_KEY": current, "APPROVALS_VERIFY_KEYS": f"{old}.pub.pem"}
    bot = start_bot(env, tmp_path / "bot.log", published)
    try:
        url = bot_url(bot)
        jwks_url = url.removesuffix("/slack/events") + "/.well-known/jwks.json"
        yield jwks_url, fetch_jwks(url), current, old
    finally:
        bot.stop()


#: A token, the tool it is shown for, the arguments, and the state the service finds now
#: (the fingerprint it checks; None: it checks none).
Case = tuple[str, str, dict[str, Any], str | None]


def _accepted(conn, deciding: Settings, old: str) -> dict[str, Case]:
    """Receipts the product signed: for the hostile arguments, decided as the bot decides;
    and one signed with the older key."""
    cases = {
        name: (_decided(conn, deciding, args), TOOL, args, None) for name, args in HOSTILE.items()
    }
    cases["older key"] = (_signed(old, PLAIN), TOOL, PLAIN, None)
    cases["the state it was approved on"] = (
        _decided(conn, deciding, PLAIN, fingerprint="rowversion:7"),
        TOOL,
        PLAIN,
        "rowversion:7",
    )
    return cases


def _decided(
    conn, deciding: Settings, arguments: dict[str, Any], fingerprint: str | None = None
) -> str:
    """The receipt of a call asked for through the API's door and approved by a person."""
    request = external.ExternalRequest(
        tool=TOOL, arguments=arguments, agent="interop", fingerprint=fingerprint
    )
    approval, _ = external.ask(conn, deciding, request)
    review.decide(conn, deciding, approval.id, DecisionKind.APPROVE, "UALICE")
    token = store.records.load(conn, approval.id).receipt
    assert token is not None
    return token


def _refused(current: str, stranger: str, jwks: dict[str, Any]) -> dict[str, tuple[Case, str]]:
    """Receipts a verifier must refuse, each with the start of why."""
    now = time.time()
    claims = receipts.unverified_claims(_signed(current, PLAIN))
    hs256 = {"alg": "HS256", "kid": jwks["keys"][0]["kid"], "typ": "JWT"}
    public_raw = base64.urlsafe_b64decode(jwks["keys"][0]["x"] + "==")
    grant = {"decided_by": DecidedBy.GRANT, "grant": "g1", "granted_by": "UALICE"}
    return {
        "expired": (
            (_signed(current, PLAIN, now=now - 3600), TOOL, PLAIN, None),
            "ERR_JWT_EXPIRED",
        ),
        "issued in the future": (
            (_signed(current, PLAIN, now=now + 3600), TOOL, PLAIN, None),
            "ERR_JWT_CLAIM_VALIDATION_FAILED",
        ),
        "unknown key": ((_signed(stranger, PLAIN), TOOL, PLAIN, None), "ERR_JWKS_NO_MATCHING_KEY"),
        "altered": (
            (_tampered(_signed(current, PLAIN)), "drop_table", PLAIN, None),
            "ERR_JWS_SIGNATURE_VERIFICATION_FAILED",
        ),
        "HS256 with the public key": (
            (_reforged(hs256, claims, public_raw), TOOL, PLAIN, None),
            "ERR_JOSE_ALG_NOT_ALLOWED",
        ),
        "unsigned": (
            (_reforged({"alg": "none"}, claims, b""), TOOL, PLAIN, None),
            "ERR_JOSE_ALG_NOT_ALLOWED",
        ),
        "another tool": (
            (_signed(current, PLAIN), "drop_table", PLAIN, None),
            "the receipt is for",
        ),
        "other arguments": (
            (_signed(current, PLAIN), TOOL, {**PLAIN, "row": "u-8"}, None),
            "the arguments differ",
        ),
        "a grant": ((_signed(current, PLAIN, **grant), TOOL, PLAIN, None), "no person approved"),
    }


def _signed(key: str, arguments: dict[str, Any], **overrides: Any) -> str:
    claims: dict[str, Any] = {
        "approval_id": "a-interop",
        "tool": TOOL,
        "arguments": arguments,
        "tool_call_id": "tc_1",
        "decision": "approve",
        "approvers": ["UALICE"],
        "requested_by": None,
        "agent": "interop",
        "ttl": TTL,
        **overrides,
    }
    return receipts.sign_receipt(key, **claims)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _reforged(header: dict[str, Any], claims: dict[str, Any], secret: bytes) -> str:
    """``claims`` under another header, MACed with HS256 (or unsigned, for alg none)."""
    signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
    if header["alg"] == "none":
        return signing_input + "."
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64url(mac)}"


def _tampered(token: str) -> str:
    """The same signature over claims naming another tool."""
    header, _, signature = token.split(".")
    claims = receipts.unverified_claims(token)
    claims["tool"] = "drop_table"
    return f"{header}.{_b64url(json.dumps(claims).encode())}.{signature}"


def _node_verdicts(jwks_url: str, cases: dict[str, Case]) -> dict[str, dict[str, Any]]:
    """What docs/receipts.md's verifier says of each case, given its arguments as JSON text."""
    given = [
        {"token": t, "tool": tool, "body": json.dumps(a), "fingerprint": state}
        for t, tool, a, state in cases.values()
    ]
    answers = run_node("check_receipts.mjs", {"jwks_url": jwks_url, "receipts": given})
    return dict(zip(cases, answers, strict=True))


def _python_refuses(case: Case, jwks: dict[str, Any]) -> bool:
    token, tool, arguments, state = case
    try:
        receipts.verify_receipt(
            token,
            tool=tool,
            arguments=arguments,
            keys=jwks,
            require_person=True,
            fingerprint=state,
        )
    except InvalidReceipt:
        return True
    return False


def test_node_verifies_what_the_bot_signs_and_refuses_what_it_must(conn, signing_bot, tmp_path):
    """jose, with the keys the bot serves, accepts every receipt a decision signs (hostile
    I-JSON arguments too, and one signed with the older key) with the alg, kid and times
    they claim, and Node's RFC 8785 form of the arguments hashes to their ``args_sha256``;
    it refuses the expired, the not yet valid, the unknown key, the altered, another
    algorithm, another tool, other arguments, a call no person decided; and
    ``verify_receipt`` says the same of each."""
    jwks_url, jwks, current, old = signing_bot
    stranger = str(tmp_path / "stranger.pem")
    keys.generate_key(stranger)
    accepted = _accepted(conn, dataclasses.replace(Settings.from_env(), signing_key=current), old)
    refused = _refused(current, stranger, jwks)

    verdicts = _node_verdicts(jwks_url, accepted | {n: case for n, (case, _) in refused.items()})

    said = {name: verdict.get("error") for name, verdict in verdicts.items()}
    assert {name: said[name] for name in accepted} == dict.fromkeys(accepted)
    wrong = {n: said[n] for n, (_, why) in refused.items() if why not in (said[n] or "accepted")}
    assert wrong == {}, f"Node said: {said}"
    for name, (token, _, arguments, _state) in accepted.items():
        claims = receipts.unverified_claims(token)
        header = verdicts[name]["header"]
        assert header == {"alg": "EdDSA", "kid": header["kid"], "typ": "JWT"}
        assert header["kid"] in {key["kid"] for key in jwks["keys"]}
        assert verdicts[name]["claims"] == claims
        assert (
            claims["nbf"] == claims["iat"] <= time.time() and claims["exp"] == claims["iat"] + TTL
        )
        assert verdicts[name]["canonical"] == rfc8785.dumps(arguments).decode()
    assert not any(_python_refuses(case, jwks) for case in accepted.values())
    assert all(_python_refuses(case, jwks) for case, _ in refused.values())


# --- any argument object the product lets in hashes the same in Node ---------------------------

_TEXT = st.text(st.characters(exclude_categories=("Cs", "Cn")), max_size=6)
_VALUES = st.recursive(
    IJSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)
_ARGUMENTS = st.dictionaries(_TEXT, _VALUES, max_size=5).filter(ijson.is_valid)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=st.lists(_ARGUMENTS, min_size=30, max_size=30))
def test_any_arguments_let_in_hash_alike_in_node(batch):
    """For any I-JSON arguments (what the API and the gate let in), ``canonicalize`` in Node
    gives the same RFC 8785 bytes as the receipt's hash was made of."""
    bodies = [json.dumps(arguments) for arguments in batch]

    found = run_node("canonical.mjs", bodies)

    assert found == [receipts.args_sha256(arguments) for arguments in batch]


# --- the docs show the code the tests run -----------------------------------------------------


def test_docs_show_the_javascript_verifier_the_tests_run():
    """docs/receipts.md's JavaScript is verify_receipt.mjs, byte for byte."""
    docs = (ROOT / "docs" / "receipts.md").read_text(encoding="utf-8")
    shown = re.findall(r"```js\n(.*?)```", docs, re.DOTALL)
    assert shown == [(HERE / "verify_receipt.mjs").read_text(encoding="utf-8")]
