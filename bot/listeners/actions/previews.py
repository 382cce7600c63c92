"""The card's **View preview** button and the preview modal's page buttons."""

from __future__ import annotations

import re
from typing import Any

from slack_bolt import Ack, App
from slack_sdk import WebClient

from approvals import store
from approvals.bot.listeners.ack import acknowledge
from approvals.bot.runtime import runtime_of
from approvals.errors import ApprovalsError
from approvals.models import Approval
from approvals.models.preview import Preview
from approvals.slack.previews import (
    PREVIEW_PAGE_ACTION,
    VIEW_PREVIEW_ACTION,
    build_preview_modal,
    parse_page_value,
)


def register(app: App) -> None:
    # Not lazy: the modal must open while the click's trigger_id lives.
    app.action(VIEW_PREVIEW_ACTION)(handle_view_preview)
    app.action(re.compile(f"^{PREVIEW_PAGE_ACTION}-"))(ack=acknowledge, lazy=[handle_preview_page])


def handle_view_preview(
    ack: Ack, body: dict[str, Any], context: dict[str, Any], client: WebClient
) -> None:
    """Open the whole preview, its first page, in a modal."""
    ack()
    value, trigger_id = body["actions"][0].get("value"), body.get("trigger_id")
    if not isinstance(value, str) or not isinstance(trigger_id, str) or not trigger_id:
        return
    shown = _preview(context, value)
    if shown is not None:
        client.views_open(trigger_id=trigger_id, view=build_preview_modal(*shown))


def handle_preview_page(body: dict[str, Any], context: dict[str, Any], client: WebClient) -> None:
    """Show another page of the preview in the same modal."""
    value, view = body["actions"][0].get("value"), body.get("view")
    page = parse_page_value(value) if isinstance(value, str) else None
    if page is None or not isinstance(view, dict) or not isinstance(view.get("id"), str):
        return
    shown = _preview(context, page[0])
    if shown is not None:
        client.views_update(view_id=view["id"], view=build_preview_modal(*shown, page[1]))


def _preview(context: dict[str, Any], approval_id: str) -> tuple[Approval, Preview] | None:
    """The approval and the whole of its preview; None when either is gone."""
    conn = runtime_of(context).conn
    try:
        approval = store.records.load(conn, approval_id)
    except ApprovalsError:
        return None
    preview = store.records.load_preview(conn, approval)
    return None if preview is None else (approval, preview)
