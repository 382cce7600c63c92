"""Checking arguments against a tool's JSON schema, safely whoever wrote the schema.

Edited arguments are checked against the tool's own schema, and an API caller sends a schema
of its own with its request: that one is input like any other. jsonschema checks it, with two
changes that keep a hostile schema or value from costing anything:

- ``pattern`` and ``patternProperties`` run on RE2, whose matching time grows with the text,
  never exponentially: Python's backtracking ``re`` let a pattern like ``^(a+)+$`` hold a
  server thread for minutes on a few dozen characters. A pattern RE2 cannot run (a
  lookaround, a backreference) makes the schema invalid, said as such.
- A message never repeats the value it refuses (a value may be a secret, or megabytes).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, UnknownType, ValidationError
from referencing.exceptions import Unresolvable

from approvals.decisions import ijson
from approvals.errors import InvalidArguments

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a pattern RE2 refuses is answered, not logged to stderr


class UnsupportedPattern(Exception):
    """A schema's pattern that RE2 cannot run."""


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern, options=_RE2_OPTIONS)
    except re2.error as exc:
        raise UnsupportedPattern(
            f"pattern {pattern[:80]!r} cannot be run in linear time "
            f"(lookarounds and backreferences are not supported): {exc}"
        ) from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if isinstance(instance, str) and not _compiled(pattern).search(instance):
        yield ValidationError(f"does not match {pattern[:80]!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if _compiled(pattern).search(name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


#: Draft 2020-12 (what pydantic and llm emit) with its regular expressions on RE2.
Validator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, {"pattern": _pattern, "patternProperties": _pattern_properties}
)


def validate_arguments(schema: dict[str, Any], arguments: Any) -> None:
    """Check arguments (edited, or asked through the API) are I-JSON (``ijson``) and fit the
    tool's JSON schema; ``InvalidArguments`` if not, one message per argument."""
    ijson.check_arguments(arguments)
    try:
        Draft202012Validator.check_schema(schema)
        found = sorted(Validator(schema).iter_errors(arguments), key=lambda e: e.message)
    except (SchemaError, UnknownType, Unresolvable, UnsupportedPattern) as exc:
        raise InvalidArguments({"_": f"the tool's schema is invalid: {_short(exc)}"}) from None
    errors: dict[str, str] = {}
    for error in found:
        if error.path:
            errors.setdefault(str(error.path[0]), _message(error))
        elif error.validator == "required" and isinstance(error.instance, dict):
            for missing in error.validator_value:
                if missing not in error.instance:
                    errors.setdefault(str(missing), f"{missing!r} is a required property")
        else:
            errors.setdefault("_", _message(error))
    if errors:
        raise InvalidArguments(errors)


def _message(error: ValidationError) -> str:
    """jsonschema's message, with the refused value itself left out."""
    shown = repr(error.instance)
    if error.message.startswith(shown):
        return "the value" + error.message[len(shown) :]
    return error.message


def _short(exc: Exception) -> str:
    """The first line of a schema error (jsonschema's run on with the whole schema)."""
    text = exc.message if isinstance(exc, SchemaError) else str(exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__
