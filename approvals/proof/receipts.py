"""Receipts: signed proof, for the service a gated tool calls, that its call was released.

A pause in the agent is a control, not a security boundary: the service that actually deletes
the row must check for itself that a person said yes. So when a decision releases a call
(approve, edit), the process that witnessed it (the bot, which verified Slack's signature
and the clicking user; the CLI, for an operator) signs a receipt: a compact JWS with EdDSA
(Ed25519, RFC 8037), naming the approval, the tool, a SHA-256 of the RFC 8785 canonical JSON
of the arguments that will run, the call's ``tool_call_id``, the decision and who made it.

The receipt is stored with the decision; the worker only hands it to the gated tool
(``receipt()``), which passes it to the service; the service checks it with
``verify_receipt`` (or any JWT library and the published JWKS). The worker never holds the
private key, so a compromised worker or tool cannot mint one: it can only replay the
receipt it was given, for that call and those arguments, until it expires.

``decided_by`` says what released the call. The bot and the CLI sign only ``person``
decisions. Grants and policy rules are evaluated where a call is asked for (the agent's own
process, or ``approvals api``), which holds no key, so the calls they release carry no
receipt at all (docs/receipts.md, "Grants and rules"). A receipt that does say ``grant``
(naming the grant and the person who made it) or ``rule`` (naming the rule) proves a policy,
not a person: ``require_person=True`` refuses it, and one that names neither is malformed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

import jwt
import redis
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from approvals import store
from approvals.errors import InvalidReceipt
from approvals.models import DecidedBy
from approvals.proof import keys as keyring

ISSUER = "approvals"
ALGORITHM = "EdDSA"
#: The decisions that release a call, and so the only ones a receipt can name.
RELEASING = ("approve", "edit")
_REQUIRED = ["iss", "sub", "jti", "iat", "exp"]


@dataclass(frozen=True)
class Receipt:
    """The claims of a receipt that verified (see docs/receipts.md for each)."""

    approval_id: str
    jti: str
    kid: str
    issued_at: int
    expires_at: int
    tool: str
    args_sha256: str
    tool_call_id: str
    decision: str
    approvers: tuple[str, ...]
    requested_by: str | None
    agent: str
    decided_by: DecidedBy
    #: For ``decided_by="grant"``: the grant's id and the person who made it; for ``rule``,
    #: the rule's id. None for a person's decision.
    grant: str | None = None
    granted_by: str | None = None
    rule: str | None = None
    #: The SHA-256 of the preview the deciders were shown (None: the call had none).
    preview_sha256: str | None = None
    #: The state the decision depended on, as the gate's ``fingerprint`` (or the API caller)
    #: named it; None when nothing named one. The service compares it with its own state.
    fingerprint: str | None = None


def args_sha256(arguments: Any) -> str:
    """Hex SHA-256 of the RFC 8785 canonical JSON of ``arguments``: one byte differs, so
    does this, whichever JSON library or key order the other side uses."""
    try:
        return hashlib.sha256(rfc8785.dumps(arguments)).hexdigest()
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise InvalidReceipt(f"the arguments cannot be canonicalized: {exc}") from None


def sign_receipt(
    key_path: str,
    *,
    approval_id: str,
    tool: str,
    arguments: Any,
    tool_call_id: str,
    decision: str,
    approvers: Iterable[str],
    requested_by: str | None,
    agent: str,
    ttl: int,
    decided_by: DecidedBy = DecidedBy.PERSON,
    grant: str | None = None,
    granted_by: str | None = None,
    rule: str | None = None,
    preview_sha256: str | None = None,
    fingerprint: str | None = None,
    now: float | None = None,
) -> str:
    """Sign a receipt with the private key at ``key_path`` (the bot and the CLI only).

    Args:
        decided_by: what released the call; ``grant`` needs ``grant`` (its id) and
            ``granted_by`` (who made it), ``rule`` needs ``rule`` (its id), and a person's
            decision names neither.
        preview_sha256: the digest of the preview the deciders were shown (no claim without
            one).
        fingerprint: the state the decision depended on (the ``fingerprint`` claim; left
            out when None).
    """
    assert decision in RELEASING, "only a decision that releases a call gets a receipt"
    what = _what_decided(decided_by, grant=grant, granted_by=granted_by, rule=rule)
    key = keyring.load_private_key(key_path)
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": ISSUER,
        "sub": approval_id,
        "jti": uuid.uuid4().hex,
        "iat": issued,
        # Every JWT library checks ``nbf``; few check that ``iat`` is not in the future.
        "nbf": issued,
        "exp": issued + ttl,
        "tool": tool,
        "args_sha256": args_sha256(arguments),
        "tool_call_id": tool_call_id,
        "decision": decision,
        "approvers": list(approvers),
        "requested_by": requested_by,
        "agent": agent,
        "decided_by": decided_by.value,
        **what,
        **({"preview_sha256": preview_sha256} if preview_sha256 else {}),
        **({} if fingerprint is None else {"fingerprint": fingerprint}),
    }
    headers = {"kid": keyring.kid_of(key.public_key()), "typ": "JWT"}
    return jwt.encode(claims, key, algorithm=ALGORITHM, headers=headers)


def _what_decided(
    decided_by: DecidedBy, *, grant: str | None, granted_by: str | None, rule: str | None
) -> dict[str, str]:
    """The claims naming what decided, beside ``decided_by``: exactly the ones it needs."""
    named = {"grant": grant, "granted_by": granted_by, "rule": rule}
    needed = _NAMES[decided_by]
    given = {name for name, value in named.items() if value}
    if given != set(needed):
        raise ValueError(
            f"a {decided_by.value!r} receipt names {', '.join(needed) or 'nothing else'}, "
            f"not {', '.join(sorted(given)) or 'nothing'}"
        )
    return {name: str(named[name]) for name in needed}


#: The claims a receipt names for each ``decided_by``.
_NAMES: dict[DecidedBy, tuple[str, ...]] = {
    DecidedBy.PERSON: (),
    DecidedBy.GRANT: ("grant", "granted_by"),
    DecidedBy.RULE: ("rule",),
}


Keys = Mapping[str, Any] | str | Iterable[Ed25519PublicKey]


def verify_receipt(
    token: str,
    *,
    tool: str,
    arguments: Any,
    keys: Keys,
    require_person: bool = False,
    leeway: float = 0,
    fingerprint: str | None = None,
) -> Receipt:
    """Check that ``token`` releases exactly this call of ``tool`` with these ``arguments``.

    Args:
        keys: the JWKS document (a dict or its JSON text, as ``approvals keys jwks`` prints
            and ``/.well-known/jwks.json`` serves) or Ed25519 public keys. Take them from
            configuration you trust, never from the caller.
        require_person: refuse a call released by a grant or a rule.
        leeway: seconds of clock difference tolerated on ``iat`` and ``exp``.
        fingerprint: the service's own fingerprint of the state the call would act on,
            computed as the gate's ``fingerprint`` computes it; the receipt must name the
            same (a receipt naming none is refused too): the state did not change since
            the approval.

    Raises:
        InvalidReceipt: with the reason (another tool, other arguments, expired, not yet
        valid, unknown key, bad signature, not a person's decision, a changed state...).
    """
    receipt = read_receipt(token, keys, leeway=leeway)
    if receipt.tool != tool:
        raise InvalidReceipt(f"the receipt is for tool {receipt.tool!r}, not {tool!r}")
    if not hmac.compare_digest(receipt.args_sha256, args_sha256(arguments)):
        raise InvalidReceipt("the arguments differ from the ones that were approved")
    if require_person and receipt.decided_by is not DecidedBy.PERSON:
        raise InvalidReceipt(f"no person approved this call: {_decider(receipt)} released it")
    if fingerprint is not None and not hmac.compare_digest(
        (receipt.fingerprint or "").encode(), fingerprint.encode()
    ):
        raise InvalidReceipt(
            f"the state changed since the approval: approved on {receipt.fingerprint!r}, "
            f"now {fingerprint!r}"
        )
    return receipt


def _decider(receipt: Receipt) -> str:
    if receipt.decided_by is DecidedBy.GRANT:
        return f"grant {receipt.grant} (made by {receipt.granted_by})"
    return f"rule {receipt.rule}"


def read_receipt(token: str, keys: Keys, *, leeway: float = 0, check_time: bool = True) -> Receipt:
    """The receipt's claims once its signature checks out (and its times, unless
    ``check_time`` is False: an audit trail's old receipts have long expired)."""
    key = _key_for(token, _public_keys(keys))
    options = {
        "require": _REQUIRED,
        "verify_exp": check_time,
        "verify_iat": check_time,
        "verify_nbf": check_time,
    }
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[ALGORITHM],
            issuer=ISSUER,
            leeway=leeway,
            options=cast(Any, options),
        )
    except jwt.ExpiredSignatureError:
        raise InvalidReceipt("the receipt has expired") from None
    except jwt.ImmatureSignatureError:
        raise InvalidReceipt("the receipt is not valid yet (issued in the future)") from None
    except jwt.InvalidSignatureError:
        raise InvalidReceipt("the signature does not match: the receipt was altered") from None
    except jwt.InvalidIssuerError:
        raise InvalidReceipt(f"the receipt was not issued by {ISSUER!r}") from None
    except jwt.InvalidTokenError as exc:
        raise InvalidReceipt(f"the receipt is malformed: {exc}") from None
    return _receipt_of(claims, keyring.kid_of(key))


def unverified_claims(token: str) -> dict[str, Any]:
    """The claims without any check, to explain a receipt that fails (never to trust one)."""
    try:
        return jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError as exc:
        raise InvalidReceipt(f"the receipt is malformed: {exc}") from None


def _public_keys(keys: Keys) -> dict[str, Ed25519PublicKey]:
    """Keys by kid, from a JWKS (dict or JSON text) or public key objects."""
    if isinstance(keys, str):
        keys = cast(Mapping[str, Any], json.loads(keys))
    if isinstance(keys, Mapping):
        found = {}
        for jwk in keys.get("keys", []):
            if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519":
                key = jwt.PyJWK(jwk, algorithm=ALGORITHM).key
                found[keyring.kid_of(key)] = key
        return found
    return {keyring.kid_of(key): key for key in keys}


def _key_for(token: str, keys: dict[str, Ed25519PublicKey]) -> Ed25519PublicKey:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as exc:
        raise InvalidReceipt(f"the receipt is malformed: {exc}") from None
    if header.get("alg") != ALGORITHM:
        raise InvalidReceipt(f"the receipt is signed with {header.get('alg')!r}, not EdDSA")
    key = keys.get(str(header.get("kid")))
    if key is None:
        raise InvalidReceipt(f"the receipt is signed with an unknown key {header.get('kid')!r}")
    return key


def _receipt_of(claims: dict[str, Any], kid: str) -> Receipt:
    """Every claim type-checked: a valid signature over odd claims is still refused."""
    try:
        approvers = claims["approvers"]
        if not isinstance(approvers, list) or not all(isinstance(a, str) for a in approvers):
            raise TypeError("approvers")
        receipt = Receipt(
            approval_id=_str(claims, "sub"),
            jti=_str(claims, "jti"),
            kid=kid,
            issued_at=int(claims["iat"]),
            expires_at=int(claims["exp"]),
            tool=_str(claims, "tool"),
            args_sha256=_str(claims, "args_sha256"),
            tool_call_id=_str(claims, "tool_call_id"),
            decision=_str(claims, "decision"),
            approvers=tuple(approvers),
            requested_by=_str(claims, "requested_by", optional=True),
            agent=_str(claims, "agent"),
            decided_by=DecidedBy(claims["decided_by"]),
            grant=_str(claims, "grant", optional=True),
            granted_by=_str(claims, "granted_by", optional=True),
            rule=_str(claims, "rule", optional=True),
            preview_sha256=_str(claims, "preview_sha256", optional=True),
            fingerprint=_str(claims, "fingerprint", optional=True),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidReceipt(f"the receipt's claims are malformed ({exc})") from None
    if receipt.decision not in RELEASING:
        raise InvalidReceipt(f"a {receipt.decision!r} decision releases nothing")
    named = {n for n in ("grant", "granted_by", "rule") if getattr(receipt, n) is not None}
    if named != set(_NAMES[receipt.decided_by]):
        raise InvalidReceipt(
            f"the receipt's claims are malformed (a {receipt.decided_by.value!r} decision "
            f"naming {', '.join(sorted(named)) or 'nothing'})"
        )
    return receipt


def _str(claims: dict[str, Any], name: str, optional: bool = False) -> Any:
    value = claims.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(name)
    return value


def check_not_replayed(conn: redis.Redis, receipt: Receipt) -> None:
    """Refuse a receipt seen before: remembers its id in Redis for the rest of its life.

    For services that want each receipt used once. Without it, a receipt can be presented
    again until it expires (for the same call and arguments only).

    Raises:
        InvalidReceipt: this receipt was presented already.
    """
    ttl = max(1, receipt.expires_at - int(time.time()) + 1)
    if not store.caches.first_receipt_use(conn, receipt.jti, ttl):
        raise InvalidReceipt(f"the receipt {receipt.jti} was used already (a replay)")


_current: ContextVar[str | None] = ContextVar("approvals_receipt", default=None)


def receipt() -> str | None:
    """The receipt of the call the worker is running, for the service the tool calls (None
    outside a released call, or when the decider had no signing key)."""
    return _current.get()


def hold(token: str | None) -> None:
    """``receipt()`` returns ``token`` from now on in this context (until ``holding`` ends)."""
    _current.set(token)


@contextmanager
def holding(token: str | None) -> Iterator[None]:
    """Inside the block, ``receipt()`` returns ``token`` (the worker wraps the resume)."""
    reset = _current.set(token)
    try:
        yield
    finally:
        _current.reset(reset)
