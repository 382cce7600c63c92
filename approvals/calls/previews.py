"""Previews: a tool's own account of what a call would do, computed where the call pauses.

``compute_preview`` runs a gate's ``preview=`` function on the call's arguments within a time
limit, in a thread of its own: a preview that fails or takes too long becomes a preview saying
so, and the pause goes on (it never waits longer than the limit, nor fails for a preview).
The helpers below cover the common cases, and are what ``approvals.previews`` offers: the
unified diff of a file about to be written, and what a path holds.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from approvals.models.preview import Preview, PreviewKind, as_preview, looks_like_diff

__all__ = [
    "Preview",
    "PreviewKind",
    "compute_preview",
    "file_write_diff",
    "looks_like_diff",
    "path_contents",
    "text_diff",
]

#: The most characters of a failed preview's error the card repeats.
_ERROR_CHARS = 500


def compute_preview(fn: Callable[..., Any], arguments: dict[str, Any], timeout: float) -> Preview:
    """``fn(**arguments)`` as a ``Preview``, or a ``failed`` one saying why there is none.

    The function runs in a daemon thread: after ``timeout`` seconds the answer is "timed out"
    and the thread is left to finish on its own (nothing waits for it, not even the process's
    exit). A coroutine it returns is run to its end in that thread.
    """
    found: list[Preview] = []

    def run() -> None:
        try:
            value = fn(**arguments)
            if inspect.isawaitable(value):
                value = asyncio.run(_awaited(value))
            found.append(as_preview(value))
        except Exception as exc:  # a preview's failure is shown, never raised
            message = f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
            found.append(Preview(f"preview failed: {message}", PreviewKind.FAILED))

    thread = threading.Thread(target=run, name="approvals-preview", daemon=True)
    thread.start()
    thread.join(timeout)
    if not found:
        return Preview(f"preview timed out after {timeout:g} s", PreviewKind.FAILED)
    return found[0]


async def _awaited(value: Any) -> Any:
    return await value


def text_diff(path: str, old: str, new: str) -> Preview:
    """The unified diff turning ``old`` into ``new``, both the contents of ``path``."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path.lstrip('/')}" if old else "/dev/null",
        tofile=f"b/{path.lstrip('/')}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)  # fmt: skip
    return Preview(text or f"(no change to {path})", PreviewKind.DIFF if text else PreviewKind.TEXT)


def file_write_diff(path: str | os.PathLike[str], content: str) -> Preview:
    """The unified diff of writing ``content`` to ``path`` (every line added when the file
    does not exist yet); a file that is not text says so instead."""
    target = Path(path)
    try:
        old = target.read_text(encoding="utf-8") if target.exists() else ""
    except UnicodeDecodeError:
        return Preview(f"{target} is not UTF-8 text: it would be replaced whole", PreviewKind.TEXT)
    return text_diff(str(target), old, content)


def path_contents(path: str | os.PathLike[str], names: int = 20) -> Preview:
    """What ``path`` holds: how many files, their total size, and the first ``names`` of them
    (sorted), which is what deleting or moving it would touch."""
    target = Path(path)
    if not target.exists():
        return Preview(f"{target} does not exist: nothing would be touched")
    files = [target] if not target.is_dir() else sorted(_files(target))
    size = sum(_size(f) for f in files)
    lines = [f"{target}: {len(files)} file{'s' if len(files) != 1 else ''}, {_human(size)}"]
    lines += [f"  {f.relative_to(target) if f != target else f.name}" for f in files[:names]]
    if len(files) > names:
        lines.append(f"  … and {len(files) - names} more")
    return Preview("\n".join(lines))


def _files(root: Path) -> Iterable[Path]:
    for folder, _, names in os.walk(root):
        for name in names:
            yield Path(folder, name)


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _human(size: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"  # pragma: no cover
