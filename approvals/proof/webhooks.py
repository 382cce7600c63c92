"""Webhooks: every state change, posted to ``APPROVALS_WEBHOOK_URLS``, signed per the
Standard Webhooks specification (the ``standardwebhooks`` package).

Each state change is put in an outbox in Redis in the same atomic step as its audit entry
(``store``), so no change is lost to a crash. Every worker drains the outbox in the
background into one RQ job per receiver, which RQ retries with growing pauses for more than
a day. The body is stored once, so every retry sends the same bytes under the same
``webhook-id`` (the hash of the audit entry it reports): receivers dedupe on it. A receiver
that has failed for a day is reported by ``approvals doctor``; nothing else waits on it.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

import redis
from rq import Retry
from rq.job import Job
from standardwebhooks.webhooks import Webhook

from approvals import store
from approvals.config import Settings, safe_url
from approvals.errors import ApprovalsError
from approvals.models import Approval
from approvals.store import queue

log = logging.getLogger(__name__)

#: The job that posts one event to one receiver (``worker/webhooks.py``).
DELIVER = "approvals.worker.webhooks.deliver_webhook"
#: How often each worker looks at the outbox.
DRAIN_INTERVAL = 0.5
#: At most this many outbox entries per look.
DRAIN_BATCH = 1000
#: An outbox entry taken this long ago and still there: its taker died; take it again.
STALE_AFTER = 60.0
#: Growing pauses over a little more than a day; then the event is given up.
RETRY = Retry(max=32, interval=[1, 2, 5, 30, 60, 300, 900, 1800, *[3600] * 24])
#: Longer than every retry: a body outlives its last attempt.
BODY_TTL = 2 * 24 * 3600
#: A receiver failing this long is reported by ``approvals doctor``.
FAILING_REPORTED_AFTER = 24 * 3600
TIMEOUT = 10

#: The audit events that are state changes, and the webhook type each becomes.
_TYPES = {
    "paused": "approval.paused",
    "approved": "approval.decided",
    "edited": "approval.decided",
    "rejected": "approval.decided",
    "responded": "approval.decided",
    "expired": "approval.expired",
    "escalated": "approval.escalated",
    "resume_started": "approval.running",
    "interrupted": "approval.interrupted",
    "stale": "approval.stale",
}
_ENDED = {
    "completed": "approval.completed",
    "failed": "approval.failed",
    "paused": "approval.paused",
}
_STATUS = {"paused": "pending", "resume_started": "running", "stale": "pending"}


class DeliveryFailed(ApprovalsError):
    """The receiver did not answer 2xx; RQ retries the job later."""


def drain(conn: redis.Redis, settings: Settings, limit: int = DRAIN_BATCH) -> int:
    """Turn outbox entries into delivery jobs (a worker's background loop); how many.

    Entries are moved to the taking list and removed from it in pipelines, so a burst of
    state changes (a flood of pauses, a bulk decision) is worked off in a few round trips
    instead of sitting in Redis for minutes.
    """
    taken = [raw for raw in store.outbox.taking(conn) if _stale(raw)]
    taken += store.outbox.take(conn, limit - len(taken))
    for raw in taken:
        _dispatch(conn, settings, raw)
    store.outbox.taken(conn, taken)
    return len(taken)


def _stale(raw: bytes) -> bool:
    """An entry a worker took and died on: queued again (job ids dedupe the live ones)."""
    event = _event(raw)
    return event is None or float(event.get("at", 0)) < time.time() - STALE_AFTER


def _dispatch(conn: redis.Redis, settings: Settings, raw: bytes) -> None:
    """One state change: its audit retention, and one delivery job per receiver."""
    event = _event(raw)
    if event is None:
        return  # not ours (Redis is a trust boundary): dropped
    if settings.audit_ttl:
        store.audit.expire_audit(conn, str(event["approval_id"]), settings.audit_ttl)
    if not settings.webhook_secrets:
        return  # nowhere to send it: a body is never sent unsigned
    approval = _approval(conn, str(event["approval_id"]))
    receivers = receivers_of(settings, approval)
    if not receivers:
        return
    message_id = str(event["id"])
    body = json.dumps(body_of(conn, event, approval))
    store.outbox.keep_body(conn, message_id, body, BODY_TTL)
    for index, url in enumerate(receivers):
        job_id = f"webhook-{message_id}-{index}"
        if Job.exists(job_id, connection=conn):
            continue
        queue.get_queue(conn, settings).enqueue(
            DELIVER,
            message_id,
            url,
            job_id=job_id,
            retry=RETRY,
            job_timeout=TIMEOUT * 3,
            result_ttl=BODY_TTL,
            failure_ttl=BODY_TTL,
        )


def receivers_of(settings: Settings, approval: Approval | None) -> list[str]:
    """``APPROVALS_WEBHOOK_URLS``, then the gate's ``webhook=`` (none without a secret:
    a body is never sent unsigned)."""
    if not settings.webhook_secrets:
        return []
    urls = list(settings.webhook_urls)
    if approval is not None and approval.policy.webhook:
        urls.append(approval.policy.webhook)
    return list(dict.fromkeys(urls))


def _approval(conn: redis.Redis, approval_id: str) -> Approval | None:
    try:
        return store.records.load(conn, approval_id)
    except ApprovalsError:
        return None


def _event(raw: bytes | str) -> dict[str, Any] | None:
    try:
        event = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(event, dict) or not {"id", "approval_id", "event", "at"} <= set(event):
        return None
    return event


def body_of(
    conn: redis.Redis, event: dict[str, Any], approval: Approval | None = None
) -> dict[str, Any]:
    """The webhook body of an outbox entry: the contract's fields, from the approval."""
    kind = str(event["event"])
    status = _STATUS.get(kind, str(event.get("status") or kind))
    webhook_type = _ENDED.get(status) if kind == "resume_finished" else _TYPES.get(kind)
    data: dict[str, Any] = {"id": event["approval_id"], "status": status}
    data.update(agent=None, tool=None, decision=None, receipt=None)
    if approval is None:
        approval = _approval(conn, str(event["approval_id"]))
    if approval is not None:
        data.update(agent=approval.agent, tool=approval.tool_name)
        if approval.decision is not None and kind != "paused":
            data["decision"] = approval.decision.kind.value
        if webhook_type == "approval.decided":
            data["receipt"] = approval.receipt
        shown = store.records.preview_shown(approval)
        if shown:  # only with a preview: the contract's fields stay as they were without
            data["preview"] = {"sha256": shown["preview_sha256"], "head": shown["preview_head"]}
    moment = datetime.fromtimestamp(float(event["at"]), UTC)
    return {
        "type": webhook_type or f"approval.{status}",
        "timestamp": moment.isoformat(),
        "data": data,
    }


def deliver(conn: redis.Redis, settings: Settings, message_id: str, url: str) -> str:
    """Post one stored body to one receiver, signed now (the job; RQ retries it on failure).

    Raises:
        DeliveryFailed: no 2xx answer; the receiver is noted as failing since its first.
    """
    payload = store.outbox.body(conn, message_id)
    if payload is None:
        return "expired"
    approval_id = str(json.loads(payload).get("data", {}).get("id", ""))
    if not settings.webhook_secrets or url not in receivers_of(
        settings, _approval(conn, approval_id)
    ):
        log.warning(
            "webhook %s: %s is not a configured receiver; not sent",
            message_id,
            safe_url(url, hide_query=True),
        )
        return "not configured"
    now = datetime.now(UTC)
    headers = {
        "Content-Type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature(settings, message_id, now, payload),
    }
    request = urllib.request.Request(url, data=payload.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            status = answer.status
    except urllib.error.HTTPError as refused:
        status = refused.code
    except OSError as exc:
        store.outbox.webhook_failed(conn, url)
        raise DeliveryFailed(f"{safe_url(url, hide_query=True)}: {exc}") from None
    if not 200 <= status < 300:
        store.outbox.webhook_failed(conn, url)
        raise DeliveryFailed(f"{safe_url(url, hide_query=True)} answered {status}")
    store.outbox.webhook_answered(conn, url)
    return f"delivered ({status})"


def signature(settings: Settings, message_id: str, at: datetime, payload: str) -> str:
    """The ``webhook-signature`` header: one signature per secret, space-separated, which
    Standard Webhooks receivers try in turn (so a secret can be rotated with no downtime)."""
    return " ".join(
        Webhook(secret).sign(message_id, at, payload) for secret in settings.webhook_secrets
    )


def failing_receivers(conn: redis.Redis, longer_than: float) -> dict[str, float]:
    """Receivers failing for more than ``longer_than`` seconds, with when they began."""
    since = store.outbox.webhooks_failing(conn)
    return {url: began for url, began in since.items() if began < time.time() - longer_than}
