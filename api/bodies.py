"""The API's request bodies: read as strict JSON, then checked by pydantic (a 422 names the
field).

Strict JSON is RFC 8259 in UTF-8 and nothing more: Python's parser also takes ``NaN`` and
``Infinity``, turns ``1e999`` into infinity (each would come back as something else), and
keeps the last of two equal keys (which would hide what the caller sent); all are refused at
the door, and so is a body that nests objects and arrays deeper than ``MAX_DEPTH``. Caps on
every field keep one caller from filling Redis or a card; the whole body is capped before it
is read (``approvals.api.size``).
"""

from __future__ import annotations

import functools
import json
import math
import operator
import typing
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, create_model

from approvals.api.answers import problem
from approvals.decisions import ijson
from approvals.models import UNSET, GateOptions
from approvals.models.options import ABOUT, DEFAULTS, FINGERPRINT_LONGEST, SET_BY_API, Api, members
from approvals.models.preview import CALLER_PREVIEW_CHARS

#: The longest wait of one ``GET ...?wait=`` (a caller asks again for more).
MAX_WAIT = 60.0
#: How deep objects and arrays may nest in a body, the body itself being the first level:
#: room for any real tool's arguments, and far from the depth at which parsing, validating or
#: storing a value would run out of stack.
MAX_DEPTH = 32


class StrictJSONRoute(APIRoute):
    """A route whose JSON body is read by ``read_json`` (FastAPI's custom route class)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handle(_StrictJSONRequest(request.scope, request.receive))

        return strict


class _StrictJSONRequest(Request):
    async def json(self) -> Any:
        return read_json(await self.body())


def read_json(raw: bytes) -> Any:
    """The value of a strict JSON body.

    Raises:
        HTTPException: 422 with the ``Invalid`` body, naming the top field that nests too deep.
    """
    try:
        value = json.loads(
            raw.decode("utf-8"),
            parse_constant=_constant,
            parse_float=_finite,
            object_pairs_hook=_object,
        )
    except RecursionError:
        raise _refused(["body"], f"nests deeper than {MAX_DEPTH} levels", "json_too_deep") from None
    except ValueError as exc:  # not UTF-8, not JSON, NaN or Infinity, a repeated key
        raise _refused(["body"], f"not strict JSON: {exc}", "json_invalid") from None
    where = _too_deep(value)
    if where is not None:
        raise _refused(["body", *where], f"nests deeper than {MAX_DEPTH} levels", "json_too_deep")
    found = _not_finite(value)
    if found is not None:  # named down to the argument, as the other I-JSON refusals are
        steps, why = found
        raise _refused(["body", *steps[:2]], why, "json_invalid")
    return value


def _constant(name: str) -> float:
    """``NaN`` and ``Infinity`` are read, then refused with their field's path (``_not_finite``)."""
    return float(name)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is too large for a number")
    return value


def _not_finite(value: Any) -> tuple[list[str | int], str] | None:
    """Where the body holds a NaN or an Infinity (which JSON has no words for), and why it is
    refused; None when it holds none. Walked without recursion."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        node, steps = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return steps, ijson.non_finite(node, steps)
        if isinstance(node, dict | list):
            items = node.items() if isinstance(node, dict) else enumerate(node)
            stack.extend((item, [*steps, key]) for key, item in items)
    return None


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) < len(pairs):
        twice = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise ValueError(f"an object has the key {twice[:100]!r} twice")
    return value


def _too_deep(value: Any) -> list[str | int] | None:
    """The top field (``[]``: the body itself) under which containers nest deeper than
    ``MAX_DEPTH``; None when none do. Walked without recursion."""
    stack: list[tuple[Any, int, list[str | int]]] = [(value, 1, [])]
    while stack:
        node, depth, top = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if depth > MAX_DEPTH:
            return top
        items = node.items() if isinstance(node, dict) else enumerate(node)
        stack.extend((item, depth + 1, top or [key]) for key, item in items)
    return None


def _refused(loc: list[str | int], msg: str, kind: str) -> HTTPException:
    return HTTPException(422, [problem(loc, msg, kind)])


class _Asked(BaseModel):
    """``POST /v1/approvals``: what the caller wants to do, and who may decide."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    tool: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:/-]+$")
    arguments: dict[str, Any]
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    preview: str | None = Field(default=None, max_length=CALLER_PREVIEW_CHARS)
    fingerprint: str | None = Field(
        default=None,
        min_length=1,
        max_length=FINGERPRINT_LONGEST,
        description="A short string naming the state the decision depends on (a file's hash "
        "and mtime, a row's version, a git commit). It comes back in the decision and in the "
        "receipt, so the service that acts can compare it with its own state and refuse a "
        "call whose state changed since the approval.",
    )
    agent: str | None = Field(default=None, min_length=1, max_length=100)
    requested_by: str | None = Field(default=None, min_length=1, max_length=100)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    run_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="Groups the requests of one task: the card then offers a grant for "
        "'This tool, this run', which lets later requests of this agent with the same run_id "
        "(and requester) through. Without it, that scope is not offered.",
    )

    def options(self) -> GateOptions:
        """The gate options the body gives (one it leaves out, or sets to null, is the
        default)."""
        return GateOptions(**self.model_dump(include=set(SET_BY_API), exclude_none=True))


def _option_field(name: str) -> tuple[Any, Any]:
    """An option as the body offers it: its type as JSON writes it (a list of names, no
    "left out"), its default (null where JSON has none), its bounds, the API's caps and its
    doc, all from ``GateOptions``."""
    about = ABOUT[name]
    caps = about.api or Api()
    item = str if caps.pattern is None else Annotated[str, Field(pattern=caps.pattern)]
    kinds = [
        list[item] if typing.get_origin(member) is tuple else member  # type: ignore[valid-type]
        for member in members(name)
        if typing.get_origin(member) is not Literal  # UNSET: JSON leaves the option out
    ]
    default = None if DEFAULTS[name] is UNSET else DEFAULTS[name]
    doc = (caps.doc or about.doc).replace("``", "`")
    text = str in kinds and caps.pattern is not None
    return functools.reduce(operator.or_, kinds), Field(
        default=default,
        description=doc[0].upper() + doc[1:],
        ge=about.at_least,
        gt=about.above,
        le=caps.most,
        min_length=about.shortest,
        max_length=caps.longest,
        pattern=caps.pattern if text else None,
    )


# The body's gate options are ``GateOptions``' own (those it offers to the API), made into
# fields here rather than written again. pydantic builds such a model at run time only, so
# mypy reads the body as ``_Asked``: the options are read through ``options()``, never by name.
if TYPE_CHECKING:
    ApprovalBody = _Asked
else:
    ApprovalBody = create_model(
        "ApprovalBody",
        __base__=_Asked,
        __doc__=_Asked.__doc__,
        __module__=__name__,
        **{name: _option_field(name) for name in SET_BY_API},
    )


class ResultBody(BaseModel):
    """``POST /v1/approvals/{id}/result``: what happened when the caller acted."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    output: str = Field(default="", max_length=20_000)
