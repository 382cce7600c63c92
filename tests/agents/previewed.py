"""Tools whose gates compute a preview: a real file diff, a long one, one that fails, one that
hangs. Each preview run is written to ``TOOL_LEDGER`` as ``preview:<tool>`` with its pid, so a
test can tell where and with which arguments it ran."""

from __future__ import annotations

import os
import time
from pathlib import Path

from approvals import Preview, previews, requires_approval
from tests.agents.tools import _record


def _write_preview(path: str, content: str) -> Preview:
    _record("preview:write_file", path=path, content=content)
    return previews.file_write_diff(path, content)


@requires_approval(summary="Write {path}", preview=_write_preview)
def write_file(path: str, content: str) -> str:
    """Write a text file."""
    _record("write_file", path=path, content=content)
    Path(path).write_text(content, encoding="utf-8")
    return f"wrote {len(content)} characters to {path}"


def _long_preview(lines: int) -> str:
    return "\n".join(f"line {n} of the plan" for n in range(1, lines + 1))


@requires_approval(preview=_long_preview)
def apply_plan(lines: int) -> str:
    """Apply a plan (its preview lists every line of it)."""
    _record("apply_plan", lines=lines)
    return f"applied {lines} lines"


def _failing_preview(name: str) -> str:
    raise RuntimeError(f"cannot reach the catalogue for {name}")


@requires_approval(preview=_failing_preview)
def drop_index(name: str) -> str:
    """Drop an index (its preview fails)."""
    _record("drop_index", name=name)
    return f"dropped {name}"


def _hanging_preview(name: str) -> str:
    time.sleep(float(os.environ.get("PREVIEW_HANG", "60")))
    return "too late"


@requires_approval(preview=_hanging_preview)
def vacuum(name: str) -> str:
    """Vacuum a table (its preview hangs)."""
    _record("vacuum", name=name)
    return f"vacuumed {name}"
