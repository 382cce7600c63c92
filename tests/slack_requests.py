"""Signed Slack-shaped requests for the tests; the sandbox of ``approvals dev`` sends the same
ones to the bot, so they live in the package (``approvals/dev/sandbox/slack_requests.py``)."""

from approvals.dev.sandbox.slack_requests import (
    FORM,
    JSON,
    block_actions_payload,
    event_callback_payload,
    post_signed,
    send_command,
    send_event,
    send_interaction,
    signature_headers,
    slash_command_form,
    view_submission_payload,
)

__all__ = [
    "FORM",
    "JSON",
    "block_actions_payload",
    "event_callback_payload",
    "post_signed",
    "send_command",
    "send_event",
    "send_interaction",
    "signature_headers",
    "slash_command_form",
    "view_submission_payload",
]
