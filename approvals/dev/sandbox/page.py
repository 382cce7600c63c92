"""The sandbox page's panes as HTML: the channel, a thread, the Home tab, the open modal.

Built from one ``Snapshot`` of the workspace, so a pane never mixes two moments. Messages are
laid out as Slack does: top-level messages in the channel with a reply count, replies in the
thread pane, ephemeral messages marked "Only visible to you" and only shown to their person.
"""

from __future__ import annotations

import hashlib
import html
import json
import time
from dataclasses import asdict, dataclass
from typing import Any, TypeAlias

from approvals.dev.sandbox.blocks import render_blocks, render_view
from approvals.dev.sandbox.mrkdwn import TextContext, render_mrkdwn
from approvals.dev.sandbox.slack_api import Message
from approvals.dev.sandbox.workspace import Ephemeral, Snapshot

BOT_NAME = "approvals"
Item: TypeAlias = Message | Ephemeral


@dataclass(frozen=True)
class View:
    """What one browser tab is looking at."""

    user: str
    channel: str
    thread: str | None = None
    tab: str = "channel"  # or "home"


def render_state(snap: Snapshot, view: View, ctx: TextContext, bot_user: str) -> dict[str, Any]:
    """The JSON the page polls: each pane's HTML, and a key per modal revision."""
    writer = _Writer(ctx, bot_user, view.user)
    channel_name = ctx.channels.get(view.channel, view.channel)
    if view.tab == "home":
        title = f"{BOT_NAME} · Home"
        main = render_view(snap.home, ctx) if snap.home else _empty("Opening the Home tab…")
    else:
        title = f"#{channel_name}"
        main = writer.channel(snap, view.channel)
    return {
        "revision": snap.revision,
        "title": title,
        "main": main,
        "thread": writer.thread(snap, view.channel, view.thread) if view.thread else "",
        "modal": _modal(snap, ctx),
        "channels": _channels(snap, ctx, view.channel),
    }


def _modal(snap: Snapshot, ctx: TextContext) -> dict[str, str] | None:
    if snap.modal is None:
        return None
    form = json.dumps(asdict(snap.modal_form), sort_keys=True)
    digest = hashlib.sha1(form.encode(), usedforsecurity=False).hexdigest()[:12]
    key = f"{snap.modal.get('id')}:{snap.modal.get('hash')}:{digest}"
    return {"key": key, "html": render_view(snap.modal, ctx, snap.modal_form)}


def _channels(snap: Snapshot, ctx: TextContext, current: str) -> list[dict[str, Any]]:
    """The channels to list: the configured ones, then any other the bot posted in."""
    ids = list(ctx.channels)
    ids += sorted({m.channel for m in snap.messages} - set(ids))
    return [{"id": c, "name": ctx.channels.get(c, c.lower()), "current": c == current} for c in ids]


def _empty(text: str) -> str:
    return f'<div class="empty">{html.escape(text)}</div>'


class _Writer:
    """Renders messages for one person (their ephemerals, names, the bot's badge)."""

    def __init__(self, ctx: TextContext, bot_user: str, user: str) -> None:
        self.ctx = ctx
        self.bot_user = bot_user
        self.user = user

    def channel(self, snap: Snapshot, channel: str) -> str:
        top = [m for m in snap.messages if m.channel == channel and m.thread_ts in (None, m.ts)]
        mine = [e for e in snap.ephemerals if e.channel == channel and e.thread_ts is None]
        items: list[Item] = sorted([*top, *mine], key=lambda item: float(item.ts))
        if not items:
            return _empty(
                "No messages yet. Run an agent (try `approvals demo`) and its cards appear here."
            )
        replies = _reply_counts(snap.messages, channel)
        return "".join(
            self.message(i, replies.get(i.ts, 0)) if isinstance(i, Message) else self.ephemeral(i)
            for i in items
        )

    def thread(self, snap: Snapshot, channel: str, parent_ts: str) -> str:
        parent = next((m for m in snap.messages if (m.channel, m.ts) == (channel, parent_ts)), None)
        if parent is None:
            return _empty("This thread is gone.")
        replies: list[Item] = [
            m
            for m in snap.messages
            if m.channel == channel and m.thread_ts == parent_ts and m.ts != parent_ts
        ]
        mine = [e for e in snap.ephemerals if e.channel == channel and e.thread_ts == parent_ts]
        items = sorted([*replies, *mine], key=lambda i: float(i.ts))
        count = sum(1 for i in items if isinstance(i, Message))
        body = "".join(
            self.message(i, 0) if isinstance(i, Message) else self.ephemeral(i) for i in items
        )
        divider = f'<div class="thread-count">{count} repl{"y" if count == 1 else "ies"}</div>'
        return self.message(parent, 0, in_thread=True) + divider + body

    def message(self, message: Message, replies: int, in_thread: bool = False) -> str:
        link = ""
        if replies and not in_thread:
            label = f"{replies} repl{'y' if replies == 1 else 'ies'}"
            link = (
                f'<button type="button" class="replies" data-open-thread="{message.ts}">'
                f"{label}</button>"
            )
        attrs = (
            f'class="msg" data-container="message" data-channel="{html.escape(message.channel)}"'
            f' data-ts="{message.ts}"'
        )
        return self._frame(attrs, message.user, message.ts, self._content(message), link)

    def ephemeral(self, item: Ephemeral) -> str:
        attrs = f'class="msg ephemeral" data-container="ephemeral" data-id="{item.id}"'
        note = (
            '<div class="ephemeral-note">Only visible to you · '
            f'<button type="button" class="link" data-dismiss="{item.id}">Dismiss</button></div>'
        )
        content = render_blocks(item.blocks, self.ctx) if item.blocks else self._text(item.text)
        return self._frame(attrs, self.bot_user, item.ts, note + content, "")

    def _frame(self, attrs: str, author: str, ts: str, content: str, footer: str) -> str:
        is_bot = author == self.bot_user
        name = BOT_NAME if is_bot else self.ctx.users.get(author, author)
        badge = '<span class="badge">APP</span>' if is_bot else ""
        when = time.strftime("%H:%M", time.localtime(float(ts)))
        avatar = (
            f'<div class="avatar{" bot" if is_bot else ""}">{html.escape(name[:1].upper())}</div>'
        )
        return (
            f'<div {attrs}>{avatar}<div class="msg-main"><div class="msg-meta">'
            f'<span class="author">{html.escape(name)}</span>{badge}<time>{when}</time></div>'
            f'<div class="msg-content">{content}</div>{footer}</div></div>'
        )

    def _content(self, message: Message) -> str:
        if message.blocks:
            return render_blocks(message.blocks, self.ctx)
        return self._text(message.text)

    def _text(self, text: str) -> str:
        return f'<div class="bk-text">{render_mrkdwn(text, self.ctx)}</div>'


def _reply_counts(messages: list[Message], channel: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in messages:
        if m.channel == channel and m.thread_ts and m.thread_ts != m.ts:
            counts[m.thread_ts] = counts.get(m.thread_ts, 0) + 1
    return counts
