"""A gated tool that calls a real downstream HTTP service, passing on its receipt: the
service (``tests/downstream.py``) deletes only what a valid receipt released."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from approvals import receipt, requires_approval


@requires_approval(summary="Delete row {row} of {table}")
def delete_row(table: str, row: str) -> str:
    """Delete one row through the data service."""
    return call_service({"table": table, "row": row}, receipt())


def call_service(arguments: dict[str, str], token: str | None) -> str:
    """POST the arguments with the receipt as a bearer token; the answer as "status body"."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        os.environ["DOWNSTREAM_URL"] + "/rows/delete",
        data=json.dumps(arguments).encode(),
        headers=headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return f"{answer.status} {answer.read().decode()}"
    except urllib.error.HTTPError as refused:
        return f"{refused.code} {refused.read().decode()}"
