"""Plain-words answers to people whose click could not be applied."""

from __future__ import annotations

from approvals.cards import person
from approvals.errors import (
    AlreadyDecided,
    ApprovalsError,
    CorruptRecord,
    NotAllowed,
    UnknownApproval,
)


def explain(error: ApprovalsError) -> str:
    """One sentence for the person whose action was refused."""
    if isinstance(error, AlreadyDecided):
        who = f" by {person(error.decided_by)}" if error.decided_by else ""
        return f"Nothing changed: this approval was already {error.status}{who}."
    if isinstance(error, NotAllowed):
        return "Nothing changed: you are not one of the approvers for this request."
    if isinstance(error, UnknownApproval):
        return "Nothing changed: this approval does not exist (any more)."
    if isinstance(error, CorruptRecord):
        return "Nothing changed: this approval's record is damaged; ask an operator."
    return f"Nothing changed: {error}"
