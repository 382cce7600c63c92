"""Previews for the common cases, for a gate's ``preview=``: what a call would do.

``file_write_diff(path, content)`` is the unified diff of writing ``content`` to ``path``;
``path_contents(path)`` says how many files a path holds, their size, and the first names;
``text_diff(path, old, new)`` is the diff of two texts. Each returns an ``approvals.Preview``.
"""

from approvals.calls.previews import (
    Preview,
    PreviewKind,
    file_write_diff,
    looks_like_diff,
    path_contents,
    text_diff,
)

__all__ = [
    "Preview",
    "PreviewKind",
    "file_write_diff",
    "looks_like_diff",
    "path_contents",
    "text_diff",
]
