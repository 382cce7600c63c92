"""Settings, read once from the environment.

Every process (agent, bot, worker, CLI) reads the same variables, so they live in one place.
Only the variables a process really needs are required, and a missing one stops start-up
with a single line that names it (``ConfigError``). So does a malformed one: each kind of
value (a whole number, a number, a choice, a list, a URL) has one parser here, and every
number has bounds (``NUMBERS``), so a value that makes no sense (a negative timeout, a
background loop with no pause between its rounds) stops start-up with the variable's name
and what it accepts, instead of misbehaving later.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from approvals.errors import ConfigError
from approvals.secrets import DEFAULT_SECRET_NAMES

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_SLACK_API_URL = "https://slack.com/api/"
DEFAULT_API_URL = "http://127.0.0.1:8000"

#: How many bytes a Standard Webhooks secret holds (its specification's bounds).
WEBHOOK_SECRET_BYTES = (24, 64)

_HOUR = 3600
_DAY = 24 * _HOUR
_YEAR = 365 * _DAY


@dataclass(frozen=True)
class Bounds:
    """What a numeric setting accepts: from ``low`` to ``high``, in ``unit``; ``whole``
    ones take no fraction."""

    low: float
    high: float
    unit: str = "seconds"
    whole: bool = True

    def describe(self) -> str:
        """``a whole number of seconds from 1 to 604800``: the end of a refusal's sentence."""
        kind = "a whole number" if self.whole else "a number"
        unit = f" of {self.unit}" if self.unit else ""
        return f"{kind}{unit} from {_plain(self.low)} to {_plain(self.high)}"


def _plain(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


#: Every numeric setting and what it accepts (docs/operations.md lists them). The lows keep
#: loops pausing and timeouts positive; the highs are far beyond any sensible value, so a
#: typo (an extra digit, milliseconds for seconds) is caught at start-up.
NUMBERS: dict[str, Bounds] = {
    "APPROVALS_EXPIRES_IN": Bounds(1, _YEAR, whole=False),
    "APPROVALS_WARN_BEFORE": Bounds(0, 0.99, unit="", whole=False),
    "APPROVALS_CHAIN_LIMIT": Bounds(1, 1000, unit="model responses"),
    "APPROVALS_JOB_TIMEOUT": Bounds(1, 7 * _DAY),
    "APPROVALS_WORKER_TTL": Bounds(10, _DAY),
    "APPROVALS_MAINTENANCE_INTERVAL": Bounds(1, _HOUR),
    "APPROVALS_LEASE": Bounds(3, _HOUR),
    "APPROVALS_RESULT_TTL": Bounds(1, _YEAR),
    "APPROVALS_HISTORY_RETENTION": Bounds(0, 10 * _YEAR),
    "APPROVALS_RETENTION": Bounds(0, 10 * _YEAR),
    "APPROVALS_RECEIPT_TTL": Bounds(1, _DAY),
    "APPROVALS_AUDIT_TTL": Bounds(0, 10 * _YEAR),
    "APPROVALS_API_MAX_BODY": Bounds(1024, 64 * 1024 * 1024, unit="bytes"),
    "APPROVALS_API_RATE_LIMIT": Bounds(1, 1_000_000, unit="requests a minute"),
    "APPROVALS_REMIND_AFTER": Bounds(0, _YEAR, whole=False),
    "APPROVALS_ESCALATE_AFTER": Bounds(0, _YEAR, whole=False),
    "APPROVALS_PREVIEW_TIMEOUT": Bounds(0.1, 600, whole=False),
    "APPROVALS_STALE_RETRIES": Bounds(0, 100, unit="times"),
    "APPROVALS_MIN_REPLICAS": Bounds(0, 100, unit="replicas"),
    "APPROVALS_MIN_REPLICAS_TIMEOUT": Bounds(0.01, 10, whole=False),
    "APPROVALS_SLACK_PACE": Bounds(0.01, 1000, unit="posts a second", whole=False),
    "APPROVALS_SLACK_BURST": Bounds(1, 100, unit="posts"),
}

#: The schemes each URL setting accepts (a SQLAlchemy URL may name a driver: ``sqlite+...``).
URL_SCHEMES: dict[str, tuple[str, ...]] = {
    "REDIS_URL": ("redis", "rediss", "unix"),
    "SLACK_API_URL": ("https", "http"),
    "APPROVALS_API_URL": ("https", "http"),
    "APPROVALS_WEBHOOK_URLS": ("https", "http"),
    "APPROVALS_ARCHIVE_URL": ("sqlite", "postgresql", "postgres"),
}


def _raw(env: Mapping[str, str], name: str) -> str | None:
    """The variable's value without surrounding spaces; None when unset or blank."""
    value = (env.get(name) or "").strip()
    return value or None


def _csv(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def _whole(env: Mapping[str, str], name: str, default: int) -> int:
    """A whole number within ``NUMBERS[name]``."""
    return int(_number(env, name, default))


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    """A finite number within ``NUMBERS[name]`` (whole, when the bounds say so)."""
    raw = _raw(env, name)
    if raw is None:
        return default
    bounds = NUMBERS[name]
    try:  # ASCII only: int() and float() would also read other scripts' digits
        value = float(int(raw) if bounds.whole else float(raw)) if raw.isascii() else math.nan
    except (ValueError, OverflowError):
        value = math.nan
    if not (math.isfinite(value) and bounds.low <= value <= bounds.high):
        raise ConfigError(f"{name} must be {bounds.describe()}, got {_shown(raw)}")
    return value


def _shown(raw: str) -> str:
    """A refused value as the refusal quotes it: whole, unless it is long."""
    return repr(raw if len(raw) <= 40 else raw[:40] + "...")


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (the first when unset)."""
    value = _raw(env, name) or choices[0]
    if value not in choices:
        raise ConfigError(f"{name} must be {_either(choices)}, got {_shown(value)}")
    return value


def _either(choices: tuple[str, ...]) -> str:
    """``a, b or c``."""
    return " or ".join([", ".join(choices[:-1]), choices[-1]] if len(choices) > 2 else choices)


def _url(env: Mapping[str, str], name: str, default: str = "") -> str:
    """A URL with one of ``URL_SCHEMES[name]`` (``default`` when unset)."""
    raw = _raw(env, name)
    return default if raw is None else _checked_url(name, raw)


def _urls(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated list of URLs, each as ``_url`` checks it."""
    return tuple(_checked_url(name, url) for url in _csv(env.get(name)))


def _checked_url(name: str, url: str) -> str:
    """``url`` when it has an accepted scheme and a place after it; the refusal never
    repeats the value, which may hold a password."""
    schemes = URL_SCHEMES[name]
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise ConfigError(f"{name} is not a URL: {exc}") from None
    scheme = parts.scheme.lower().split("+", 1)[0]
    if scheme not in schemes or not (parts.netloc or parts.path.strip("/")):
        accepted = _either(tuple(f"{s}://" for s in schemes))
        found = f"{parts.scheme}://..." if parts.scheme else "no scheme"
        raise ConfigError(f"{name} must be a URL starting with {accepted}, got {found}")
    return url


@dataclass(frozen=True)
class Settings:
    """Configuration shared by every process; build it with ``Settings.from_env()``."""

    redis_url: str = DEFAULT_REDIS_URL
    slack_bot_token: str | None = None
    slack_signing_secret: str | None = None
    slack_app_token: str | None = None
    slack_api_url: str = DEFAULT_SLACK_API_URL
    channel: str | None = None
    approvers: tuple[str, ...] = ()
    approver_groups: tuple[str, ...] = ()
    #: Seconds an approval waits before it expires, unless its gate says otherwise.
    expires_in: float = 24 * 3600
    #: How early the expiry warning is posted, as a fraction of the waiting window.
    warn_before: float = 0.1
    #: Upper bound on model responses per run or resume, so a runaway agent stops.
    chain_limit: int = 25
    queue: str = "approvals"
    #: Modules registered with llm's plugin manager in every process (models not pip-installed).
    llm_plugins: tuple[str, ...] = ()
    #: "Worker" forks a work-horse per job (isolation); "SimpleWorker" runs every job in the
    #: worker process (no fork, so jobs start sooner; a crashing tool takes the worker down).
    worker_class: str = "Worker"
    job_timeout: int = 600
    #: Modules the worker may import tools from (and their submodules); anything else is refused.
    tool_modules: tuple[str, ...] = ()
    #: Argument names whose values are masked in Slack (matched by name parts).
    secret_names: tuple[str, ...] = DEFAULT_SECRET_NAMES
    #: RQ's defaults take minutes to notice a dead worker or to restart a dead scheduler;
    #: these bring both under a minute (see README, "Running in production").
    worker_ttl: int = 30
    maintenance_interval: int = 5
    #: Seconds a running resume's lease lasts: the resume renews it every third of this, and
    #: recovery takes a run whose lease lapsed for one whose worker died.
    lease: int = 15
    #: "text" for people reading a terminal; "json" (one object per line) for log collectors.
    log_format: str = "text"
    #: Seconds a finished run's outcome stays in Redis for ``approvals.wait`` and ``result``.
    result_ttl: int = 7 * 24 * 3600
    #: Write every run to llm's log database (``llm logs``), in the agent and the workers.
    llm_log: bool = False
    #: That database's path; None: llm's own ``logs.db`` in the process's ``LLM_USER_PATH``.
    llm_log_db: str | None = None
    #: Seconds a finished approval keeps its message history in Redis: it is needed only to
    #: resume, and the audit trail keeps what ran.
    history_retention: int = 7 * 24 * 3600
    #: Seconds a finished approval keeps its record and audit trail in Redis (then the
    #: archive, when there is one, is where they are read).
    retention: int = 30 * 24 * 3600
    #: SQLAlchemy URL of the archive (``sqlite:///path``, ``postgresql://...``); None: none.
    archive_url: str | None = None
    #: Path of the Ed25519 private key (PEM, PKCS#8) the bot and the CLI sign receipts with.
    #: Never set it for workers: a worker that cannot sign cannot mint a receipt.
    signing_key: str | None = None
    #: Paths of older public keys (PEM) still published while a key rotation settles.
    verify_keys: tuple[str, ...] = ()
    #: Seconds a receipt stays valid after the decision that released its call.
    receipt_ttl: int = 600
    #: Where every state change is posted, signed per Standard Webhooks.
    webhook_urls: tuple[str, ...] = ()
    #: The Standard Webhooks secrets (``whsec_...``) webhook bodies are signed with: every
    #: delivery carries a signature for each, so a receiver moves to a new one at its pace.
    webhook_secrets: tuple[str, ...] = ()
    #: Seconds an approval's audit trail is kept (0: kept until deleted by hand).
    audit_ttl: int = 0
    #: ``approvals api``: the largest request body accepted, in bytes (larger: HTTP 413).
    api_max_body: int = 64 * 1024
    #: ``approvals api``: requests one token may make per minute (more: HTTP 429).
    api_rate_limit: int = 600
    #: Where callers (``approvals hook``, ``approvals mcp``) reach ``approvals api``, and as whom.
    api_url: str = DEFAULT_API_URL
    api_token: str | None = None
    #: A TOML file of policy rules applied before a call pauses (``approvals.decisions.policy``).
    policy_path: str | None = None
    #: Seconds before the approvers are reminded of a waiting approval, and between reminders
    #: (0: never); a gate's ``remind_after`` wins.
    remind_after: float = 3600.0
    #: Seconds before a waiting card is escalated to ``escalate_to`` (0: never).
    escalate_after: float = 0.0
    #: Channel ids and user group ids an escalation goes to.
    escalate_to: tuple[str, ...] = ()
    #: "line": a call a grant let through gets one compact line in its channel; "none": silent.
    grant_notice: str = "line"
    #: Seconds a tool's ``preview=`` function may take when its call pauses (the card then
    #: says it timed out; the pause never waits longer).
    preview_timeout: float = 5.0
    #: How many times a call whose state changed after its approval (its gate's
    #: ``fingerprint``) is asked again; the next time, the model is told and re-plans.
    stale_retries: int = 2
    #: The Sentinels' ``(host, port)``; set, every process asks them where the primary is and
    #: ``redis_url`` gives only the database, the user, the password and TLS.
    redis_sentinels: tuple[tuple[str, int], ...] = ()
    #: The name the Sentinels watch the primary under.
    redis_sentinel_service: str | None = None
    #: The Sentinels' own credentials and TLS (Sentinel has its own ``requirepass``).
    redis_sentinel_username: str | None = None
    redis_sentinel_password: str | None = None
    redis_sentinel_tls: bool = False
    #: Replicas that must hold a pause or a decision before it is acknowledged (Redis ``WAIT``).
    min_replicas: int = 0
    #: Seconds to wait for them; past it, the pause or decision is undone and refused.
    min_replicas_timeout: float = 1.0
    #: Cards posted a second in one channel, across every worker (0: Slack's own pace,
    #: ``approvals.slack.limits``); and how many may go back to back in a quiet channel.
    slack_pace: float = 0.0
    slack_burst: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default ``os.environ``).

        Raises:
            ConfigError: a variable is malformed or out of bounds (the message names it).
        """
        env = os.environ if env is None else env
        llm_log, llm_log_db = _llm_log(env.get("APPROVALS_LLM_LOG"))
        return cls(
            redis_url=_url(env, "REDIS_URL", DEFAULT_REDIS_URL),
            slack_bot_token=env.get("SLACK_BOT_TOKEN") or None,
            slack_signing_secret=env.get("SLACK_SIGNING_SECRET") or None,
            slack_app_token=env.get("SLACK_APP_TOKEN") or None,
            slack_api_url=_with_slash(_url(env, "SLACK_API_URL", DEFAULT_SLACK_API_URL)),
            channel=env.get("APPROVALS_CHANNEL") or None,
            approvers=_csv(env.get("APPROVERS")),
            approver_groups=_csv(env.get("APPROVER_GROUPS")),
            expires_in=_number(env, "APPROVALS_EXPIRES_IN", 24 * 3600),
            warn_before=_number(env, "APPROVALS_WARN_BEFORE", 0.1),
            chain_limit=_whole(env, "APPROVALS_CHAIN_LIMIT", 25),
            queue=env.get("APPROVALS_QUEUE") or "approvals",
            llm_plugins=_csv(env.get("APPROVALS_LLM_PLUGINS")),
            worker_class=_choice(env, "APPROVALS_WORKER_CLASS", ("Worker", "SimpleWorker")),
            job_timeout=_whole(env, "APPROVALS_JOB_TIMEOUT", 600),
            tool_modules=_csv(env.get("APPROVALS_TOOL_MODULES")),
            secret_names=_csv(env.get("APPROVALS_SECRET_NAMES")) or DEFAULT_SECRET_NAMES,
            worker_ttl=_whole(env, "APPROVALS_WORKER_TTL", 30),
            maintenance_interval=_whole(env, "APPROVALS_MAINTENANCE_INTERVAL", 5),
            lease=_whole(env, "APPROVALS_LEASE", 15),
            log_format=_choice(env, "APPROVALS_LOG_FORMAT", ("text", "json")),
            result_ttl=_whole(env, "APPROVALS_RESULT_TTL", 7 * 24 * 3600),
            llm_log=llm_log,
            llm_log_db=llm_log_db,
            history_retention=_whole(env, "APPROVALS_HISTORY_RETENTION", 7 * 24 * 3600),
            retention=_whole(env, "APPROVALS_RETENTION", 30 * 24 * 3600),
            archive_url=_url(env, "APPROVALS_ARCHIVE_URL") or None,
            signing_key=env.get("APPROVALS_SIGNING_KEY") or None,
            verify_keys=_csv(env.get("APPROVALS_VERIFY_KEYS")),
            receipt_ttl=_whole(env, "APPROVALS_RECEIPT_TTL", 600),
            webhook_urls=_urls(env, "APPROVALS_WEBHOOK_URLS"),
            webhook_secrets=_webhook_secrets(env),
            audit_ttl=_whole(env, "APPROVALS_AUDIT_TTL", 0),
            api_max_body=_whole(env, "APPROVALS_API_MAX_BODY", 64 * 1024),
            api_rate_limit=_whole(env, "APPROVALS_API_RATE_LIMIT", 600),
            api_url=_url(env, "APPROVALS_API_URL", DEFAULT_API_URL).rstrip("/"),
            api_token=env.get("APPROVALS_API_TOKEN") or None,
            policy_path=env.get("APPROVALS_POLICY") or None,
            grant_notice=_choice(env, "APPROVALS_GRANT_NOTICE", ("line", "none")),
            remind_after=_number(env, "APPROVALS_REMIND_AFTER", 3600.0),
            escalate_after=_number(env, "APPROVALS_ESCALATE_AFTER", 0.0),
            escalate_to=_escalate_to(env.get("APPROVALS_ESCALATE_TO")),
            preview_timeout=_number(env, "APPROVALS_PREVIEW_TIMEOUT", 5.0),
            stale_retries=_whole(env, "APPROVALS_STALE_RETRIES", 2),
            **_sentinel_settings(env),
            min_replicas=_whole(env, "APPROVALS_MIN_REPLICAS", 0),
            min_replicas_timeout=_number(env, "APPROVALS_MIN_REPLICAS_TIMEOUT", 1.0),
            slack_pace=_number(env, "APPROVALS_SLACK_PACE", 0.0),
            slack_burst=_whole(env, "APPROVALS_SLACK_BURST", 0),
        )

    def require(self, *names: str) -> None:
        """Raise ``ConfigError`` naming the first missing environment variable of ``names``."""
        for name in names:
            if not getattr(self, _ATTRIBUTE_OF[name]):
                raise ConfigError(f"missing required setting {name}: {_WHY[name]}")


def _sentinel_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """``REDIS_SENTINELS`` and its companions. The service name is required with the
    addresses (a wrong default would watch nothing), and a Unix socket in ``REDIS_URL``
    cannot name where a Sentinel-chosen primary is."""
    sentinels = tuple(
        _address("REDIS_SENTINELS", part) for part in _csv(env.get("REDIS_SENTINELS"))
    )
    service = _raw(env, "REDIS_SENTINEL_SERVICE")
    if sentinels and not service:
        raise ConfigError(
            "REDIS_SENTINELS is set: set REDIS_SENTINEL_SERVICE to the name the Sentinels "
            "watch the primary under (their `sentinel monitor NAME ...` line)"
        )
    if sentinels and (_raw(env, "REDIS_URL") or "").lower().startswith("unix:"):
        raise ConfigError("REDIS_SENTINELS is set: REDIS_URL must be redis:// or rediss://")
    return {
        "redis_sentinels": sentinels,
        "redis_sentinel_service": service,
        "redis_sentinel_username": _raw(env, "REDIS_SENTINEL_USERNAME"),
        "redis_sentinel_password": _raw(env, "REDIS_SENTINEL_PASSWORD"),
        "redis_sentinel_tls": _flag(env, "REDIS_SENTINEL_TLS"),
    }


def _address(name: str, raw: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets: ``[::1]:26379``)."""
    host, _, port = raw.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{name} takes comma-separated host:port pairs, got {_shown(raw)}")
    return host, int(port)


def _flag(env: Mapping[str, str], name: str) -> bool:
    """On (``1``, ``true``, ``yes``, ``on``) or off (unset, ``0``, ``false``, ``no``, ``off``)."""
    value = (_raw(env, name) or "").lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name} must be 1 or 0 (true or false), got {_shown(value)}")


def _llm_log(raw: str | None) -> tuple[bool, str | None]:
    """``APPROVALS_LLM_LOG``: off, on (llm's own logs.db), or the path of a SQLite file."""
    value = (raw or "").strip()
    if value.lower() in ("", "0", "false", "no", "off"):
        return False, None
    if value.lower() in ("1", "true", "yes", "on"):
        return True, None
    return True, value


def _webhook_secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    """``APPROVALS_WEBHOOK_SECRET``: one secret, or the new and the old ones during a rotation
    (comma-separated). Refused at start-up when URLs are set without one, so that no receiver
    ever gets an unsigned body, and unless each is a secret every Standard Webhooks library
    reads as the same key (a lenient base64 decoder would sign with a key no receiver has)."""
    secrets = _csv(env.get("APPROVALS_WEBHOOK_SECRET"))
    for secret in secrets:
        _check_webhook_secret(secret)
    if not secrets and _csv(env.get("APPROVALS_WEBHOOK_URLS")):
        raise ConfigError("APPROVALS_WEBHOOK_URLS is set: set APPROVALS_WEBHOOK_SECRET too")
    return secrets


def _check_webhook_secret(secret: str) -> None:
    """``whsec_`` and the standard base64 of 24 to 64 bytes, as Standard Webhooks says (the
    message never shows the secret)."""
    name, prefix = "APPROVALS_WEBHOOK_SECRET", "whsec_"
    make = "make one with: echo whsec_$(openssl rand -base64 32)"
    if not secret.startswith(prefix):
        raise ConfigError(f"{name} must be a Standard Webhooks secret (whsec_...); {make}")
    encoded = secret.removeprefix(prefix)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error:
        raise ConfigError(
            f"{name}: what follows whsec_ is not base64 (A-Z, a-z, 0-9, + and /); {make}"
        ) from None
    low, high = WEBHOOK_SECRET_BYTES
    if not low <= len(key) <= high:
        raise ConfigError(
            f"{name} holds {len(key)} bytes; a Standard Webhooks secret holds {low} to {high}; "
            f"{make}"
        )


def _escalate_to(raw: str | None) -> tuple[str, ...]:
    """``APPROVALS_ESCALATE_TO``: channel ids (C..., G...) and user group ids (S...)."""
    targets = _csv(raw)
    for target in targets:
        if target[:1] not in ("C", "G", "S"):
            raise ConfigError(
                f"APPROVALS_ESCALATE_TO takes channel ids (C...) and user group ids (S...), "
                f"got {target!r}"
            )
    return targets


def _with_slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


_ATTRIBUTE_OF = {
    "SLACK_BOT_TOKEN": "slack_bot_token",
    "SLACK_SIGNING_SECRET": "slack_signing_secret",
    "SLACK_APP_TOKEN": "slack_app_token",
    "APPROVALS_CHANNEL": "channel",
    "APPROVALS_TOOL_MODULES": "tool_modules",
    "APPROVALS_SIGNING_KEY": "signing_key",
    "APPROVALS_API_TOKEN": "api_token",
}
_WHY = {
    "APPROVALS_SIGNING_KEY": "the path of the Ed25519 private key receipts are signed with",
    "SLACK_BOT_TOKEN": "the bot token (xoxb-...) from the Slack app's OAuth page",
    "SLACK_SIGNING_SECRET": "the signing secret from the Slack app's Basic Information page",
    "SLACK_APP_TOKEN": "an app-level token (xapp-...) with connections:write, for Socket Mode",
    "APPROVALS_CHANNEL": "the channel id where approval cards are posted (e.g. C0123456789)",
    "APPROVALS_API_TOKEN": "a token from `approvals tokens create --agent NAME`",
    "APPROVALS_TOOL_MODULES": (
        "the modules the worker may import tools from, comma-separated (e.g. myagents.tools); "
        "anyone who can write to Redis could otherwise name any function"
    ),
}


def safe_url(url: str, *, hide_query: bool = False) -> str:
    """``url`` fit to print in logs, errors and ``approvals doctor``: its password replaced
    by ``***``, and with ``hide_query`` its query string too (where webhook receivers often
    take their own token)."""
    parts = urlsplit(url)
    query = hide_query and bool(parts.query)
    if parts.password is None and not query:
        return url
    netloc = parts.netloc
    if parts.password is not None:
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        netloc = f"{parts.username or ''}:***@{host}{port}"
    if query:
        return urlunsplit(parts._replace(netloc=netloc, query="", fragment="")) + "?..."
    return urlunsplit(parts._replace(netloc=netloc))
