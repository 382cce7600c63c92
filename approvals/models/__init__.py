"""The records everything else is about, plain dataclasses with no I/O: the approval and its
state machine (``approval``), a gate's options (``options``), a grant (``grant``), and what a
run ended with (``outcome``).

The approval's names are re-exported here, as most code needs only them.
"""

from approvals.models.approval import (
    DECIDED,
    FINISHED,
    TRANSITIONS,
    Approval,
    DecidedBy,
    Decision,
    DecisionKind,
    Policy,
    RunResult,
    SiblingResult,
    Status,
    ToolRef,
    approval_from_parts,
    decision_from_dict,
    decision_to_dict,
    result_to_dict,
    sources_of,
)
from approvals.models.options import (
    UNSET,
    GateOptions,
    OnReject,
    options_from_dict,
    options_to_dict,
)

__all__ = [
    "DECIDED",
    "FINISHED",
    "TRANSITIONS",
    "UNSET",
    "Approval",
    "DecidedBy",
    "Decision",
    "DecisionKind",
    "GateOptions",
    "OnReject",
    "Policy",
    "RunResult",
    "SiblingResult",
    "Status",
    "ToolRef",
    "approval_from_parts",
    "decision_from_dict",
    "decision_to_dict",
    "options_from_dict",
    "options_to_dict",
    "result_to_dict",
    "sources_of",
]
