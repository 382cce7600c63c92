"""A Slack request body, parsed as Bolt parses it, in about a third of the time for a click.

A click arrives as ``payload=<percent-encoded JSON>``; Bolt decodes it with
``urllib.parse.parse_qsl``, whose percent-decoding is a Python loop over every escape. That
was a quarter of the interpreter's time spent answering a click (bench B2, py-spy ``--gil``):
the most of any one step. Here the common shape is decoded by ``binascii`` in C, and every
other body goes to Bolt's own parser, so the result is Bolt's in every case (a property test
compares the two).
"""

from __future__ import annotations

import binascii
import json
import re
from typing import Any

from slack_bolt.request.internals import parse_body

_PREFIX = "payload="
_BROKEN_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _plain(value: str) -> bool:
    """What a form value needs for the fast path: printable ASCII, no other field (``&``),
    every ``%`` the start of an escape, and neither ``=`` nor whitespace, the characters that
    quoted-printable decoding (reused below) reads differently."""
    return (
        value.isascii()
        and value.isprintable()
        and not any(c in value for c in " &=")
        and _BROKEN_ESCAPE.search(value) is None
    )


def parse(raw_body: str, content_type: str | None) -> dict[str, Any]:
    """The body as Bolt reads it.

    Raises:
        ValueError: malformed JSON, or JSON that is not an object (as Bolt's parser would,
            or as Bolt would on the result).
    """
    if raw_body.startswith(_PREFIX) and content_type != "application/json":
        value = raw_body[len(_PREFIX) :]
        if _plain(value):
            # ``%41`` read as quoted-printable's ``=41``: the same bytes, decoded in C.
            quoted = value.replace("+", " ").replace("%", "=").encode("ascii")
            decoded = json.loads(binascii.a2b_qp(quoted).decode("utf-8", "replace"))
            if isinstance(decoded, dict):
                return decoded
    parsed = parse_body(raw_body, content_type)
    if not isinstance(parsed, dict):
        raise ValueError("the body is not a JSON object")
    return parsed
