"""I-JSON (RFC 7493): the only arguments approvals accepts, checked where they come in.

A receipt names the arguments it releases by the SHA-256 of their RFC 8785 canonical JSON
(``receipts.args_sha256``), and RFC 8785 is defined on I-JSON alone: integers JSON numbers
hold exactly (within ±(2^53-1)), finite numbers, text that is Unicode (no lone surrogate,
no noncharacter), in keys as in values. Anything else has no canonical form, so no receipt,
and other JSON parsers read it differently (a 64-bit id comes back rounded in JavaScript).

So arguments are checked once, here, wherever they enter: the API and its MCP tool
(``external.ask``), a model's call at the gate (``gate``), a reviewer's edit
(``review.check_edit``). What fails is refused with the path of the field (``arguments.ids[3]``)
before anything is stored, and no decision can later fail to be signed for it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from approvals.errors import InvalidArguments

#: The largest integer every JSON parser reads exactly (an IEEE 754 double's 53 bits).
SAFE_INTEGER = 2**53 - 1
#: Arguments nest at most this deep: a tool's arguments never need more, and the checks and
#: the canonical form walk them recursively.
MAX_DEPTH = 64

#: Code points I-JSON text must not hold: surrogates (alone, they are no character at all)
#: and the noncharacters (U+FDD0 to U+FDEF, and the last two of every plane).
_PLANE_ENDS = "".join(
    chr(plane | 0xFFFE) + chr(plane | 0xFFFF) for plane in range(0, 0x110000, 0x10000)
)
_NOT_TEXT = re.compile(f"[\ud800-\udfff\ufdd0-\ufdef{_PLANE_ENDS}]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LONGEST_PATH = 201


def check_arguments(arguments: Any) -> None:
    """Refuse arguments that are not an I-JSON object.

    Raises:
        InvalidArguments: keyed by the top-level argument at fault (so the Edit modal shows
        it at that input), each message naming the exact field, as ``arguments.ids[3]``.
    """
    if not isinstance(arguments, dict):
        raise InvalidArguments({"_": "the arguments must be a JSON object"})
    errors: dict[str, str] = {}
    for name, value in arguments.items():
        path = "arguments" + _step(name)
        problem = _key_problem(name, path) or _problem(value, path, 1)
        if problem is not None:
            errors[_label(name)] = problem
    if errors:
        raise InvalidArguments(errors)


def is_valid(arguments: Any) -> bool:
    """Whether ``check_arguments`` lets these arguments in."""
    try:
        check_arguments(arguments)
    except InvalidArguments:
        return False
    return True


def check_text(name: str, text: str | None) -> None:
    """Refuse text that is not Unicode (a reason, a response): it is kept, and shown, as JSON.

    Raises:
        InvalidArguments: keyed by ``name``.
    """
    problem = None if text is None else _text_problem(text)
    if problem is not None:
        raise InvalidArguments({name: f"the {name} {problem}"})


def _problem(value: Any, path: str, depth: int) -> str | None:
    """Why ``value`` (found at ``path``) is not I-JSON; None when it is."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        problem = _text_problem(value)
        return None if problem is None else f"{_shown(path)}: {problem}"
    if isinstance(value, int):
        return None if abs(value) <= SAFE_INTEGER else f"{_shown(path)}: {_big(value)}"
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        name = "NaN" if math.isnan(value) else ("-Infinity" if value < 0 else "Infinity")
        return f"{_shown(path)}: {name} is not a JSON number (send a number, or text)"
    if isinstance(value, list | dict) and depth >= MAX_DEPTH:
        return f"{_shown(path)}: nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, list):
        found = (_problem(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))
        return next((p for p in found if p is not None), None)
    if isinstance(value, dict):
        for key, item in value.items():
            inner = path + _step(key)
            problem = _key_problem(key, inner) or _problem(item, inner, depth + 1)
            if problem is not None:
                return problem
        return None
    return f"{_shown(path)}: a {type(value).__name__} is not a JSON value"


def _key_problem(key: Any, path: str) -> str | None:
    if not isinstance(key, str):
        return f"{_shown(path)}: the key {key!r} is not text (JSON object keys are strings)"
    problem = _text_problem(key)
    return None if problem is None else f"{_shown(path)}: its name {problem}"


def _text_problem(text: str) -> str | None:
    found = _NOT_TEXT.search(text)
    if found is None:
        return None
    point = ord(found.group())
    what = "a lone surrogate" if 0xD800 <= point <= 0xDFFF else "a noncharacter"
    return f"holds {what} (U+{point:04X}) at character {found.start()}: not Unicode text"


def path_of(steps: Sequence[str | int]) -> str:
    """A field's path as messages write it: ``arguments.ids[3]``, ``schema["odd key"]``."""
    path = ""
    for step in steps:
        path += f"[{step}]" if isinstance(step, int) else _step(step)
    return _shown(path.removeprefix("."))


def non_finite(value: float, steps: Sequence[str | int]) -> str:
    """Why a NaN or an Infinity at ``steps`` is refused, in the words of ``check_arguments``."""
    name = "NaN" if math.isnan(value) else ("-Infinity" if value < 0 else "Infinity")
    return f"{path_of(steps)}: {name} is not a JSON number (send a number, or text)"


def _shown(path: str) -> str:
    """A path short enough for a message (long keys, deep nesting): its two ends."""
    return path if len(path) <= _LONGEST_PATH else f"{path[:100]}…{path[-100:]}"


def _big(value: int) -> str:
    bits = value.bit_length()  # never str() of a huge one: Python refuses past 4300 digits
    shown = str(value) if bits <= 128 else f"an integer of about {int(bits * 0.30103) + 1} digits"
    return (
        f"{shown} is beyond ±(2^53-1), the largest integer JSON numbers hold exactly: send "
        "such values (64-bit ids such as snowflake ids) as strings"
    )


def _step(key: Any) -> str:
    """``key`` as one step of a path: ``.name``, or ``["odd key"]``."""
    if not isinstance(key, str):
        return f"[{key!r}]"
    return f".{key}" if _NAME.fullmatch(key) else f"[{_quoted(key)}]"


def _label(name: Any) -> str:
    """A top-level argument's name as an error's key: itself, unless it is not valid text."""
    if not isinstance(name, str):
        return repr(name)
    return name if _text_problem(name) is None else _quoted(name)


def _quoted(key: str) -> str:
    """``key`` as a JSON string that is valid text (a lone surrogate is written escaped)."""
    return json.dumps(key, ensure_ascii=_text_problem(key) is not None)
