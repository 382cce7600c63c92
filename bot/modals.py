"""The Edit, Reject and Respond modals: how they are built, and how submissions are read back.

Building and reading live together because both depend on the same block ids. The Edit modal
is built from the tool's JSON schema: one typed input per editable argument.
"""

from __future__ import annotations

import json
from typing import Any

from approvals.models import Approval
from approvals.slack.cards import Block, arguments_text
from approvals.slack.limits import BLOCK_ID, MODAL_BLOCKS, PLAIN_TEXT_INPUT, truncate

EDIT_VIEW = "approval_edit_submit"
REJECT_VIEW = "approval_reject_submit"
RESPOND_VIEW = "approval_respond_submit"
REASON_BLOCK = "reason"
RESPONSE_BLOCK = "response"
VALUE_ACTION = "value"
_ARG_PREFIX = "arg-"
#: Slack's limits for select options: 100 options, 75-character labels, 150-character values.
_MAX_OPTIONS, _OPTION_TEXT, _OPTION_VALUE = 100, 75, 150


def _plain(text: str) -> Block:
    return {"type": "plain_text", "text": text}


def _markdown(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": truncate(text, 3000)}}


def block_for(argument: str) -> str:
    """The block id of an argument's input (and where its validation errors show)."""
    return truncate(_ARG_PREFIX + argument, BLOCK_ID, "")


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """Follow a local ``$ref`` (pydantic puts enums and models under ``$defs``)."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = root.get("$defs", {}).get(ref.removeprefix("#/$defs/"))
        if isinstance(target, dict):
            return {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _kind(schema: dict[str, Any]) -> str:
    """How an argument is edited: string, optional-string, integer, number, boolean, enum, json."""
    choices = schema.get("enum")
    if (
        isinstance(choices, list)
        and 0 < len(choices) <= _MAX_OPTIONS
        and all(len(_encode(c)) <= _OPTION_VALUE for c in choices)
    ):
        return "enum"
    kind = schema.get("type")
    if kind in ("string", "integer", "number", "boolean"):
        return str(kind)
    options = {o.get("type") for o in schema.get("anyOf", []) if isinstance(o, dict)}
    if options and options <= {"string", "null"} and "string" in options:
        return "optional-string"
    return "json"


def _properties(approval: Approval) -> dict[str, dict[str, Any]]:
    root = approval.tool.schema
    props = root.get("properties")
    props = dict(props) if isinstance(props, dict) else {}
    for name in approval.arguments:
        props.setdefault(name, {})
    return {name: _resolve(s if isinstance(s, dict) else {}, root) for name, s in props.items()}


def _as_text(kind: str, value: Any) -> str | None:
    if value is None:
        return None
    if kind in ("string", "optional-string") and isinstance(value, str):
        return value
    if kind in ("integer", "number") and isinstance(value, int | float):
        return str(value)
    return json.dumps(
        value, ensure_ascii=False, indent=1 if isinstance(value, dict | list) else None
    )


def _encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _option(value: Any) -> Block:
    encoded = _encode(value)
    label = value if isinstance(value, str) else encoded
    return {"text": _plain(truncate(label, _OPTION_TEXT)), "value": encoded}


def _fits(kind: str, value: Any) -> bool:
    """Whether a proposed value can be shown in the typed input of ``kind``."""
    if value is None:
        return True
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("integer", "number"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def _element(kind: str, schema: dict[str, Any], value: Any) -> Block:
    if not _fits(kind, value):
        kind = "json"  # a proposal of the wrong type is shown as is, for the reviewer to fix
    if kind in ("enum", "boolean"):
        choices = schema["enum"] if kind == "enum" else [True, False]
        element: Block = {
            "type": "static_select",
            "action_id": VALUE_ACTION,
            "options": [_option(c) for c in choices],
        }
        # Compared as JSON: 1 == True in Python, but not for the tool.
        if value is not None and _encode(value) in {_encode(c) for c in choices}:
            element["initial_option"] = _option(value)
        return element
    if kind in ("integer", "number"):
        element = {
            "type": "number_input",
            "action_id": VALUE_ACTION,
            "is_decimal_allowed": kind == "number",
        }
    else:
        text = _as_text(kind, value) or ""
        element = {
            "type": "plain_text_input",
            "action_id": VALUE_ACTION,
            "multiline": kind == "json" or len(text) > 80,
            "max_length": PLAIN_TEXT_INPUT,
        }
    initial = _as_text(kind, value)
    if initial is not None:
        element["initial_value"] = initial
    return element


def build_edit_modal(approval: Approval) -> Block:
    """One typed input per editable argument, prefilled with what the model proposed."""
    blocks: list[Block] = [
        _markdown(
            f"Edit the arguments of `{approval.tool_name}`; it runs with them once you approve. "
            "Objects and lists are written as JSON."
        )
    ]
    editable = set(approval.editable)
    required = set(approval.tool.schema.get("required", []))
    locked: dict[str, Any] = {}
    for name, schema in list(_properties(approval).items())[: MODAL_BLOCKS - 2]:
        # An argument the model left out is shown with the tool's default.
        value = approval.arguments.get(name, schema.get("default"))
        kind = _kind(schema)
        text = _as_text(kind, value)
        if name not in editable or (text is not None and len(text) > PLAIN_TEXT_INPUT):
            if name in approval.arguments:
                locked[name] = approval.shown_arguments[name]
            continue
        label = f"{name} (JSON)" if kind == "json" else name
        block: Block = {
            "type": "input",
            "block_id": block_for(name),
            "label": _plain(truncate(label, 2000)),
            "optional": name not in required,
            "element": _element(kind, schema, value),
        }
        if schema.get("description"):
            block["hint"] = _plain(truncate(str(schema["description"]), 2000))
        blocks.append(block)
    if locked:
        blocks.append(
            _markdown(f"*Not editable, runs as proposed:*\n{arguments_text(locked, 2900)}")
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


def _submitted(field: dict[str, Any]) -> str | None:
    if field.get("type") == "static_select":
        option = field.get("selected_option")
        value = option.get("value") if isinstance(option, dict) else None
    else:
        value = field.get("value")
    return value if isinstance(value, str) else None


def _parse(kind: str, raw: str | None) -> tuple[bool, Any]:
    """(present, value) of one submitted input; raises ValueError when unreadable."""
    if kind == "string":
        return True, raw or ""
    if kind == "optional-string":
        return True, raw or None
    if raw is None or not raw.strip():
        return False, None
    if kind == "integer":
        return True, int(raw)
    if kind == "number":
        return True, float(raw)
    return True, json.loads(raw)


def read_edit_submission(
    approval: Approval, state_values: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The edited arguments and, per block id, the inputs that could not be read.

    Arguments without an input (not editable, or too long to edit) keep the proposed value,
    whatever a forged submission says about them.
    """
    arguments: dict[str, Any] = {}
    errors: dict[str, str] = {}
    editable = set(approval.editable)
    for name, schema in _properties(approval).items():
        field = state_values.get(block_for(name), {}).get(VALUE_ACTION)
        if not isinstance(field, dict) or name not in editable:
            if name in approval.arguments:
                arguments[name] = approval.arguments[name]
            continue
        kind, raw = _kind(schema), _submitted(field)
        if raw is not None and len(raw) > PLAIN_TEXT_INPUT:
            # Slack's inputs send no more than this, so the submission is not Slack's own.
            errors[block_for(name)] = f"At most {PLAIN_TEXT_INPUT} characters, not {len(raw)}."
            continue
        try:
            present, value = _parse(kind, raw)
        except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deeply
            errors[block_for(name)] = (
                f"Not valid JSON: {exc}"
                if kind in ("json", "enum", "boolean")
                else f"Not a valid {kind}: {exc}"
            )
            continue
        if not present:
            continue
        if name not in approval.arguments and value == schema.get("default", object()):
            continue  # left at the default the model relied on: not an edit
        arguments[name] = value
    return arguments, errors


def build_reject_modal(approval: Approval) -> Block:
    """Ask for a reason (required when the gate says so); the model receives it."""
    return {
        "type": "modal",
        "callback_id": REJECT_VIEW,
        "private_metadata": approval.id,
        "title": _plain("Reject"),
        "submit": _plain("Reject"),
        "close": _plain("Cancel"),
        "blocks": [
            _markdown(
                f"Reject `{approval.tool_name}` from {approval.agent}. "
                + (
                    "The run stops here."
                    if approval.policy.on_reject.value == "stop"
                    else "The agent is told, with your reason, and can try something else."
                )
            ),
            _text_input(REASON_BLOCK, "Reason", optional=not approval.policy.reason_required),
        ],
    }


def build_respond_modal(approval: Approval) -> Block:
    """Let the reviewer write the tool's result; the tool does not run."""
    return {
        "type": "modal",
        "callback_id": RESPOND_VIEW,
        "private_metadata": approval.id,
        "title": _plain("Respond instead"),
        "submit": _plain("Send"),
        "close": _plain("Cancel"),
        "blocks": [
            _markdown(
                f"`{approval.tool_name}` will not run. Write what the agent receives as its "
                f"result:\n{arguments_text(approval.shown_arguments, 2500)}"
            ),
            _text_input(RESPONSE_BLOCK, "Result for the agent", optional=False),
        ],
    }


def _text_input(block_id: str, label: str, optional: bool) -> Block:
    return {
        "type": "input",
        "block_id": block_id,
        "label": _plain(label),
        "optional": optional,
        "element": {
            "type": "plain_text_input",
            "action_id": VALUE_ACTION,
            "multiline": True,
            "max_length": PLAIN_TEXT_INPUT,
        },
    }


def read_text(state_values: dict[str, Any], block_id: str) -> str | None:
    """A text input's value, stripped; None when empty."""
    field = state_values.get(block_id, {}).get(VALUE_ACTION)
    value = field.get("value") if isinstance(field, dict) else None
    return (value.strip() or None) if isinstance(value, str) else None


def build_notice_modal(text: str) -> Block:
    """A modal that only says something (replaces a form that can no longer be submitted)."""
    return {
        "type": "modal",
        "title": _plain("Approvals"),
        "close": _plain("Close"),
        "blocks": [_markdown(text)],
    }
