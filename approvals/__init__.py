"""approvals: people approve, reject or edit what llm agents are about to do, from Slack.

The public API is small: gate a tool with ``requires_approval`` (or ``gate`` for code one
did not write), run the agent with ``run_agent`` (``run_agent_async`` for async models); a
worker resumes it after the decision, and ``wait`` returns how it ended.
"""

from approvals.calls.agent import Outcome, run_agent, run_agent_async
from approvals.calls.gate import gate, idempotency_key, requires_approval
from approvals.calls.outcomes import wait
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
from approvals.models import Approval, DecidedBy, DecisionKind, Status
from approvals.models.preview import Preview
from approvals.proof.receipts import Receipt, receipt, verify_receipt

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
