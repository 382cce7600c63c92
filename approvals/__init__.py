"""approvals: people approve, reject or edit what llm agents are about to do, from Slack.

The public API is small: gate a tool with ``requires_approval``, run the agent with
``run_agent``; a worker resumes it after the decision, and ``wait`` returns how it ended.
"""

from approvals.agent import Outcome, run_agent
from approvals.config import Settings
from approvals.errors import (
    AlreadyDecided,
    ApprovalsError,
    ConfigError,
    CorruptRecord,
    GateError,
    InvalidArguments,
    InvalidReceipt,
    NotAllowed,
    ResumeError,
    UnknownApproval,
)
from approvals.gate import idempotency_key, requires_approval
from approvals.models import Approval, DecisionKind, Status
from approvals.outcomes import wait
from approvals.receipts import DecidedBy, Receipt, receipt, verify_receipt

__all__ = [
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
    "Receipt",
    "ResumeError",
    "Settings",
    "Status",
    "UnknownApproval",
    "idempotency_key",
    "receipt",
    "requires_approval",
    "run_agent",
    "verify_receipt",
    "wait",
]
