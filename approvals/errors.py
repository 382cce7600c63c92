"""Every exception approvals raises, in one flat list.

ApprovalsError
├── ConfigError          a setting is missing or malformed (start-up stops with its message)
├── GateError            a tool list cannot be run through approvals (e.g. tool in __main__)
├── UnknownApproval      no approval with that id
├── CorruptRecord        the stored record is not what this version wrote
├── NotAllowed           the actor may not decide this approval
├── AlreadyDecided       someone decided first (carries who and what)
├── AlreadyVoted         this person already approved; the quorum needs others
├── InvalidArguments     edited arguments do not match the tool's JSON schema
├── ResumeError          the worker cannot resume (tool not importable, model unknown...)
├── ToolAlreadyStarted   an earlier attempt started the gated tool: a person decides on Retry
└── ArchiveError         the archive (APPROVALS_ARCHIVE_URL) is unreachable or not migrated
└── InvalidReceipt       a receipt does not prove what its bearer claims (the message says why)
"""

from __future__ import annotations


class ApprovalsError(Exception):
    """Base class: everything approvals raises on purpose."""


class ConfigError(ApprovalsError):
    """A required setting is missing or malformed."""


class PolicyError(ConfigError):
    """``APPROVALS_POLICY`` cannot be read or holds a malformed rule: nothing is decided by
    it, and nothing is asked either (the API answers 503), until it is fixed."""


class GateError(ApprovalsError):
    """The tools handed to ``run_agent`` cannot be resumed by a worker."""


class UnknownApproval(ApprovalsError):
    """No approval with this id exists."""

    def __init__(self, approval_id: str) -> None:
        super().__init__(f"no approval with id {approval_id!r}")
        self.approval_id = approval_id


class CorruptRecord(ApprovalsError):
    """A stored record failed to load; Redis is a trust boundary, so we refuse it."""


class NotAllowed(ApprovalsError):
    """The actor is not allowed to decide this approval."""


class AlreadyDecided(ApprovalsError):
    """The approval left ``pending`` before this decision; nothing was changed."""

    def __init__(self, approval_id: str, status: str, decided_by: str | None) -> None:
        who = f" by {decided_by}" if decided_by else ""
        super().__init__(f"approval {approval_id} was already {status}{who}")
        self.approval_id = approval_id
        self.status = status
        self.decided_by = decided_by


class AlreadyVoted(ApprovalsError):
    """The actor already approved; the quorum still needs other people."""

    def __init__(self, approval_id: str, count: int, required: int) -> None:
        super().__init__(
            f"you already approved {approval_id}; {count} of {required} approvals so far"
        )
        self.count = count
        self.required = required


class InvalidArguments(ApprovalsError):
    """Edited arguments are not valid for the tool; ``errors`` maps argument name to message."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


class ResumeError(ApprovalsError):
    """A decided approval cannot be resumed; the message is shown to people as is."""


class ToolAlreadyStarted(ApprovalsError):
    """An earlier attempt of this resume started the gated tool; it must not run again."""


class NotReplicated(ApprovalsError):
    """Fewer replicas than ``APPROVALS_MIN_REPLICAS`` confirmed a pause or a decision in
    time: it was undone, so nothing counts and trying again is safe."""


class ArchiveError(ApprovalsError):
    """The archive cannot be used: unreachable, or its schema is not the newest."""


class InvalidReceipt(ApprovalsError):
    """A receipt does not prove that this call was released: its message says why.

    Raised by ``verify_receipt`` for another tool, other arguments, an expired or not yet
    valid receipt, an unknown key, a bad signature, a replay, or a decision no person made
    when one is required.
    """
