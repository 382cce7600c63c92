"""Settings, read once from the environment.

Every process (agent, bot, worker, CLI) reads the same variables, so they live in one place.
Only the variables a process really needs are required, and a missing one stops start-up
with a single line that names it (``ConfigError``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from approvals.errors import ConfigError
from approvals.secrets import DEFAULT_SECRET_NAMES

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_SLACK_API_URL = "https://slack.com/api/"


def _csv(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None


def _seconds(env: Mapping[str, str], name: str, default: int) -> int:
    value = _int(env, name, default)
    if value < 0:
        raise ConfigError(f"{name} must be 0 or more seconds, got {value}")
    return value


def _number(
    env: Mapping[str, str], name: str, default: float, low: float, high: float | None = None
) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        limits = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ConfigError(f"{name} must be {limits}, got {raw!r}")
    return value


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
    #: The Standard Webhooks secret (``whsec_...``) webhook bodies are signed with.
    webhook_secret: str | None = None
    #: Seconds an approval's audit trail is kept (0: kept until deleted by hand).
    audit_ttl: int = 0
    #: ``approvals api``: the largest request body accepted, in bytes (larger: HTTP 413).
    api_max_body: int = 64 * 1024
    #: ``approvals api``: requests one token may make per minute (more: HTTP 429).
    api_rate_limit: int = 600
    #: Where callers (``approvals hook``, ``approvals mcp``) reach ``approvals api``, and as whom.
    api_url: str = "http://127.0.0.1:8000"
    api_token: str | None = None
    #: A TOML file of policy rules applied before a call pauses (``approvals.policy``).
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

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default ``os.environ``)."""
        env = os.environ if env is None else env
        worker_class = env.get("APPROVALS_WORKER_CLASS") or "Worker"
        if worker_class not in ("Worker", "SimpleWorker"):
            raise ConfigError(
                f"APPROVALS_WORKER_CLASS must be Worker or SimpleWorker, got {worker_class!r}"
            )
        log_format = env.get("APPROVALS_LOG_FORMAT") or "text"
        if log_format not in ("text", "json"):
            raise ConfigError(f"APPROVALS_LOG_FORMAT must be text or json, got {log_format!r}")
        llm_log, llm_log_db = _llm_log(env.get("APPROVALS_LLM_LOG"))
        grant_notice = env.get("APPROVALS_GRANT_NOTICE") or "line"
        if grant_notice not in ("line", "none"):
            raise ConfigError(f"APPROVALS_GRANT_NOTICE must be line or none, got {grant_notice!r}")
        return cls(
            redis_url=env.get("REDIS_URL") or DEFAULT_REDIS_URL,
            slack_bot_token=env.get("SLACK_BOT_TOKEN") or None,
            slack_signing_secret=env.get("SLACK_SIGNING_SECRET") or None,
            slack_app_token=env.get("SLACK_APP_TOKEN") or None,
            slack_api_url=_with_slash(env.get("SLACK_API_URL") or DEFAULT_SLACK_API_URL),
            channel=env.get("APPROVALS_CHANNEL") or None,
            approvers=_csv(env.get("APPROVERS")),
            approver_groups=_csv(env.get("APPROVER_GROUPS")),
            expires_in=_number(env, "APPROVALS_EXPIRES_IN", 24 * 3600, low=1),
            warn_before=_number(env, "APPROVALS_WARN_BEFORE", 0.1, low=0, high=0.99),
            chain_limit=_int(env, "APPROVALS_CHAIN_LIMIT", 25),
            queue=env.get("APPROVALS_QUEUE") or "approvals",
            llm_plugins=_csv(env.get("APPROVALS_LLM_PLUGINS")),
            worker_class=worker_class,
            job_timeout=_int(env, "APPROVALS_JOB_TIMEOUT", 600),
            tool_modules=_csv(env.get("APPROVALS_TOOL_MODULES")),
            secret_names=_csv(env.get("APPROVALS_SECRET_NAMES")) or DEFAULT_SECRET_NAMES,
            worker_ttl=_int(env, "APPROVALS_WORKER_TTL", 30),
            maintenance_interval=_int(env, "APPROVALS_MAINTENANCE_INTERVAL", 5),
            log_format=log_format,
            result_ttl=_int(env, "APPROVALS_RESULT_TTL", 7 * 24 * 3600),
            llm_log=llm_log,
            llm_log_db=llm_log_db,
            history_retention=_seconds(env, "APPROVALS_HISTORY_RETENTION", 7 * 24 * 3600),
            retention=_seconds(env, "APPROVALS_RETENTION", 30 * 24 * 3600),
            archive_url=env.get("APPROVALS_ARCHIVE_URL") or None,
            signing_key=env.get("APPROVALS_SIGNING_KEY") or None,
            verify_keys=_csv(env.get("APPROVALS_VERIFY_KEYS")),
            receipt_ttl=int(_number(env, "APPROVALS_RECEIPT_TTL", 600, low=1)),
            webhook_urls=_csv(env.get("APPROVALS_WEBHOOK_URLS")),
            webhook_secret=_webhook_secret(env),
            audit_ttl=int(_number(env, "APPROVALS_AUDIT_TTL", 0, low=0)),
            api_max_body=int(_number(env, "APPROVALS_API_MAX_BODY", 64 * 1024, low=1024)),
            api_rate_limit=int(_number(env, "APPROVALS_API_RATE_LIMIT", 600, low=1)),
            api_url=(env.get("APPROVALS_API_URL") or "http://127.0.0.1:8000").rstrip("/"),
            api_token=env.get("APPROVALS_API_TOKEN") or None,
            policy_path=env.get("APPROVALS_POLICY") or None,
            grant_notice=grant_notice,
            remind_after=_number(env, "APPROVALS_REMIND_AFTER", 3600.0, low=0),
            escalate_after=_number(env, "APPROVALS_ESCALATE_AFTER", 0.0, low=0),
            escalate_to=_escalate_to(env.get("APPROVALS_ESCALATE_TO")),
        )

    def require(self, *names: str) -> None:
        """Raise ``ConfigError`` naming the first missing environment variable of ``names``."""
        for name in names:
            if not getattr(self, _ATTRIBUTE_OF[name]):
                raise ConfigError(f"missing required setting {name}: {_WHY[name]}")


def _llm_log(raw: str | None) -> tuple[bool, str | None]:
    """``APPROVALS_LLM_LOG``: off, on (llm's own logs.db), or the path of a SQLite file."""
    value = (raw or "").strip()
    if value.lower() in ("", "0", "false", "no", "off"):
        return False, None
    if value.lower() in ("1", "true", "yes", "on"):
        return True, None
    return True, value


def _webhook_secret(env: Mapping[str, str]) -> str | None:
    """``APPROVALS_WEBHOOK_SECRET``; refused at start-up when URLs are set without it, so
    that no receiver ever gets an unsigned body."""
    secret = env.get("APPROVALS_WEBHOOK_SECRET") or None
    if secret is not None and not secret.startswith("whsec_"):
        raise ConfigError("APPROVALS_WEBHOOK_SECRET must be a Standard Webhooks secret (whsec_...)")
    if secret is None and _csv(env.get("APPROVALS_WEBHOOK_URLS")):
        raise ConfigError("APPROVALS_WEBHOOK_URLS is set: set APPROVALS_WEBHOOK_SECRET too")
    return secret


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
