"""Slack's ``mrkdwn`` text format rendered to safe HTML, for the sandbox's page.

Covers what the bot writes: ``*bold*``, ``_italic_``, ``~strike~``, inline code, code blocks,
line breaks, user mentions ``<@U…>``, dates ``<!date^…>``, links, ``&lt;``-style escapes and
emoji shortcodes. Everything else is shown as text. Whatever the input, the output never
contains markup that did not come from this module: text is HTML-escaped before any tag is
added, and special sequences are swapped out for placeholders while formatting runs.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

EMOJI = {
    "hourglass_flowing_sand": "⏳",
    "white_check_mark": "✅",
    "heavy_check_mark": "✔️",
    "pencil2": "✏️",
    "no_entry": "⛔",
    "no_entry_sign": "🚫",
    "gear": "⚙️",
    "checkered_flag": "🏁",
    "double_vertical_bar": "⏸️",
    "x": "❌",
    "warning": "⚠️",
    "information_source": "\u2139\ufe0f",
    "robot_face": "🤖",
    "wastebasket": "🗑️",
    "lock": "🔒",
    "bell": "🔔",
    "eyes": "👀",
    "tada": "🎉",
    "rocket": "🚀",
    "thumbsup": "👍",
    "+1": "👍",
    "thumbsdown": "👎",
}

_SPECIAL = re.compile(r"<([^<>\n]+)>")
_EMOJI = re.compile(r":([a-z0-9_+\-]+):")
_STYLES = (
    (re.compile(r"(?<![\w*])\*(?=\S)([^*\n]*?\S)\*(?![\w*])"), "strong"),
    (re.compile(r"(?<![\w_])_(?=\S)([^_\n]*?\S)_(?![\w_])"), "em"),
    (re.compile(r"(?<![\w~])~(?=\S)([^~\n]*?\S)~(?![\w~])"), "del"),
)
_PLACEHOLDER = re.compile("\x00(\\d+)\x00")


@dataclass(frozen=True)
class TextContext:
    """What rendering needs to know beyond the text: names for mentions, and the clock."""

    users: Mapping[str, str] = field(default_factory=dict)
    channels: Mapping[str, str] = field(default_factory=dict)
    now: Callable[[], float] = time.time


def render_mrkdwn(text: str, ctx: TextContext | None = None) -> str:
    """``text`` in Slack's mrkdwn as HTML."""
    ctx = ctx or TextContext()
    return "".join(
        f'<pre class="mk-pre">{_escape(part.strip(chr(10)))}</pre>' if code else _inline(part, ctx)
        for code, part in _fenced(text, "```")
    )


def render_plain(text: str, emoji: bool = True) -> str:
    """``plain_text``: escaped, with line breaks and (when ``emoji``) emoji shortcodes."""
    escaped = html.escape(text, quote=False).replace("\n", "<br>")
    return _emoji(escaped) if emoji else escaped


def _fenced(text: str, fence: str) -> Iterator[tuple[bool, str]]:
    """``(is_code, part)`` pieces; an unclosed fence stays text, as in Slack."""
    parts = text.split(fence)
    for i, part in enumerate(parts):
        if i % 2 == 0:
            yield False, part
        elif i < len(parts) - 1 and part:
            yield True, part
        else:
            yield False, fence + part + (fence if i < len(parts) - 1 else "")


def _inline(text: str, ctx: TextContext) -> str:
    return "".join(
        f'<code class="mk-code">{_escape(part)}</code>' if code else _formatted(part, ctx)
        for code, part in _fenced(text, "`")
    )


def _formatted(text: str, ctx: TextContext) -> str:
    saved: list[str] = []

    def keep(match: re.Match[str]) -> str:
        saved.append(_special(match.group(1), ctx))
        return f"\x00{len(saved) - 1}\x00"

    body = _escape(_SPECIAL.sub(keep, text))
    for pattern, tag in _STYLES:
        body = pattern.sub(rf"<{tag}>\1</{tag}>", body)
    body = _emoji(body).replace("\n", "<br>")
    return _PLACEHOLDER.sub(lambda m: saved[int(m.group(1))], body)


def _escape(text: str) -> str:
    """Undo Slack's own three escapes, then escape for HTML."""
    raw = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return html.escape(raw, quote=False)


def _emoji(escaped: str) -> str:
    return _EMOJI.sub(lambda m: EMOJI.get(m.group(1), m.group(0)), escaped)


def _special(inner: str, ctx: TextContext) -> str:
    """One ``<…>`` sequence: a mention, a channel, a date, a broadcast or a link."""
    target, _, label = inner.partition("|")
    if target.startswith("@"):
        name = ctx.users.get(target[1:], target[1:])
        return f'<span class="mk-mention">@{html.escape(name)}</span>'
    if target.startswith("#"):
        name = label or ctx.channels.get(target[1:], target[1:])
        return f'<span class="mk-mention">#{html.escape(name)}</span>'
    if target.startswith("!date^"):
        return f"<time>{html.escape(_date(target, label, ctx))}</time>"
    if target.startswith("!"):
        word = label or target[1:].split("^", 1)[0]
        return f'<span class="mk-mention">@{html.escape(word)}</span>'
    if re.match(r"(https?|mailto):", target):
        href = html.escape(target, quote=True)
        text = html.escape(label or target)
        return f'<a href="{href}" target="_blank" rel="noopener noreferrer">{text}</a>'
    return _escape(f"<{inner}>")


def _date(target: str, fallback: str, ctx: TextContext) -> str:
    """``!date^<epoch>^<format>[^link]`` with Slack's tokens, in this machine's local time."""
    parts = target.split("^")
    try:
        when = float(parts[1])
        template = parts[2]
    except (IndexError, ValueError):
        return fallback or target
    moment = time.localtime(when)
    day = _pretty_day(when, ctx.now())
    tokens = {
        "date_num": time.strftime("%Y-%m-%d", moment),
        "date": time.strftime("%B %-d, %Y", moment),
        "date_short": time.strftime("%b %-d, %Y", moment),
        "date_long": time.strftime("%A, %B %-d, %Y", moment),
        "date_pretty": day or time.strftime("%B %-d, %Y", moment),
        "date_short_pretty": day or time.strftime("%b %-d, %Y", moment),
        "date_long_pretty": day or time.strftime("%A, %B %-d, %Y", moment),
        "time": time.strftime("%H:%M", moment),
        "time_secs": time.strftime("%H:%M:%S", moment),
    }
    return re.sub(r"\{(\w+)\}", lambda m: tokens.get(m.group(1), m.group(0)), template)


def _pretty_day(when: float, now: float) -> str | None:
    day = time.strftime("%Y-%m-%d", time.localtime(when))
    for offset, word in ((0, "Today"), (-86400, "Yesterday"), (86400, "Tomorrow")):
        if day == time.strftime("%Y-%m-%d", time.localtime(now + offset)):
            return word
    return None
