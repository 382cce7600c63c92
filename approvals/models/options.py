"""A gate's options: how a gated call asks people, stated once.

``GateOptions`` holds every option: its type, its default, its bounds and its one-line doc, and
who may set it besides the tool's author: the HTTP API (``About.api``, with the caps that keep
one caller from filling Redis or a card) and a policy rule's ``[rule.require]`` (``About.rule``).
Everything else follows from it: ``requires_approval`` and ``gate()`` take its fields as keyword
arguments (typed, and documented from the docs here), the API's body offers the ``api`` ones, a
rule sets the ``rule`` ones, and an approval carries to its decision those not spent when the
call pauses (``About.at_pause``): its ``policy``. ``options_to_dict`` and ``options_from_dict``
are their one JSON form, every value's type checked on the way back, as Redis is a trust
boundary.

A new option is a field here, and the code where it has its effect.

It is an ``attrs`` class rather than a dataclass for one reason: a field may accept more than
it keeps (any iterable of names, kept as a tuple), and mypy types ``attrs`` converters, so
``requires_approval``'s keyword arguments are this class's ``__init__``, typed as callers use them.
"""

from __future__ import annotations

import math
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from enum import Enum, StrEnum
from typing import Any, Literal

import attrs

from approvals.errors import CorruptRecord


class OnReject(StrEnum):
    #: The model is told and the chain resumes, so the agent can re-plan.
    RESUME = "resume"
    #: The run ends where it paused.
    STOP = "stop"


class _Unset(Enum):
    """The default of ``expires_in``: the setting applies (``None`` means "never expire")."""

    TOKEN = 0


UNSET: Literal[_Unset.TOKEN] = _Unset.TOKEN
#: What ``expires_in`` accepts: seconds, None (wait indefinitely) or the default.
ExpiresIn = float | None | Literal[_Unset.TOKEN]
#: Names (user ids, group ids, channel ids, arguments); None: the default.
Names = tuple[str, ...] | None
#: A function of a call's arguments (the tool's own keyword arguments): code, never stored.
OfArguments = Callable[..., Any] | None

#: The longest an approval asked through the API may stay open, and wait for a reminder.
MAX_API_SECONDS = 30 * 24 * 3600.0


@attrs.frozen
class Api:
    """How the HTTP API offers an option: its caps, on top of the option's own bounds."""

    #: The largest number.
    most: float | None = None
    #: The most characters of a text, or names in a list.
    longest: int | None = None
    #: What a text, or each name of a list, must match.
    pattern: str | None = None
    #: The doc as the API's callers read it, where it differs from the option's.
    doc: str | None = None


@attrs.frozen
class About:
    """One option's doc, bounds, and who may set it besides the tool's author."""

    doc: str
    #: The smallest number allowed.
    at_least: float | None = None
    #: A number the value must exceed.
    above: float | None = None
    #: The fewest characters of a text.
    shortest: int | None = None
    #: The HTTP API offers it (None: only code sets it, as what it allows is the author's).
    api: Api | None = None
    #: A ``[rule.require]`` table may set it (its value replaces the asker's).
    rule: bool = False
    #: Spent when the call pauses: its effect is written into the approval's own fields
    #: (channel, summary, expiry, reminders), so the approval's ``policy`` does not carry it.
    at_pause: bool = False


def _about(doc: str, **more: Any) -> dict[str, About]:
    return {"option": About(doc, **more)}


def _names(value: Iterable[str] | None) -> tuple[str, ...] | None:
    """Names as a tuple (a bare string is refused before this runs: ``__attrs_pre_init__``)."""
    return None if value is None else tuple(value)


#: The longest fingerprint (a hash, a version, a commit): it is stored on the approval and
#: signed into its receipt, so it names the state, it does not hold it.
FINGERPRINT_LONGEST = 200


def _function_path(value: Callable[..., Any] | str | None) -> str | None:
    """``fingerprint``'s function as the dotted path a worker imports it by
    (``module:qualname``); a path passes unchanged. A function a worker could never import
    again (a lambda, a nested function, one defined in a script run as ``__main__``) is
    refused here, where the gate is made, rather than at the pause."""
    if value is None or isinstance(value, str):
        return value
    if not callable(value):
        raise TypeError(f"fingerprint must be a module-level function, not {value!r}")
    return dotted_path(value, "fingerprint", TypeError)


def dotted_path(target: Any, kind: str, error: type[Exception]) -> str:
    """``target``'s ``module:qualname``, by which a worker imports it again; ``error`` when
    no other process could (a lambda, a nested function, one of a script run as ``__main__``)."""
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise error(f"{kind} must be a module-level function, not {target!r}")
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise error(
            f"{kind} {qualname} must be a module-level function (a worker imports it again), "
            "not a lambda or one defined inside a function"
        )
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is None:
            raise error(
                f"{kind} {qualname} is defined in a script run as __main__; a worker cannot "
                "import it. Move it into a module (or run the script with python -m)."
            )
        module = spec.name
    return f"{module}:{qualname}"


def _choice(value: str) -> OnReject:
    """``on_reject`` from its text (ValueError for any other)."""
    return OnReject(value)


#: A channel id (``C...``, ``G...``) or a user group id (``S...``).
_CHANNEL_OR_GROUP = r"^[CGS][A-Z0-9]{1,30}$"


@attrs.frozen(kw_only=True)
class GateOptions:
    """How a gated tool's calls ask for approval: every option, in the order documented."""

    channel: str | None = attrs.field(default=None, metadata=_about(
        "post this tool's cards to this channel id instead of ``APPROVALS_CHANNEL``.",
        shortest=1, api=Api(longest=100), rule=True, at_pause=True,
    ))  # fmt: skip
    summary: str | None = attrs.field(default=None, metadata=_about(
        'a one-line description for the card, e.g. ``"Delete {path}"`` (the arguments are'
        " filled in).",
        api=Api(longest=500, doc="One line for the people deciding."), at_pause=True,
    ))  # fmt: skip
    editable: Names = attrs.field(default=None, converter=_names, metadata=_about(
        "the arguments a reviewer may edit (default: all).",
        api=Api(longest=100),
    ))  # fmt: skip
    reason_required: bool = attrs.field(default=False, metadata=_about(
        "a rejection must say why.",
        api=Api(),
    ))  # fmt: skip
    on_reject: OnReject = attrs.field(default=OnReject.RESUME, converter=_choice, metadata=_about(
        '``"resume"`` (the model is told and re-plans) or ``"stop"`` (the run ends). Also'
        " applies when the approval expires.",
    ))  # fmt: skip
    expires_in: ExpiresIn = attrs.field(default=UNSET, metadata=_about(
        "seconds until an undecided approval expires (default ``APPROVALS_EXPIRES_IN``, 24 h);"
        " ``None`` waits indefinitely. Expiry never approves.",
        above=0, rule=True, at_pause=True,
        api=Api(most=MAX_API_SECONDS, doc="Seconds until an undecided approval expires"
                " (default APPROVALS_EXPIRES_IN). Expiry never approves."),
    ))  # fmt: skip
    approvers: Names = attrs.field(default=None, converter=_names, metadata=_about(
        "Slack user ids allowed to decide, instead of ``APPROVERS``.",
        api=Api(longest=100), rule=True,
    ))  # fmt: skip
    approver_groups: Names = attrs.field(default=None, converter=_names, metadata=_about(
        "Slack user group ids whose members may decide, instead of ``APPROVER_GROUPS``.",
        api=Api(longest=100), rule=True,
    ))  # fmt: skip
    allow_self_approval: bool = attrs.field(default=False, metadata=_about(
        "the person the agent acts for (``requested_by``) may decide.",
    ))  # fmt: skip
    approvals_required: int = attrs.field(default=1, metadata=_about(
        "distinct approvals needed; one rejection still ends it.",
        at_least=1, api=Api(most=20), rule=True,
    ))  # fmt: skip
    webhook: str | None = attrs.field(default=None, metadata=_about(
        "a URL that also receives this tool's state changes, signed with"
        " ``APPROVALS_WEBHOOK_SECRET`` like those of ``APPROVALS_WEBHOOK_URLS``.",
    ))  # fmt: skip
    grantable: bool = attrs.field(default=True, metadata=_about(
        "an approver may approve with a wider scope (a grant: this tool for the run, for some"
        " hours, or these exact arguments); never with a quorum.",
        api=Api(doc="False: the card offers only 'Just this call', never a standing grant."),
    ))  # fmt: skip
    remind_after: float | None = attrs.field(default=None, metadata=_about(
        "seconds before the approvers are reminded, and between reminders (at most three;"
        " default ``APPROVALS_REMIND_AFTER``, 1 h; 0: none).",
        at_least=0, api=Api(most=MAX_API_SECONDS), at_pause=True,
    ))  # fmt: skip
    escalate_after: float | None = attrs.field(default=None, metadata=_about(
        "seconds after which the card is also posted to ``escalate_to``, whose members may"
        " then decide too (default ``APPROVALS_ESCALATE_AFTER``; 0: never).",
        at_least=0, api=Api(most=MAX_API_SECONDS), at_pause=True,
    ))  # fmt: skip
    escalate_to: Names = attrs.field(default=None, converter=_names, metadata=_about(
        "the channel ids (``C...``) and user group ids (``S...``) an escalation goes to"
        " (default ``APPROVALS_ESCALATE_TO``).",
        api=Api(longest=20, pattern=_CHANNEL_OR_GROUP), at_pause=True,
    ))  # fmt: skip
    preview: OfArguments = attrs.field(default=None, metadata=_about(
        "a function taking the call's arguments that returns what the call would do: a string"
        " (a unified diff is shown as one) or an ``approvals.Preview`` (text, markdown or"
        " diff). It runs when the call pauses, for at most ``APPROVALS_PREVIEW_TIMEOUT``"
        " seconds; the card shows its head and the whole of it in a modal.",
        at_pause=True,
    ))  # fmt: skip
    fingerprint: str | None = attrs.field(default=None, converter=_function_path, metadata=_about(
        "a module-level function (in ``APPROVALS_TOOL_MODULES``) that takes the call's"
        " arguments and returns a short string naming the state the decision depends on (a"
        " file's hash and mtime, a row's version, a git commit). Computed at the pause and"
        " again just before the tool runs: if it differs, the tool does not run and people"
        " decide again (docs/stale.md). Kept as its ``module:qualname``.",
        shortest=3,
    ))  # fmt: skip

    def __attrs_pre_init__(self, **given: Any) -> None:
        for name, value in given.items():
            if isinstance(value, str) and _KINDS[name].names:
                raise TypeError(f"{name} must be a list of names, not the string {value!r}")

    def __attrs_post_init__(self) -> None:
        for name, kind in _KINDS.items():
            kind.check(name, getattr(self, name))

    @property
    def policy(self) -> GateOptions:
        """These options as an approval carries them to its decision: those spent at the
        pause (``About.at_pause``) are back at their defaults."""
        return attrs.evolve(self, **{name: DEFAULTS[name] for name in SPENT_AT_PAUSE})

    @property
    def allows_grants(self) -> bool:
        return self.grantable and self.approvals_required == 1


# --- what each option accepts, from its annotation and its bounds ---------------------------


@attrs.frozen
class _Kind:
    """The values one option accepts: the members of its type, and its bounds."""

    members: tuple[Any, ...]
    about: About

    @property
    def names(self) -> bool:
        return any(typing.get_origin(member) is tuple for member in self.members)

    @property
    def nullable(self) -> bool:
        return types.NoneType in self.members

    def check(self, name: str, value: Any) -> None:
        """Raise TypeError unless ``value`` is of the option's type, ValueError unless it is
        within its bounds."""
        if not any(_is(member, value) for member in self.members):
            raise TypeError(f"{name} must be {self.describe()}, not {value!r}")
        about = self.about
        if isinstance(value, int | float) and not isinstance(value, bool):
            if about.at_least is not None and value < about.at_least:
                raise ValueError(f"{name} must be at least {about.at_least:g}, not {value!r}")
            if about.above is not None and value <= about.above:
                raise ValueError(f"{name} must be more than {about.above:g}, not {value!r}")
        if isinstance(value, str) and about.shortest is not None and len(value) < about.shortest:
            raise ValueError(f"{name} must have at least {about.shortest} character(s)")

    def describe(self) -> str:
        return " or ".join(_described(member) for member in self.members)


def _is(member: Any, value: Any) -> bool:
    if member is types.NoneType:
        return value is None
    if member in (bool, str):
        return isinstance(value, member)
    if member is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if member is float:
        return _finite(value)
    if typing.get_origin(member) is tuple:
        return isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    if typing.get_origin(member) is Literal:
        return value in typing.get_args(member)
    if typing.get_origin(member) is Callable:
        return callable(value)
    return isinstance(value, member)


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def _described(member: Any) -> str:
    if typing.get_origin(member) is tuple:
        return "a list of names"
    if typing.get_origin(member) is Literal:
        return "left out"
    if typing.get_origin(member) is Callable:
        return "a function"
    if isinstance(member, type) and issubclass(member, Enum):
        return "one of " + ", ".join(repr(e.value) for e in member)
    plain = {types.NoneType: "None", bool: "true or false", int: "a whole number",
             float: "a number", str: "a text"}  # fmt: skip
    return plain.get(member, getattr(member, "__name__", str(member)))


def _members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(member for part in typing.get_args(annotation) for member in _members(part))
    return (annotation,)


_HINTS = typing.get_type_hints(GateOptions)
_KINDS: dict[str, _Kind] = {
    field.name: _Kind(_members(_HINTS[field.name]), field.metadata["option"])
    for field in attrs.fields(GateOptions)
}

#: Every option, in order, with its doc, bounds and who may set it.
ABOUT: Mapping[str, About] = types.MappingProxyType({n: k.about for n, k in _KINDS.items()})
OPTIONS: tuple[str, ...] = tuple(ABOUT)
DEFAULTS: Mapping[str, Any] = types.MappingProxyType(attrs.asdict(GateOptions(), recurse=False))
#: Options spent when the call pauses; the others an approval carries (its ``policy``).
SPENT_AT_PAUSE = frozenset(name for name, about in ABOUT.items() if about.at_pause)
CARRIED: tuple[str, ...] = tuple(name for name in OPTIONS if name not in SPENT_AT_PAUSE)
#: Options a ``[rule.require]`` table may set.
SET_BY_RULES = frozenset(name for name, about in ABOUT.items() if about.rule)
#: Options whose value is a function: code, which the JSON form leaves out (the tool's own
#: module gives it to the worker again).
CODE = frozenset(
    name for name, kind in _KINDS.items()
    if any(typing.get_origin(member) is Callable for member in kind.members)
)  # fmt: skip
#: Options the HTTP API offers.
SET_BY_API: tuple[str, ...] = tuple(name for name, about in ABOUT.items() if about.api)


def members(name: str) -> tuple[Any, ...]:
    """The types an option's value may have (its annotation's union, flattened)."""
    return _KINDS[name].members


def options_doc() -> str:
    """Every option with its doc, as the ``Args:`` of a docstring."""
    lines = ["Args:"]
    for name, about in ABOUT.items():
        lines += textwrap.wrap(f"{name}: {about.doc}", 92, initial_indent="    ",
                               subsequent_indent="        ")  # fmt: skip
    return "\n".join(lines)


# --- the JSON form -------------------------------------------------------------------------


def options_to_dict(
    options: GateOptions, names: Iterable[str] = OPTIONS, *, sparse: bool = False
) -> dict[str, Any]:
    """Options as JSON-ready data (``options_from_dict`` reads them back): lists for tuples,
    text for choices, an unset ``expires_in`` and functions (code, not data) left out;
    ``sparse`` leaves out every option that holds its default."""
    data: dict[str, Any] = {}
    for name in names:
        value = getattr(options, name)
        if value is UNSET or name in CODE or (sparse and value == DEFAULTS[name]):
            continue
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Enum):
            value = value.value
        data[name] = value
    return data


def given_options(data: Mapping[str, Any], names: Iterable[str] = OPTIONS) -> dict[str, Any]:
    """The options JSON or TOML data gives, as ``GateOptions`` takes them (which then checks
    each value): a list of names must be a list; ``null`` is the default, unless ``None`` is
    one of the option's values. Keys that are no option of ``names`` are left out.

    Raises:
        TypeError: a list of names is something else.
    """
    given: dict[str, Any] = {}
    for name in names:
        if name not in data:
            continue
        value, kind = data[name], _KINDS[name]
        if value is None and not kind.nullable:
            continue
        if kind.names and value is not None and not isinstance(value, list):
            raise TypeError(f"{name} must be a list of names, not {value!r}")
        given[name] = value
    return given


def options_from_dict(data: Any, names: Iterable[str] = OPTIONS) -> GateOptions:
    """Options from their JSON form, every value checked (``CorruptRecord`` if one is not an
    option's); options not in ``names`` stay at their defaults."""
    if not isinstance(data, dict):
        raise CorruptRecord(f"recorded options must be an object, not {type(data).__name__}")
    try:
        return GateOptions(**given_options(data, names))
    except TypeError as exc:
        raise CorruptRecord(f"a recorded option has the wrong type: {exc}") from None
    except ValueError as exc:
        raise CorruptRecord(f"a recorded option has an impossible value: {exc}") from None
