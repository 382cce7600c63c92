"""The webhook delivery job: RQ calls it with a message id and a receiver URL only.

A job of its own module, beside ``approvals.worker.jobs``: delivering a webhook touches no approval,
Slack or model, only the body stored for it and the receiver.
"""

from __future__ import annotations

from approvals.proof import webhooks
from approvals.worker.jobs import _conn, _settings  # the process's one settings and Redis client


def deliver_webhook(message_id: str, url: str) -> str:
    """Post one event to one receiver; raising makes RQ retry it (same id, same body)."""
    return webhooks.deliver(_conn(), _settings(), message_id, url)
