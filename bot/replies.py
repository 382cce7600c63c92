"""Plain-words answers to people whose action could not be applied."""

from __future__ import annotations

from approvals.cards import person
from approvals.errors import (
    AlreadyDecided,
    AlreadyVoted,
    ApprovalsError,
    CorruptRecord,
    InvalidArguments,
    NotAllowed,
    UnknownApproval,
)


def explain(error: ApprovalsError) -> str:
    """One sentence for the person whose action was refused."""
    if isinstance(error, AlreadyDecided):
        if error.status == "expired":
            return "Nothing changed: this request expired before anyone decided."
        who = f" by {person(error.decided_by)}" if error.decided_by else ""
        return f"Nothing changed: this approval was already {error.status}{who}."
    if isinstance(error, AlreadyVoted):
        return (
            f"You already approved this; {error.count} of {error.required} approvals so far. "
            "It needs someone else now."
        )
    if isinstance(error, NotAllowed):
        return f"Nothing changed: {error}."
    if isinstance(error, UnknownApproval):
        return "Nothing changed: this approval does not exist (any more)."
    if isinstance(error, CorruptRecord):
        return "Nothing changed: this approval's record is damaged; ask an operator."
    if isinstance(error, InvalidArguments):
        return f"Nothing changed: {'; '.join(error.errors.values())}."
    return f"Nothing changed: {error}"
