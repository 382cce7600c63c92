"""The shapes of the API's request bodies, checked by pydantic (a 422 names the field).

Caps on every field keep one caller from filling Redis or a card; the whole body is capped
before it is read (``api.size``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

#: The longest wait of one ``GET ...?wait=`` (a caller asks again for more).
MAX_WAIT = 60.0
#: The longest an approval may stay open.
MAX_EXPIRES_IN = 30 * 24 * 3600.0

_Name = Field(min_length=1, max_length=200)
_Names = Field(default=None, max_length=100)


class ApprovalBody(BaseModel):
    """``POST /v1/approvals``: what the caller wants to do, and who may decide."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    tool: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/-]+$")
    arguments: dict[str, Any]
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    summary: str | None = Field(default=None, max_length=500)
    preview: str | None = Field(default=None, max_length=10_000)
    agent: str | None = Field(default=None, min_length=1, max_length=100)
    requested_by: str | None = Field(default=None, min_length=1, max_length=100)
    channel: str | None = Field(default=None, min_length=1, max_length=100)
    expires_in: float | None = Field(default=None, gt=0, le=MAX_EXPIRES_IN)
    editable: list[str] | None = _Names
    approvers: list[str] | None = _Names
    approver_groups: list[str] | None = _Names
    approvals_required: int = Field(default=1, ge=1, le=20)
    reason_required: bool = False
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    run_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="Groups the requests of one task: the card then offers a grant for "
        "'This tool, this run', which lets later requests of this agent with the same run_id "
        "(and requester) through. Without it, that scope is not offered.",
    )
    grantable: bool = Field(
        default=True,
        description="False: the card offers only 'Just this call', never a standing grant.",
    )
    remind_after: float | None = Field(
        default=None,
        ge=0,
        le=MAX_EXPIRES_IN,
        description="Seconds before the approvers are reminded, and between reminders "
        "(0: never; default APPROVALS_REMIND_AFTER).",
    )
    escalate_after: float | None = Field(
        default=None,
        ge=0,
        le=MAX_EXPIRES_IN,
        description="Seconds before the card is escalated to escalate_to "
        "(0: never; default APPROVALS_ESCALATE_AFTER).",
    )
    escalate_to: list[Annotated[str, Field(pattern=r"^[CGS][A-Z0-9]{1,30}$")]] | None = Field(
        default=None,
        max_length=20,
        description="Channel ids (C...) and user group ids (S...) an escalation goes to "
        "(default APPROVALS_ESCALATE_TO).",
    )


class ResultBody(BaseModel):
    """``POST /v1/approvals/{id}/result``: what happened when the caller acted."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    output: str = Field(default="", max_length=20_000)
