"""The Edit and Reject modals: how they are built, and how their submissions are read back.

Building and reading live together because both depend on the same block ids.
"""

from __future__ import annotations

import json
from typing import Any

from approvals.cards import Block
from approvals.limits import BLOCK_ID, MODAL_BLOCKS, PLAIN_TEXT_INPUT, truncate
from approvals.models import Approval

EDIT_VIEW = "approval_edit_submit"
REJECT_VIEW = "approval_reject_submit"
REASON_BLOCK = "reason"
VALUE_ACTION = "value"
_ARG_PREFIX = "arg-"


def _plain(text: str) -> Block:
    return {"type": "plain_text", "text": text}


def _kind(schema: dict[str, Any]) -> str:
    """``string`` (typed as is), ``optional-string`` (empty means null) or ``json``."""
    if schema.get("type") == "string":
        return "string"
    options = {o.get("type") for o in schema.get("anyOf", []) if isinstance(o, dict)}
    if options and options <= {"string", "null"} and "string" in options:
        return "optional-string"
    return "json"


def _properties(approval: Approval) -> dict[str, dict[str, Any]]:
    props = approval.tool.schema.get("properties")
    props = dict(props) if isinstance(props, dict) else {}
    for name in approval.arguments:
        props.setdefault(name, {})
    return props


def _initial(kind: str, value: Any) -> str | None:
    if value is None:
        return None
    if kind != "json" and isinstance(value, str):
        return value
    return json.dumps(
        value, ensure_ascii=False, indent=1 if isinstance(value, dict | list) else None
    )


def build_edit_modal(approval: Approval) -> Block:
    """One input per argument, prefilled with what the model proposed."""
    blocks: list[Block] = [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": truncate(
                    f"Edit the arguments of `{approval.tool_name}` before it runs. "
                    "Text arguments are typed as is; other types as JSON.",
                    3000,
                ),
            },
        },
    ]
    required = set(approval.tool.schema.get("required", []))
    for name, schema in list(_properties(approval).items())[: MODAL_BLOCKS - 1]:
        kind = _kind(schema)
        # An argument the model left out is shown with the tool's default.
        initial = _initial(kind, approval.arguments.get(name, schema.get("default")))
        block_id = truncate(_ARG_PREFIX + name, BLOCK_ID, "")
        if initial is not None and len(initial) > PLAIN_TEXT_INPUT:
            blocks.append(
                {
                    "type": "section",
                    "block_id": block_id,
                    "text": {
                        "type": "mrkdwn",
                        "text": f"*{name}* is too long to edit here and stays as proposed.",
                    },
                }
            )
            continue
        element: Block = {
            "type": "plain_text_input",
            "action_id": VALUE_ACTION,
            "multiline": kind == "json" or len(initial or "") > 80,
            "max_length": PLAIN_TEXT_INPUT,
        }
        if initial is not None:
            element["initial_value"] = initial
        label = name if kind != "json" else f"{name} (JSON)"
        blocks.append(
            {
                "type": "input",
                "block_id": block_id,
                "label": _plain(truncate(label, 2000)),
                "optional": name not in required,
                "element": element,
            }
        )
    return {
        "type": "modal",
        "callback_id": EDIT_VIEW,
        "private_metadata": approval.id,
        "title": _plain("Edit and approve"),
        "submit": _plain("Approve"),
        "close": _plain("Cancel"),
        "blocks": blocks,
    }


def read_edit_submission(
    approval: Approval, state_values: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The edited arguments and, per block id, the inputs that could not be read."""
    arguments: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, schema in _properties(approval).items():
        block_id = truncate(_ARG_PREFIX + name, BLOCK_ID, "")
        field = state_values.get(block_id, {}).get(VALUE_ACTION)
        if not isinstance(field, dict):
            if name in approval.arguments:  # shown read-only: keep what the model proposed
                arguments[name] = approval.arguments[name]
            continue
        raw = field.get("value")
        kind = _kind(schema)
        if kind == "string":
            arguments[name] = raw if isinstance(raw, str) else ""
        elif kind == "optional-string":
            arguments[name] = raw if isinstance(raw, str) and raw != "" else None
        elif isinstance(raw, str) and raw.strip():
            try:
                arguments[name] = json.loads(raw)
            except ValueError as exc:
                errors[block_id] = f"Not valid JSON: {exc}"
        if (
            name in arguments
            and name not in approval.arguments
            and "default" in schema
            and arguments[name] == schema["default"]
        ):
            del arguments[name]  # left at the default the model relied on: not an edit
    return arguments, errors


def error_block_for(argument: str) -> str:
    """The block id that shows a validation error about ``argument``."""
    return truncate(_ARG_PREFIX + argument, BLOCK_ID, "")


def build_reject_modal(approval: Approval) -> Block:
    """Ask for an optional reason; the model receives it with the rejection."""
    return {
        "type": "modal",
        "callback_id": REJECT_VIEW,
        "private_metadata": approval.id,
        "title": _plain("Reject"),
        "submit": _plain("Reject"),
        "close": _plain("Cancel"),
        "blocks": [
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": truncate(
                        f"Reject `{approval.tool_name}` from {approval.agent}. The agent is told, "
                        "with your reason, and can try something else.",
                        3000,
                    ),
                },
            },
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "label": _plain("Reason"),
                "optional": True,
                "element": {
                    "type": "plain_text_input",
                    "action_id": VALUE_ACTION,
                    "multiline": True,
                    "max_length": PLAIN_TEXT_INPUT,
                },
            },
        ],
    }


def read_reject_reason(state_values: dict[str, Any]) -> str | None:
    field = state_values.get(REASON_BLOCK, {}).get(VALUE_ACTION)
    value = field.get("value") if isinstance(field, dict) else None
    return value.strip() or None if isinstance(value, str) else None


def build_notice_modal(text: str) -> Block:
    """A modal that only says something (replaces a form that can no longer be submitted)."""
    return {
        "type": "modal",
        "title": _plain("Approvals"),
        "close": _plain("Close"),
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 3000)}}],
    }
