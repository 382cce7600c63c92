"""Which arguments are secrets, so their values never reach Slack, and masking them.

Two checks, either of which masks a value:

- **By name.** An argument whose name looks secret is masked whatever its value. Names are
  matched by their parts (``github_token``, ``apiKey``, ``db-password``); a pattern of several
  parts matches them in a row, so ``api_key`` masks ``github_api_key`` and ``apiKey`` but a
  bare ``key`` (a vault key, an S3 key, a cache key) stays visible: the reviewer must see what
  ``delete_key(key=...)`` deletes. ``APPROVALS_SECRET_NAMES`` replaces the list (``key``
  there masks every name with a ``key`` part, as before).
- **By value.** Every string in the arguments, nested ones too, is read by Yelp's
  ``detect-secrets``: known token formats (Slack, OpenAI, GitHub, GitLab, AWS, Stripe, JWTs,
  private-key blocks, credentials in URLs...) and high-entropy strings. A string in which it
  finds a secret is masked whole, since a half-masked key or key block may still give it away.
  Hex runs shorter than a hex key (UUIDs, short hashes, instance ids) are taken for the ids
  they usually are. The detector runs offline: no plugin verifies a find with its service.

The record keeps the real values: the tool needs them, and operators can read them with
``approvals show``. Masked arguments cannot be edited (the modal would show them).
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # detect-secrets is imported when a value is first read: it is slow to load
    from detect_secrets.plugins.base import BasePlugin

DEFAULT_SECRET_NAMES = (
    "token",
    "password",
    "passwd",
    "passphrase",
    "secret",
    "credential",
    "credentials",
    "auth",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "signing_key",
    "encryption_key",
    "session_key",
)
MASK = "••••••"

#: Detectors whose finds are not secrets: a public IP address is where a tool acts, which the
#: reviewer must see.
_NOT_SECRETS = ("IPPublicDetector",)
#: A ``pragma: allowlist secret`` inside a value must not unmask it: the value comes from a
#: model, not from a reviewed file.
_IGNORED_FILTERS = ("detect_secrets.filters.allowlist.is_line_allowlisted",)
#: The shortest hex run taken for a key (128 bits); shorter ones are ids.
_HEX_KEY_LENGTH = 32
#: Longer strings are masked unread: reading costs time in proportion to the length, and a
#: card shows only the start of such a value anyway.
MAX_SCANNED = 100_000

#: The high-entropy detectors swap their patterns while they read, so one string at a time.
_scanning = threading.Lock()
#: Verdicts by the digest of the text, oldest first.
_verdicts: dict[bytes, bool] = {}
_REMEMBERED = 4096


def _parts(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [part for part in re.split(r"[^a-zA-Z0-9]+", spaced.lower()) if part]


def is_secret(name: str, patterns: Iterable[str]) -> bool:
    """Whether an argument name looks secret: a pattern's parts occur in it, in a row."""
    parts = _parts(name)
    for pattern in patterns:
        wanted = _parts(pattern)
        width = len(wanted)
        if wanted and any(parts[i : i + width] == wanted for i in range(len(parts) - width + 1)):
            return True
    return False


def secret_names(names: Iterable[str], patterns: Iterable[str]) -> tuple[str, ...]:
    wanted = tuple(patterns)
    return tuple(sorted({name for name in names if is_secret(name, wanted)}))


def mask(
    arguments: dict[str, Any],
    secret: Iterable[str],
    names: Iterable[str] = DEFAULT_SECRET_NAMES,
) -> dict[str, Any]:
    """The arguments as people may see them: those named in ``secret``, and every string in
    which a secret is found, replaced by a mask. Keys of nested objects are matched against
    ``names``."""
    hidden = set(secret)
    patterns = tuple(names)
    return {
        name: MASK if name in hidden and value is not None else _masked(value, patterns)
        for name, value in arguments.items()
    }


def _masked(value: Any, names: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return MASK if looks_secret(value) else value
    if isinstance(value, dict):
        return {
            key: MASK if item is not None and is_secret(str(key), names) else _masked(item, names)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_masked(item, names) for item in value]
    return value


def mask_text(text: str, arguments: Mapping[str, Any], shown: Mapping[str, Any]) -> str:
    """``text`` (a summary the gate filled in with the arguments) with every value that
    ``shown``, the masked ``arguments``, hides replaced by the mask there too."""
    hidden = {leaf for name, value in arguments.items() for leaf in _hidden(value, shown.get(name))}
    for leaf in sorted(hidden, key=len, reverse=True):
        text = text.replace(leaf, MASK)
    return text


def _hidden(value: Any, shown: Any) -> Iterator[str]:
    """The text of every leaf of ``value`` that its masked copy ``shown`` hides."""
    if shown == value:
        return
    if isinstance(value, dict) and isinstance(shown, dict):
        for key, item in value.items():
            yield from _hidden(item, shown.get(key))
    elif isinstance(value, list | tuple) and isinstance(shown, list):
        for item, masked in zip(value, shown, strict=False):
            yield from _hidden(item, masked)
    else:
        yield from _leaves(value)


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    elif value is not None and not isinstance(value, bool) and str(value):
        yield str(value)


def looks_secret(text: str) -> bool:
    """Whether ``detect-secrets`` finds a secret in ``text`` (one too long to read counts).

    A card, its list entry and its summary show the same values again and again, so each
    verdict is remembered by the text's digest (not the text: the values stay out of memory).
    """
    if len(text) > MAX_SCANNED:
        return True
    from detect_secrets.core.scan import scan_line

    detectors = _detectors()
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    with _scanning:
        verdict = _verdicts.pop(digest, None)
        if verdict is None:
            found = scan_line(text)
            verdict = any(_counts(detectors.get(f.type), f.secret_value) for f in found)
        _verdicts[digest] = verdict  # the newest last; the oldest goes first
        if len(_verdicts) > _REMEMBERED:
            del _verdicts[next(iter(_verdicts))]
        return verdict


def _counts(detector: BasePlugin | None, found: str | None) -> bool:
    """A find is a secret, except a high-entropy string below its detector's limit (the
    detector reports those too when it reads a bare string) or a hex run too short for a key.
    A find of a detector not known here counts."""
    from detect_secrets.plugins.high_entropy_strings import (
        HexHighEntropyString,
        HighEntropyStringsPlugin,
    )

    if not isinstance(detector, HighEntropyStringsPlugin) or found is None:
        return True
    if isinstance(detector, HexHighEntropyString) and len(found) < _HEX_KEY_LENGTH:
        return False
    return detector.calculate_shannon_entropy(found) > detector.entropy_limit


def load_detectors() -> None:
    """Load ``detect-secrets`` and configure its detectors now, not on the first value read.

    A worker calls this before it forks: every work-horse then inherits them loaded, where
    each would otherwise load them again for its first card.
    """
    import detect_secrets.core.scan  # noqa: F401 - what ``looks_secret`` imports

    _detectors()


@functools.cache
def _detectors() -> dict[str, BasePlugin]:
    """Every detector ``detect-secrets`` ships but ``_NOT_SECRETS``, by the type it reports
    (configured once per process: the library keeps its settings globally)."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.settings import get_plugins, get_settings

    shipped: list[type[BasePlugin]] = list(get_mapping_from_secret_type_to_class().values())
    with _scanning:
        settings = get_settings()
        settings.configure_plugins(
            [{"name": cls.__name__} for cls in shipped if cls.__name__ not in _NOT_SECRETS]
        )
        settings.disable_filters(*_IGNORED_FILTERS)
        return {plugin.secret_type: plugin for plugin in get_plugins()}
