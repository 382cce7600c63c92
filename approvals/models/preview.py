"""A preview: what a gated call would do, as the tool itself computes it, for the people deciding.

A tool's ``preview=`` function returns one (or a plain string, read as text, or as a diff when
it looks like a unified diff); an API caller sends one as text. What is stored is the whole
preview up to ``MAX_PREVIEW_CHARS``, its SHA-256 (the receipt and the audit trail name the
preview that was shown by it), and a head short enough for the approval's record, which every
card, list and reminder reads: the whole of a long preview lives in its own key and is read
only when someone opens it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum


class PreviewKind(StrEnum):
    """How a preview is shown."""

    #: Plain text, shown as a code block.
    TEXT = "text"
    #: Slack markdown (mrkdwn), shown as written.
    MARKDOWN = "markdown"
    #: A unified diff, shown as a code block with its ``+``/``-`` lines.
    DIFF = "diff"
    #: The preview function failed or ran out of time: the text says which.
    FAILED = "failed"


#: A unified diff's file header lines, which say no change.
_HEADERS = ("+++", "---")
#: The most characters of a preview kept (a longer one is cut, with a note saying so).
MAX_PREVIEW_CHARS = 1_000_000
#: The most characters of a preview an HTTP API caller sends (a request body stays small).
CALLER_PREVIEW_CHARS = 10_000
#: The most characters of a preview the approval's record holds: what cards and lists show.
HEAD_CHARS = 4_000


@dataclass(frozen=True)
class Preview:
    """What a call would do: ``text`` shown as ``kind`` says ("text", "markdown" or "diff")."""

    text: str
    kind: PreviewKind = PreviewKind.TEXT

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"a preview's text must be a string, not {type(self.text).__name__}")
        object.__setattr__(self, "kind", PreviewKind(self.kind))

    @property
    def sha256(self) -> str:
        """The hex SHA-256 of the text's UTF-8 bytes: how receipts and audits name it."""
        return hashlib.sha256(self.text.encode("utf-8", "replace")).hexdigest()

    @property
    def head(self) -> str:
        """The first ``HEAD_CHARS`` characters (the whole text when it is that short)."""
        return self.text[:HEAD_CHARS]

    @property
    def shortened(self) -> Preview:
        """The head alone, as a preview of its own (itself when it is that short)."""
        return self if len(self.text) <= HEAD_CHARS else Preview(self.head, self.kind)

    @property
    def first_line(self) -> str:
        """The first line that says something (a diff's first changed line, after its
        ``---``/``+++`` header)."""
        lines = [line for line in self.head.splitlines() if line.strip()]
        if self.kind is PreviewKind.DIFF:
            changed = [line for line in lines if line[:1] in "+-" and line[:3] not in _HEADERS]
            lines = changed or lines
        return lines[0].strip() if lines else ""


def as_preview(value: object, default: PreviewKind = PreviewKind.TEXT) -> Preview:
    """What a preview function returned, as a ``Preview`` cut to ``MAX_PREVIEW_CHARS``: a
    ``Preview`` as it is; a string as a diff when it looks like one, else as ``default``.

    Raises:
        TypeError: it is neither.
    """
    if isinstance(value, Preview):
        preview = value
    elif isinstance(value, str):
        kind = PreviewKind.DIFF if looks_like_diff(value) else default
        preview = Preview(value, kind)
    else:
        raise TypeError(f"a preview must be a string or a Preview, not {type(value).__name__}")
    return capped(preview)


def capped(preview: Preview) -> Preview:
    """The preview as it can be stored: valid UTF-8 (a lone surrogate replaced), cut to
    ``MAX_PREVIEW_CHARS`` and ending with a note when it was cut."""
    text = preview.text.encode("utf-8", "replace").decode("utf-8")
    if len(text) > MAX_PREVIEW_CHARS:
        note = f"\n… (cut: the preview had {len(text)} characters)"
        text = text[: MAX_PREVIEW_CHARS - len(note)] + note
    return preview if text == preview.text else Preview(text, preview.kind)


def looks_like_diff(text: str) -> bool:
    """Whether ``text`` is a unified diff: a ``---`` line, a ``+++`` line, then a hunk."""
    lines = text.lstrip("\n").splitlines()[:200]
    for i, line in enumerate(lines[:-2]):
        if line.startswith("--- ") and lines[i + 1].startswith("+++ "):
            return lines[i + 2].startswith("@@")
    return False
