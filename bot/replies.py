"""Plain-words answers to people whose action could not be applied."""

from __future__ import annotations

from collections.abc import Sequence

from approvals.decisions.review import BulkOutcome
from approvals.errors import (
    AlreadyDecided,
    AlreadyVoted,
    ApprovalsError,
    CorruptRecord,
    InvalidArguments,
    NotAllowed,
    NotReplicated,
    UnknownApproval,
)
from approvals.slack.cards import person


def bulk_summary(results: Sequence[BulkOutcome], verb: str) -> str:
    """What a decision in bulk did: which were decided, and which were refused and why."""
    done = [r.approval_id for r in results if r.approval is not None]
    refused = [r for r in results if r.approval is None]
    lines = [f"{verb} {len(done)}: " + ", ".join(f"`{i}`" for i in done)] if done else []
    if refused:
        lines.append(f"Refused {len(refused)}:")
        lines += [f"• `{r.approval_id}`: {r.refused}" for r in refused]
    return "\n".join(lines) or "Nothing was decided."


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
    if isinstance(error, NotReplicated):
        return "Not recorded: Redis could not confirm it in time. Nothing changed; try again."
    if isinstance(error, NotAllowed):
        return f"Nothing changed: {error}."
    if isinstance(error, UnknownApproval):
        return "Nothing changed: this approval does not exist (any more)."
    if isinstance(error, CorruptRecord):
        return "Nothing changed: this approval's record is damaged; ask an operator."
    if isinstance(error, InvalidArguments):
        return f"Nothing changed: {'; '.join(error.errors.values())}."
    return f"Nothing changed: {error}"
