"""Tools for the test agents. Each call is appended to ``TOOL_LEDGER`` (JSONL) with its pid,
so a test can tell exactly what ran, with which arguments, how often, and in which process."""

from __future__ import annotations

import json
import os
from typing import Any

from approvals import requires_approval


def _record(tool: str, **arguments: Any) -> None:
    path = os.environ.get("TOOL_LEDGER")
    if path:
        with open(path, "a", encoding="utf-8") as ledger:
            ledger.write(json.dumps({"tool": tool, "pid": os.getpid(), "arguments": arguments}))
            ledger.write("\n")


def list_files(path: str) -> str:
    """List the files in a folder."""
    _record("list_files", path=path)
    return json.dumps(sorted(["build/app.o", "build/app", "src/app.c"]))


def read_file(path: str) -> str:
    """Read a file."""
    _record("read_file", path=path)
    return f"contents of {path}"


@requires_approval(summary="Delete {path}")
def delete_path(path: str, recursive: bool = False) -> str:
    """Delete a file or folder."""
    _record("delete_path", path=path, recursive=recursive)
    return f"deleted {path}" + (" recursively" if recursive else "")


@requires_approval
def send_email(to: str, subject: str, body: str = "") -> str:
    """Send an email."""
    _record("send_email", to=to, subject=subject, body=body)
    return f"sent to {to}"
