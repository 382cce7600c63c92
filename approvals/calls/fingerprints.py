"""Fingerprints: the state an approval depends on, named at the pause and checked before the
tool runs.

A gate's ``fingerprint`` option is a module-level function that takes the call's arguments
and returns a short string naming the state the decision depends on (a file's hash and
mtime, a row's version, a migration head, a git commit). The agent computes it when the call
pauses; the worker computes it again after it claims the resume, just before the tool runs,
and the tool runs only when the two agree (``approvals.calls.resume``).

Both ends fail closed. At the pause, a fingerprint that cannot be computed (it raises, runs
past ``TIMEOUT``, or returns something other than a short string) is a ``GateError`` and
nothing pauses: a call approved on a state nobody could name must not run later. In the
worker, the same failure counts as a change: the tool does not run.

The function is found again the way tools are: by its dotted path, only in the modules of
``APPROVALS_TOOL_MODULES`` (the path comes from Redis, a trust boundary).
"""

from __future__ import annotations

import importlib
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from approvals.calls.tools import module_allowed
from approvals.errors import GateError
from approvals.models.options import FINGERPRINT_LONGEST

#: The longest a fingerprint may take to compute, at the pause and in the worker (seconds).
#: It runs before a card is posted and before an approved tool starts, so it must be cheap:
#: a hash, a version read, a ``git rev-parse``.
TIMEOUT = 5.0


def function_at(path: str, allowed: Sequence[str]) -> Callable[..., Any]:
    """The fingerprint function ``path`` (``module:qualname``) names, defined in a module of
    ``allowed`` (APPROVALS_TOOL_MODULES; empty: any, for an agent that does not set it).

    Raises:
        GateError: it cannot be imported, is not a function, or lives elsewhere.
    """
    module_name, _, qualname = path.partition(":")
    if allowed and not module_allowed(module_name, allowed):
        raise GateError(
            f"fingerprint {path} lives in {module_name}, which is not in "
            "APPROVALS_TOOL_MODULES: a worker could not check it before the tool runs"
        )
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
            if isinstance(target, types.ModuleType):  # no walking into another module
                raise GateError(f"fingerprint {path} leads through module {target.__name__}")
    except GateError:
        raise
    except Exception as exc:  # a module that fails as it is imported, a missing name...
        raise GateError(f"cannot import fingerprint {path}: {type(exc).__name__}: {exc}") from None
    defined_in = getattr(target, "__module__", None)
    if allowed and (not isinstance(defined_in, str) or not module_allowed(defined_in, allowed)):
        raise GateError(
            f"fingerprint {path} is defined in {defined_in}, not in APPROVALS_TOOL_MODULES"
        )
    if not callable(target) or isinstance(target, type):
        raise GateError(f"fingerprint {path} is not a function")
    return target  # type: ignore[no-any-return]


def compute(
    path: str, arguments: Mapping[str, Any], allowed: Sequence[str], timeout: float = TIMEOUT
) -> str:
    """The fingerprint of a call: ``path``'s function called with its arguments, in a thread
    of its own so that a hung one is left behind after ``timeout`` seconds.

    Raises:
        GateError: it could not be found or computed, in words that name it.
    """
    function = function_at(path, allowed)
    answer: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(function(**arguments))
        except BaseException as exc:  # reported below, in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=run, name=f"fingerprint {path}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise GateError(f"fingerprint {path} did not answer within {timeout:g} s")
    if failure:
        exc = failure[0]
        raise GateError(f"fingerprint {path} failed: {type(exc).__name__}: {exc}")
    return _checked(path, answer[0])


def _checked(path: str, value: Any) -> str:
    """A fingerprint is a short, non-empty string: it names the state, it does not hold it."""
    if not isinstance(value, str) or not value:
        raise GateError(f"fingerprint {path} must return a non-empty string, not {value!r}")
    if len(value) > FINGERPRINT_LONGEST:
        raise GateError(
            f"fingerprint {path} returned {len(value)} characters; at most "
            f"{FINGERPRINT_LONGEST} (return a hash of the state, not the state)"
        )
    return value
