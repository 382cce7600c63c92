"""The public API is what ``approvals.__all__`` names: a name added or dropped is a decision."""

from __future__ import annotations

import approvals

PUBLIC = [
    "AlreadyDecided",
    "Approval",
    "ApprovalsError",
    "ConfigError",
    "CorruptRecord",
    "DecidedBy",
    "DecisionKind",
    "GateError",
    "InvalidArguments",
    "InvalidReceipt",
    "NotAllowed",
    "Outcome",
    "Preview",
    "Receipt",
    "ResumeError",
    "Settings",
    "Status",
    "UnknownApproval",
    "gate",
    "idempotency_key",
    "receipt",
    "requires_approval",
    "run_agent",
    "run_agent_async",
    "verify_receipt",
    "wait",
]


def test_all_names_exactly_the_public_api():
    """``__all__`` is this list, sorted, and every name in it is importable."""
    assert approvals.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(approvals, name) is not None


def test_every_public_name_is_documented():
    """Each exported class or function says what it is for."""
    for name in PUBLIC:
        assert (getattr(approvals, name).__doc__ or "").strip(), name
