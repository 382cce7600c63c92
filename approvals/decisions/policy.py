"""Policy rules: decisions a deployment writes down once instead of asking a person each time.

``APPROVALS_POLICY`` names a TOML file of ``[[rule]]`` tables, tried in order; the first
enforcing rule that matches decides. A rule matches a call by its agent, tool, requester and
channel (exact names or globs) and by an optional ``when`` expression in CEL, Google's Common
Expression Language, evaluated by the maintained ``common-expression-language`` package: CEL
has no side effects and always terminates, which is why a policy file may hold it and a
Python expression may not. A rule approves, rejects (its ``reason`` is what the model reads),
or requires a stricter review (approvers, groups, quorum, expiry, channel).

Everything here fails closed: a file that does not parse stops the process that loads it
(``PolicyError``, a ``ConfigError``), and a rule whose expression fails on a call ends the
evaluation with "ask a person". A rule in ``mode = "shadow"`` is evaluated and reported but
decides nothing. The rules are applied where a call is asked for: in the agent's process,
where the call would pause (``agent.py``), and in the API for its requests (``external.py``),
both through ``automatic.py``.
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import attrs

from approvals.errors import PolicyError
from approvals.models import GateOptions
from approvals.models.options import SET_BY_RULES, given_options


class Action(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    REQUIRE = "require"
    #: No enforcing rule decided: a person is asked (never written in a file).
    ASK = "ask"


class Mode(StrEnum):
    ENFORCE = "enforce"
    #: Evaluated and recorded, never acted on.
    SHADOW = "shadow"


@dataclass(frozen=True, init=False)
class Requirement:
    """What a ``require`` rule imposes on the approval: gate options (those ``SET_BY_RULES``)
    that replace the asker's; an option it does not name leaves the gate's own value."""

    #: The options it names, with their values as ``GateOptions`` keeps them, by name.
    options: tuple[tuple[str, Any], ...]

    def __init__(self, **options: Any) -> None:
        """Raises TypeError or ValueError, naming the option, unless ``GateOptions`` takes
        every one of them."""
        checked = GateOptions(**options)
        named = tuple((name, getattr(checked, name)) for name in sorted(options))
        object.__setattr__(self, "options", named)

    def apply(self, options: GateOptions) -> GateOptions:
        """``options`` with the ones this requirement names replaced."""
        return attrs.evolve(options, **dict(self.options))


@dataclass(frozen=True)
class Rule:
    id: str
    action: Action
    agent: str | None = None
    tool: str | None = None
    requester: str | None = None
    channel: str | None = None
    when: str | None = None
    reason: str | None = None
    mode: Mode = Mode.ENFORCE
    require: Requirement | None = None
    program: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Call:
    """The facts a rule sees about one gated call."""

    agent: str
    tool: str
    args: Mapping[str, Any]
    requester: str = ""
    channel: str = ""

    def activation(self) -> dict[str, Any]:
        """The variables a ``when`` expression may read."""
        return {
            "args": dict(self.args),
            "agent": self.agent,
            "tool": self.tool,
            "requester": self.requester,
            "channel": self.channel,
        }


@dataclass(frozen=True)
class Verdict:
    """What the rules say about one call."""

    action: Action
    #: The enforcing rule that decided (None: no rule did, or one failed).
    rule: Rule | None = None
    #: Shadow rules that matched before the deciding point, with what they would have done.
    shadows: tuple[Rule, ...] = ()
    #: Why a rule could not be evaluated (the call then goes to a person).
    error: str | None = None
    #: Why each rule tried did or did not match, for ``approvals policy test``.
    trace: tuple[str, ...] = ()

    @property
    def rule_id(self) -> str | None:
        return self.rule.id if self.rule is not None else None


_FIELDS = {"id", "agent", "tool", "requester", "channel", "when", "action", "reason", "mode"}


def load(path: str) -> list[Rule]:
    """The rules of a policy file, every field checked and every expression compiled.

    Raises:
        PolicyError: the file is missing, is not TOML, or a rule is malformed.
    """
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise PolicyError(f"APPROVALS_POLICY: cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"APPROVALS_POLICY: {path} is not valid TOML: {exc}") from None
    return parse(data, path)


def parse(data: Mapping[str, Any], source: str = "policy") -> list[Rule]:
    """Rules from already-decoded TOML (``load`` reads the file)."""
    extra = set(data) - {"rule"}
    if extra:
        raise PolicyError(f"{source}: unknown top-level keys {sorted(extra)} (expected [[rule]])")
    raw = data.get("rule", [])
    if not isinstance(raw, list):
        raise PolicyError(f"{source}: rules are written as [[rule]] tables")
    rules = [_rule(entry, f"{source}: rule {n + 1}") for n, entry in enumerate(raw)]
    seen: set[str] = set()
    for rule in rules:
        if rule.id in seen:
            raise PolicyError(f"{source}: two rules have the id {rule.id!r}")
        seen.add(rule.id)
    return rules


def _rule(entry: Any, where: str) -> Rule:
    if not isinstance(entry, dict):
        raise PolicyError(f"{where}: not a table")
    unknown = set(entry) - _FIELDS - {"require"}
    if unknown:
        raise PolicyError(f"{where}: unknown keys {sorted(unknown)}")
    rule_id = _required_text(entry, "id", where)
    where = f"{where} ({rule_id})"
    try:
        action = Action(_required_text(entry, "action", where))
        mode = Mode(_text(entry, "mode", where) or Mode.ENFORCE.value)
    except ValueError as exc:
        raise PolicyError(f"{where}: {exc}") from None
    if action is Action.ASK:
        raise PolicyError(f"{where}: action must be approve, reject or require")
    require = _requirement(entry.get("require"), where)
    if (require is not None) != (action is Action.REQUIRE):
        raise PolicyError(f"{where}: a [rule.require] table goes with action = 'require' only")
    when = _text(entry, "when", where)
    program = None
    if when is not None:
        # Imported here: the package also loads its command line (typer, rich), much of a
        # process's memory, which a worker without rules would carry into every work-horse.
        import cel

        try:
            program = cel.compile(when)
        except (ValueError, TypeError, RuntimeError) as exc:
            raise PolicyError(f"{where}: 'when' is not valid CEL: {exc}") from None
    return Rule(
        id=rule_id,
        action=action,
        agent=_text(entry, "agent", where),
        tool=_text(entry, "tool", where),
        requester=_text(entry, "requester", where),
        channel=_text(entry, "channel", where),
        when=when,
        reason=_text(entry, "reason", where),
        mode=mode,
        require=require,
        program=program,
    )


def _requirement(raw: Any, where: str) -> Requirement | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - SET_BY_RULES:
        raise PolicyError(f"{where}: [rule.require] takes only {sorted(SET_BY_RULES)}")
    try:
        return Requirement(**given_options(raw))
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"{where}: [rule.require]: {exc}") from None


def _text(entry: Mapping[str, Any], name: str, where: str) -> str | None:
    return None if entry.get(name) is None else _required_text(entry, name, where)


def _required_text(entry: Mapping[str, Any], name: str, where: str) -> str:
    value = entry.get(name)
    if not isinstance(value, str) or not value:
        raise PolicyError(f"{where}: {name!r} must be a non-empty string")
    return value


def evaluate(rules: Sequence[Rule], call: Call) -> Verdict:
    """The first enforcing rule that matches decides; none: ask a person.

    A rule whose expression fails (a missing argument, a type error, a non-boolean result)
    stops the evaluation there with "ask a person": a later, more permissive rule must not
    decide a call an earlier rule could not judge.
    """
    shadows: list[Rule] = []
    trace: list[str] = []
    for rule in rules:
        miss = _selector_miss(rule, call)
        if miss is not None:
            trace.append(f"{rule.id}: no match ({miss})")
            continue
        try:
            matched = _when(rule, call)
        except _EvaluationFailed as exc:
            trace.append(f"{rule.id}: failed ({exc}); asking a person")
            return Verdict(Action.ASK, shadows=tuple(shadows), error=f"{rule.id}: {exc}",
                           trace=tuple(trace))  # fmt: skip
        if not matched:
            trace.append(f"{rule.id}: no match (when is false)")
            continue
        if rule.mode is Mode.SHADOW:
            trace.append(f"{rule.id}: matches in shadow mode (would {rule.action.value})")
            shadows.append(rule)
            continue
        trace.append(f"{rule.id}: matches, {rule.action.value}")
        return Verdict(rule.action, rule, tuple(shadows), trace=tuple(trace))
    trace.append("no rule decided: ask a person")
    return Verdict(Action.ASK, shadows=tuple(shadows), trace=tuple(trace))


def _selector_miss(rule: Rule, call: Call) -> str | None:
    """Which of the rule's names the call does not match (None: all match)."""
    for name, pattern, value in (
        ("agent", rule.agent, call.agent),
        ("tool", rule.tool, call.tool),
        ("requester", rule.requester, call.requester),
        ("channel", rule.channel, call.channel),
    ):
        if pattern is not None and not fnmatch.fnmatchcase(value, pattern):
            return f"{name} {value!r} is not {pattern!r}"
    return None


class _EvaluationFailed(Exception):
    pass


def _when(rule: Rule, call: Call) -> bool:
    if rule.program is None:
        return True
    try:
        result = rule.program.execute(call.activation())
    except Exception as exc:  # the library raises KeyError, TypeError, ValueError, RuntimeError
        raise _EvaluationFailed(f"{type(exc).__name__}: {exc}") from None
    if not isinstance(result, bool):
        raise _EvaluationFailed(f"'when' gave {type(result).__name__}, not a boolean")
    return result


_cache: dict[str, tuple[float, list[Rule]]] = {}


def rules_at(path: str | None) -> list[Rule]:
    """The rules of ``APPROVALS_POLICY``, read again when the file changes (none: no rules)."""
    if not path:
        return []
    try:
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        raise PolicyError(f"APPROVALS_POLICY: cannot read {path}: {exc.strerror}") from None
    cached = _cache.get(path)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    rules = load(path)
    _cache[path] = (mtime, rules)
    return rules
