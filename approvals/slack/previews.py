"""How a preview looks in Slack: its head on a card, the whole of it in a modal, in pages.

Pure builders, as ``cards`` is. Text and diffs are code blocks (Slack's three characters
escaped, and a fence inside the text broken so it cannot end the block early), cut at a line
end with a note saying how much is left; a caller's markdown is shown as written. A failed
preview is one line saying why.
"""

from __future__ import annotations

import json
from typing import Any

from approvals.models import Approval
from approvals.models.preview import Preview, PreviewKind
from approvals.slack.limits import (
    ACTION_ID,
    MODAL_TITLE,
    PREVIEW_CARD_CHARS,
    PREVIEW_PAGE_SECTIONS,
    SECTION_TEXT,
    truncate,
)

#: The card's button that opens the whole preview in a modal (its value: the approval id).
VIEW_PREVIEW_ACTION = "preview_view"
#: The modal's page buttons (their value: ``{"id": ..., "page": ...}``).
PREVIEW_PAGE_ACTION = "preview_page"
#: The text of one section of the modal, room left for the fence and the note.
_CHUNK = SECTION_TEXT - 100

Block = dict[str, Any]


def build_preview_blocks(approval: Approval) -> list[Block]:
    """The preview's head on the card, and **View preview** when there is more to see."""
    preview = approval.shown_preview
    if preview is None:
        return []
    if preview.kind is PreviewKind.FAILED:
        return [_context(f":warning: {truncate(preview.text, 500)}")]
    text, cut = preview_text(preview, PREVIEW_CARD_CHARS)
    blocks: list[Block] = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    if cut or approval.preview_cut:
        blocks.append({"type": "actions", "block_id": f"preview-{approval.id}",
                       "elements": [build_view_button(approval)]})  # fmt: skip
    return blocks


def build_view_button(approval: Approval) -> Block:
    """**View preview**: opens the approval's whole preview in a modal."""
    return {
        "type": "button",
        "action_id": VIEW_PREVIEW_ACTION,
        "text": {"type": "plain_text", "text": "View preview"},
        "value": approval.id,
    }


def build_edited_preview_blocks(
    preview: Preview | None, title: str = "*Preview of the edited call, just before it ran:*"
) -> list[Block]:
    """A preview computed again in the worker, for a thread reply: for the edited arguments
    just before the tool ran (the result's reply), or on a state that changed since the
    decision (``title`` says which)."""
    if preview is None:
        return []
    if preview.kind is PreviewKind.FAILED:
        return [_context(f"{title} {truncate(preview.text, 500)}")]
    text, _ = preview_text(preview, PREVIEW_CARD_CHARS)
    return [{"type": "section", "text": {"type": "mrkdwn", "text": f"{title}\n{text}"}}]


def preview_text(preview: Preview, limit: int = SECTION_TEXT) -> tuple[str, bool]:
    """The preview as one section's mrkdwn of at most ``limit`` characters, and whether it
    was cut to fit."""
    if preview.kind is PreviewKind.MARKDOWN:
        return truncate(preview.text, limit), len(preview.text) > limit
    body, rest = _fit(_escaped(preview.text), limit - 8)
    note = f"\n… {rest} more line{'s' if rest != 1 else ''}" if rest else ""
    return f"```\n{body}\n```{note}", bool(rest)


def first_line(approval: Approval, limit: int = 150) -> str | None:
    """The preview's first line, for lists (App Home, ``/agent-pending``); None without one."""
    preview = approval.shown_preview
    if preview is None:
        return None
    line = preview.first_line
    return truncate(_escaped(line) if preview.kind is not PreviewKind.MARKDOWN else line, limit)


def preview_pages(preview: Preview) -> list[list[str]]:
    """The preview cut into pages of sections' texts, each within a section's limit."""
    chunks: list[str] = []
    rest = preview.text if preview.kind is PreviewKind.MARKDOWN else _escaped(preview.text)
    while rest:
        if preview.kind is PreviewKind.MARKDOWN:
            chunk, rest = rest[:_CHUNK], rest[_CHUNK:]
        else:
            chunk, rest = _split(rest, _CHUNK)
        chunks.append(chunk if preview.kind is PreviewKind.MARKDOWN else f"```\n{chunk}\n```")
    size = PREVIEW_PAGE_SECTIONS
    return [chunks[i : i + size] for i in range(0, len(chunks), size)] or [["(empty preview)"]]


def build_preview_modal(approval: Approval, preview: Preview, page: int = 0) -> Block:
    """The whole preview in a modal, one page of it (``page`` counts from 0), with buttons
    to the pages before and after."""
    pages = preview_pages(preview)
    page = min(max(page, 0), len(pages) - 1)
    what = approval.shown_summary or f"`{approval.tool_name}`"
    blocks: list[Block] = [_context(f"{truncate(what, 1000)} · {approval.agent} · page "
                                    f"{page + 1} of {len(pages)} · sha256 "
                                    f"`{(approval.preview_sha256 or '')[:12]}`")]  # fmt: skip
    blocks += [{"type": "section", "text": {"type": "mrkdwn", "text": t}} for t in pages[page]]
    buttons = [_page_button(approval, label, to) for label, to in
               (("Previous page", page - 1), ("Next page", page + 1))
               if 0 <= to < len(pages)]  # fmt: skip
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": truncate("Preview", MODAL_TITLE)},
        "close": {"type": "plain_text", "text": "Close"},
        "private_metadata": approval.id,
        "blocks": blocks,
    }


def parse_page_value(value: str) -> tuple[str, int] | None:
    """(approval id, page) from a page button's value; None when it is not one."""
    try:
        data = json.loads(value)
        approval_id, page = data["id"], data["page"]
    except (ValueError, LookupError, TypeError, RecursionError):
        return None
    if not isinstance(approval_id, str) or not isinstance(page, int) or isinstance(page, bool):
        return None
    return approval_id, page


def _page_button(approval: Approval, label: str, page: int) -> Block:
    return {
        "type": "button",
        "action_id": truncate(f"{PREVIEW_PAGE_ACTION}-{page}", ACTION_ID, ""),
        "text": {"type": "plain_text", "text": label},
        "value": json.dumps({"id": approval.id, "page": page}),
    }


def _context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": truncate(text, 3000)}]}


def _escaped(text: str) -> str:
    """Plain text made safe inside a code block: Slack's escapes, and no fence of its own."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("```", "`\u200b``")


def _fit(text: str, limit: int) -> tuple[str, int]:
    """The lines of ``text`` that fit in ``limit`` characters, and how many lines are left."""
    if len(text) <= limit:
        return text, 0
    kept, rest = _split(text, limit - 30)
    return kept, rest.count("\n") + 1


def _split(text: str, limit: int) -> tuple[str, str]:
    """``text`` cut after its last whole line within ``limit`` characters (mid-line when one
    line alone is longer): the part kept, and the rest."""
    if len(text) <= limit:
        return text, ""
    cut = text.rfind("\n", 0, limit)
    if cut <= 0:
        return text[:limit], text[limit:]
    return text[:cut], text[cut + 1 :]
