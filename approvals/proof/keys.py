"""The Ed25519 keys receipts are signed with, and the JWKS document that publishes them.

The private key lives in a file named by ``APPROVALS_SIGNING_KEY`` and is read only by the
processes that witness decisions (the bot and the CLI). Public keys come from that key and
from the files in ``APPROVALS_VERIFY_KEYS``, never from Redis: whoever can write to Redis
could otherwise publish a key of their own and sign whatever they like.

A key's ``kid`` is its RFC 7638 thumbprint, so the same key has the same id wherever it is
computed, and a verifier can tell keys apart without being told their names.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from approvals.config import Settings
from approvals.errors import ConfigError


def generate_key(path: str | Path) -> str:
    """Write a new Ed25519 private key (PEM, PKCS#8, readable by its owner only); its kid.

    An existing file is never overwritten: losing a key in use would void its receipts.
    """
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"{path} exists already; a key is never overwritten") from None
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    return kid_of(key.public_key())


def write_public_key(private_path: str | Path, public_path: str | Path) -> str:
    """Write the public half of a private key file as PEM (for ``APPROVALS_VERIFY_KEYS``)."""
    public = load_private_key(str(private_path)).public_key()
    pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    Path(public_path).write_bytes(pem)
    return kid_of(public)


@functools.cache
def load_private_key(path: str) -> Ed25519PrivateKey:
    """The Ed25519 private key in a PEM file (read once per process)."""
    key = _load(path, private=True)
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"APPROVALS_SIGNING_KEY {path} is not an Ed25519 private key")
    return key


def load_public_key(path: str) -> Ed25519PublicKey:
    """The Ed25519 public key in a PEM file (a private key file gives its public half)."""
    try:
        key = _load(path, private=False)
    except ConfigError:
        key = _load(path, private=True)
    if isinstance(key, Ed25519PrivateKey):
        return key.public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"APPROVALS_VERIFY_KEYS {path} is not an Ed25519 key")
    return key


def _load(path: str, *, private: bool) -> Any:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read key {path}: {exc.strerror}") from None
    try:
        if private:
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        kind = "private" if private else "public"
        raise ConfigError(f"{path} is not a PEM {kind} key") from None


def public_jwk(key: Ed25519PublicKey) -> dict[str, str]:
    """The key as a JWK (RFC 8037), with its kid and the use receipts make of it."""
    return {
        "kty": "OKP",
        "crv": "Ed25519",
        "x": _b64url(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)),
        "kid": kid_of(key),
        "alg": "EdDSA",
        "use": "sig",
    }


def kid_of(key: Ed25519PublicKey) -> str:
    """The RFC 7638 thumbprint: SHA-256 of the key's required members in canonical JSON."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    members = {"crv": "Ed25519", "kty": "OKP", "x": _b64url(raw)}
    return _b64url(hashlib.sha256(rfc8785.dumps(members)).digest())


def public_keys(settings: Settings) -> list[Ed25519PublicKey]:
    """Every key receipts may be checked with: the signing key's, then the older ones."""
    keys = []
    if settings.signing_key:
        keys.append(load_private_key(settings.signing_key).public_key())
    keys += [load_public_key(path) for path in settings.verify_keys]
    return keys


def jwks(settings: Settings) -> dict[str, list[dict[str, str]]]:
    """The JWKS document (``GET /.well-known/jwks.json``, ``approvals keys jwks``)."""
    seen: dict[str, dict[str, str]] = {}
    for key in public_keys(settings):
        jwk = public_jwk(key)
        seen.setdefault(jwk["kid"], jwk)
    return {"keys": list(seen.values())}


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
