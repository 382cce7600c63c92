"""An RQ job for ``tests/ops/test_logs.py``: it logs outside and inside ``bind_approval``, the way
``worker/jobs.py`` jobs do once their bodies are wrapped, so the worker's output can be checked."""

from __future__ import annotations

import logging

from approvals.ops.logs import bind_approval

log = logging.getLogger(__name__)


def log_for_approval(approval_id: str) -> str:
    log.info("before the binding")
    with bind_approval(approval_id):
        log.info("handling the approval")
        try:
            raise ValueError("a failure\nover two lines")
        except ValueError:
            log.exception("it failed")
    return "logged"
