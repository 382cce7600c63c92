"""The shapes of the API's request bodies, checked by pydantic (a 422 names the field).

Caps on every field keep one caller from filling Redis or a card; the whole body is capped
before it is read (``api.size``).
"""

from __future__ import annotations

from typing import Any

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


class ResultBody(BaseModel):
    """``POST /v1/approvals/{id}/result``: what happened when the caller acted."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    output: str = Field(default="", max_length=20_000)
