"""Webhook deliveries checked in Node.js with ``standardwebhooks``' ``Webhook.verify``, as a
receiver written in JavaScript would: every real delivery verifies, and a changed or stale
one is refused; and every secret the settings accept signs what that library verifies."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from approvals.calls import external
from approvals.config import Settings
from approvals.decisions import review
from approvals.errors import ConfigError
from approvals.models import DecisionKind
from approvals.proof import webhooks
from tests.interop.node import run_node
from tests.processes import start_worker, wait_for_workers, wait_until
from tests.proof.test_webhooks import SECRET, Receiver

#: Past Standard Webhooks' five minutes of tolerance, either way.
STALE = 6 * 60
#: The secret a rotation moves to (``SECRET`` is the one it moves from), and one neither.
NEW_SECRET = "whsec_" + base64.b64encode(b"the secret rotated to, 32 bytes").decode()
STRANGER = "whsec_" + base64.b64encode(b"a secret nobody configured here").decode()


@pytest.fixture
def delivered(env, conn, tmp_path: Path):
    """A worker posting webhooks to a receiver in the middle of a secret's rotation, and a
    call asked for and approved: the deliveries, as (headers, body), once both arrived."""
    receiver = Receiver(failures=0)
    rotating = f"{NEW_SECRET},{SECRET}"
    hooks = {"APPROVALS_WEBHOOK_URLS": receiver.url, "APPROVALS_WEBHOOK_SECRET": rotating}
    worker = start_worker({**env, **hooks}, tmp_path / "worker.log", f"w-interop-{os.getpid()}")
    try:
        wait_for_workers(env, [worker], 1)
        settings = Settings.from_env({**env, **hooks})
        request = external.ExternalRequest(tool="sync", arguments={"n": "ü😀"}, agent="interop")
        approval, _ = external.ask(conn, settings, request)
        review.decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")
        wait_until(lambda: len(receiver.requests) >= 2, 30, "the paused and decided events")
        yield [(headers, body.decode()) for _, headers, body in receiver.requests]
    finally:
        worker.stop()
        receiver.server.shutdown()
        receiver.server.server_close()


def _variants(headers: dict[str, str], body: str) -> dict[str, dict[str, Any]]:
    """A delivery as received, and as a forger or a replay would present it."""
    delivery = {"secret": SECRET, "headers": headers, "body": body}
    return {
        "as received": delivery,
        "with the new secret": {**delivery, "secret": NEW_SECRET},
        "body changed": {**delivery, "body": body.replace('"data"', '"Data"', 1)},
        "id changed": {**delivery, "headers": {**headers, "webhook-id": "msg_other"}},
        "timestamp changed": {
            **delivery,
            "headers": {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) - 1)},
        },
        "another secret": {**delivery, "secret": STRANGER},
        "replayed later": {**delivery, "later": STALE},
        "from the future": {**delivery, "later": -STALE},
    }


REFUSED = {
    "body changed": "No matching signature found",
    "id changed": "No matching signature found",
    "timestamp changed": "No matching signature found",
    "another secret": "No matching signature found",
    "replayed later": "Message timestamp too old",
    "from the future": "Message timestamp too new",
}


def test_node_verifies_every_delivery_and_refuses_a_changed_or_stale_one(delivered):
    """Each delivery a worker posted verifies and gives back its body, with the old secret
    and the new one alike while a rotation lasts; with its body, id or timestamp changed,
    under another secret, or presented more than five minutes off, it is refused."""
    cases = {
        (index, name): variant
        for index, (headers, body) in enumerate(delivered)
        for name, variant in _variants(headers, body).items()
    }

    answers = dict(zip(cases, run_node("check_webhooks.mjs", list(cases.values())), strict=True))

    for secret in ("as received", "with the new secret"):
        events = [answers[index, secret].get("event") for index in range(len(delivered))]
        assert events == [json.loads(body) for _, body in delivered]
    assert {e["type"] for e in events} == {"approval.paused", "approval.decided"}
    said = {case: answer.get("error") for case, answer in answers.items()}
    wrong = {
        case: why
        for case, why in said.items()
        if case[1] in REFUSED and REFUSED[case[1]] not in (why or "")
    }
    assert wrong == {}, f"Node said: {said}"
    for headers, _ in delivered:
        assert re.fullmatch(r"[A-Za-z0-9_-]+", headers["webhook-id"])  # no '.': it is signed
        assert re.fullmatch(r"\d+", headers["webhook-timestamp"])
        assert re.fullmatch(
            r"v1,[A-Za-z0-9+/]+={0,2}( v1,[A-Za-z0-9+/]+={0,2})*", headers["webhook-signature"]
        )


#: Secrets someone might set: padded and unpadded base64, one rotating to another, the
#: URL-safe alphabet, too much padding, not base64 at all, nothing after the prefix, too few
#: bytes for the specification.
CANDIDATES = {
    "padded": SECRET,
    "unpadded": SECRET.rstrip("="),
    "rotating": f"{NEW_SECRET}, {SECRET}",
    "url-safe alphabet": "whsec_" + base64.urlsafe_b64encode(b"\xfb\xff" * 14).decode(),
    "too much padding": SECRET + "==",
    "not base64": "whsec_not base64 at all!",
    "empty": "whsec_",
    "three bytes": "whsec_" + base64.b64encode(b"abc").decode(),
}


def test_every_secret_the_settings_accept_signs_what_node_verifies(env):
    """APPROVALS_WEBHOOK_SECRET is refused at start-up unless the signatures the product
    makes with it are ones standardwebhooks in Node verifies, with each secret it holds."""
    accepted: dict[str, Settings] = {}
    for name, secret in CANDIDATES.items():
        with contextlib.suppress(ConfigError):
            accepted[name] = Settings.from_env({**env, "APPROVALS_WEBHOOK_SECRET": secret})
    now = datetime.now(UTC)
    body = json.dumps({"type": "approval.paused", "data": {"id": "a1"}})
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(now.timestamp()))}
    checks = {
        (name, secret): {
            "secret": secret,
            "headers": {**headers, "webhook-signature": webhooks.signature(s, "msg_1", now, body)},
            "body": body,
        }
        for name, s in accepted.items()
        for secret in s.webhook_secrets
    }

    answers = dict(zip(checks, run_node("check_webhooks.mjs", list(checks.values())), strict=True))

    assert {check: a.get("error") for check, a in answers.items()} == dict.fromkeys(checks)
    assert set(accepted) == {"padded", "unpadded", "rotating"}
