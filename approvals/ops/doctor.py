"""``approvals doctor``: is this installation able to pause, post, decide and resume?

Each check is one small function that returns a ``Check``: a name, a level and one sentence
that says, in plain words, what was found and what it means for approvals. Nothing here
writes to Redis or Slack: the checks read configuration and counters only (RQ's registries
are counted without their usual clean-up).

- ``redis``: reachable at ``REDIS_URL``, and version 5 or newer (RQ needs it).
- ``persistence``: AOF and ``appendfsync``, i.e. which recent pauses a crash would lose.
- ``queue``: jobs waiting, scheduled (Slack retries) and failed; deadlines (expiries and
  warnings) ahead, and whether any is long overdue (no worker sweeping them).
- ``workers``: RQ workers listening on the queue.
- ``scheduler``: whether a worker's RQ scheduler holds the queue's lock; without one, Slack
  retries never fire.
- ``models``: every model a pending approval will resume on resolves here (run the doctor
  in the workers' environment) and supports conversations, which a resume needs.
- ``memory``: Redis's ``maxmemory-policy`` (anything but ``noeviction`` fails: an eviction
  policy deletes keys, pending approvals included) and used memory against ``maxmemory``.
- ``retention``: finished approvals Redis still holds, and what the retention sweep will
  free now (``approvals.ops.retention``).
- ``replication`` (with ``REDIS_SENTINELS`` or ``APPROVALS_MIN_REPLICAS``): the primary's
  replicas, their lag and persistence; fails with fewer in sync than the minimum.
- ``sentinels`` (with ``REDIS_SENTINELS``): each answers and all name the same primary.
- ``archive`` (with ``APPROVALS_ARCHIVE_URL`` only): it answers, at this version's schema.
- ``slack``: ``auth.test`` with ``SLACK_BOT_TOKEN``.
- ``scopes``: the token's scopes, from the ``X-OAuth-Scopes`` header of ``auth.test``.
- ``channel``: ``APPROVALS_CHANNEL`` is set and Slack knows it.
- ``socket`` (with ``SLACK_APP_TOKEN`` only): Slack opens Socket Mode connections for it.

Checks that depend on an earlier failed one are reported as not checked, rather than repeating
the same failure.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, cast

import redis
from rq import Worker
from rq.serializers import JSONSerializer
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web import SlackResponse

from approvals import store
from approvals.calls import plugins
from approvals.config import Settings, safe_url
from approvals.decisions import deadlines
from approvals.errors import ConfigError, ResumeError
from approvals.ops import retention
from approvals.slack import web as slack
from approvals.store import queue

MIN_REDIS_VERSION = (5, 0, 0)
#: Scopes every installation needs: posting cards, and ``/agent-pending``.
REQUIRED_SCOPES = ("chat:write", "commands")
#: Needed only to resolve ``APPROVER_GROUPS``.
GROUP_SCOPE = "usergroups:read"
#: Needed only when ``APPROVALS_ESCALATE_TO`` names channels: who is in them may decide.
CHANNEL_MEMBERS_SCOPE = "channels:read"


class Level(StrEnum):
    """How bad a finding is: ``warn`` works but at a risk the message names; ``fail`` does not."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One finding: which check, how bad, and one plain sentence for the operator."""

    name: str
    level: Level
    message: str


#: auth.test's answer, or why there is none.
Auth = SlackResponse | str


def run_checks(settings: Settings) -> list[Check]:
    """Every check, in the order they are printed."""
    archive = [check_archive(settings)] if settings.archive_url else []
    return _redis_checks(settings) + archive + _slack_checks(settings)


def _redis_checks(settings: Settings) -> list[Check]:
    # Short timeouts: a doctor must answer even when Redis is a black hole.
    conn = store.connection.connect(settings, timeout=5, connect_timeout=5)
    try:
        first = check_redis(conn, settings)
        later: list[tuple[str, Callable[[], Check]]] = [
            ("persistence", lambda: check_persistence(conn)),
            ("queue", lambda: check_queue(conn, settings)),
            ("workers", lambda: check_workers(conn, settings)),
            ("scheduler", lambda: check_scheduler(conn, settings)),
            ("models", lambda: check_models(conn, settings)),
            ("memory", lambda: check_memory(conn)),
            ("retention", lambda: check_retention(conn, settings)),
        ]
        if settings.redis_sentinels or settings.min_replicas:  # shown only where in use
            later.append(("replication", lambda: check_replication(conn, settings)))
        if settings.redis_sentinels:
            later.append(("sentinels", lambda: check_sentinels(settings)))
        if settings.webhook_urls:  # shown only where webhooks are in use
            later.append(("webhooks", lambda: check_webhooks(conn, settings)))
        if first.level is Level.FAIL:
            return [first, *(_not_checked(name, "Redis") for name, _ in later)]
        return [first, *(_guarded(name, check) for name, check in later)]
    finally:
        conn.close()


def start_problem(settings: Settings) -> str | None:
    """Why a service cannot start, in the words of the ``redis``, ``slack`` and ``socket``
    checks: Redis does not answer or refuses, or Slack does not answer or refuses a token;
    None when both answer. ``approvals bot`` asks before it serves."""
    conn = store.connection.connect(settings, timeout=5, connect_timeout=5)
    try:
        conn.ping()  # not INFO, as the check does: an ACL user without @dangerous may not
    except redis.RedisError as exc:
        return redis_problem(settings, exc)
    finally:
        conn.close()
    auth = slack_auth(settings)
    if isinstance(auth, str):
        return auth
    socket = check_socket_mode(settings) if settings.slack_app_token else None
    return socket.message if socket is not None and socket.level is Level.FAIL else None


def _slack_checks(settings: Settings) -> list[Check]:
    auth = slack_auth(settings)
    first = check_slack(auth, settings)
    socket = [check_socket_mode(settings)] if settings.slack_app_token else []
    if first.level is Level.FAIL:
        return [first, _not_checked("scopes", "Slack"), check_channel(settings, None), *socket]
    return [first, check_scopes(auth, settings), check_channel(settings, auth), *socket]


def _not_checked(name: str, failed: str) -> Check:
    return Check(name, Level.WARN, f"not checked, because the {failed} check failed")


def _guarded(name: str, check: Callable[[], Check]) -> Check:
    """Run a Redis check; a Redis error (an ACL refusal, a timeout) fails it, not the command."""
    try:
        return check()
    except redis.RedisError as exc:
        return Check(name, Level.FAIL, f"Redis refused or failed the query: {exc}")


# ---------------------------------------------------------------------------------- Redis


def check_redis(conn: redis.Redis, settings: Settings) -> Check:
    """Redis answers at ``REDIS_URL`` (or where the Sentinels say) and is at least version 5."""
    where = store.connection.describe(settings)
    try:
        info = conn.info("server")
    except redis.RedisError as exc:
        return Check("redis", Level.FAIL, redis_problem(settings, exc))
    version = str(info.get("redis_version", "0"))
    if _version(version) < MIN_REDIS_VERSION:
        return Check(
            "redis",
            Level.FAIL,
            f"Redis {version} at {where} is too old: RQ needs Redis 5+",
        )
    return Check("redis", Level.OK, f"Redis {version} at {where}")


def redis_problem(settings: Settings, exc: redis.RedisError) -> str:
    """What failed, where and what to do, in one line, for a Redis that refused or did not
    answer: this check's message, and what every command says instead of a traceback."""
    where = store.connection.describe(settings)
    if isinstance(exc, redis.AuthenticationError):
        return (
            f"Redis at {where} refused the credentials ({exc}): check the user and password "
            "in REDIS_URL"
        )
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return f"cannot reach Redis at {where} ({exc}): start Redis there, or set REDIS_URL"
    return f"Redis at {where} refused a command ({exc}): check the ACL of REDIS_URL's user"


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split("."):
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


#: What each ``appendfsync`` policy can lose when the machine (not just Redis) goes down.
_FSYNC = {
    "everysec": (Level.OK, "a power loss or OS crash can lose about the last second of writes"),
    "always": (Level.OK, "every write is on disk before Redis answers, so next to nothing is lost"),
    "no": (
        Level.WARN,
        "the OS flushes when it likes, so a power loss or OS crash can lose up to ~30 s of "
        "writes; appendfsync everysec bounds that to ~1 s",
    ),
}


def check_persistence(conn: redis.Redis) -> Check:
    """AOF on, and what its ``appendfsync`` policy can lose; AOF off loses recent pauses."""
    try:
        config = _config(conn, "appendonly", "appendfsync", "save")
    except redis.ResponseError as exc:  # managed Redis often disables or renames CONFIG
        persistence = conn.info("persistence")
        if str(persistence.get("aof_enabled")) == "1":
            return Check(
                "persistence", Level.OK, f"AOF is on; appendfsync unknown (CONFIG GET: {exc})"
            )
        config = {"appendonly": "no"}
    if config.get("appendonly") != "yes":
        lost = (
            "every pause, saved history and queued job is lost (snapshots are off too)"
            if config.get("save") == ""
            else "the pauses, saved histories and queued jobs written since the last snapshot "
            "are lost"
        )
        return Check(
            "persistence",
            Level.WARN,
            "AOF is off (appendonly no): if redis-server is killed (kill -9, the OOM killer, a "
            f"crash), {lost}. Set appendonly yes and appendfsync everysec",
        )
    fsync = config.get("appendfsync", "")
    level, loses = _FSYNC.get(fsync, (Level.WARN, "unknown policy"))
    return Check("persistence", level, f"AOF is on, appendfsync {fsync}: {loses}")


#: A replica further behind than this many seconds of its last contact is worth a warning.
REPLICA_LAG_WARN = 10


def check_replication(conn: redis.Redis, settings: Settings) -> Check:
    """The primary's replicas, each with its lag and its persistence; fails when fewer are
    in sync than ``APPROVALS_MIN_REPLICAS`` (every pause and click would be refused)."""
    info = conn.info("replication")
    if info.get("role") != "master":
        return Check("replication", Level.FAIL, f"the Redis reached is a {info.get('role')}")
    replicas = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
    offset = int(info.get("master_repl_offset", 0))
    parts, level = [], Level.OK
    online = 0
    for replica in replicas:
        where = f"{replica.get('ip')}:{replica.get('port')}"
        behind = offset - int(replica.get("offset", 0))
        lag = int(replica.get("lag", 0))
        state = str(replica.get("state"))
        online += state == "online"
        aof = _replica_persistence(settings, str(replica.get("ip")), int(replica["port"]))
        if state != "online" or lag > REPLICA_LAG_WARN or aof != "AOF on":
            level = Level.WARN
        parts.append(f"{where} {state}, lag {lag} s, {behind} bytes behind, {aof}")
    wanted = settings.min_replicas
    summary = f"{len(replicas)} replica(s)" + (": " + "; ".join(parts) if parts else "")
    if online < wanted:
        return Check(
            "replication",
            Level.FAIL,
            f"{summary}; APPROVALS_MIN_REPLICAS is {wanted}: with {online} in sync every "
            "pause and every click is refused",
        )
    if not replicas:
        level = Level.WARN
        summary += ": losing this primary loses everything in it"
    return Check(
        "replication", level, summary + (f"; at least {wanted} must confirm" if wanted else "")
    )


def _replica_persistence(settings: Settings, host: str, port: int) -> str:
    """Whether a replica writes an AOF (a replica promoted without one forgets on a crash)."""
    client = store.connection.node_client(settings, host, port, timeout=5)
    try:
        return "AOF on" if _config(client, "appendonly").get("appendonly") == "yes" else "AOF off"
    except redis.RedisError as exc:
        return f"persistence unknown ({type(exc).__name__})"
    finally:
        client.close()


def check_sentinels(settings: Settings) -> Check:
    """Every Sentinel answers and names the same primary, and it is the one answering; a
    majority must answer for a failover to happen at all."""
    named: dict[str, str] = {}
    problems: list[str] = []
    service = settings.redis_sentinel_service or ""
    for where, client in store.connection.sentinel_clients(settings, timeout=5):
        try:
            address = client.sentinel_get_master_addr_by_name(service)
        except redis.RedisError as exc:
            problems.append(f"{where} does not answer ({type(exc).__name__}: {exc})")
            continue
        finally:
            client.close()
        if not address:
            problems.append(f"{where} does not watch {service!r}")
            continue
        host, port = cast(tuple[Any, Any], address)
        named[where] = f"{_text(host)}:{port}"
    total = len(settings.redis_sentinels)
    primaries = set(named.values())
    if len(primaries) > 1:
        found = ", ".join(f"{w} says {p}" for w, p in named.items())
        return Check("sentinels", Level.FAIL, f"the Sentinels disagree on the primary: {found}")
    if len(named) <= total // 2:
        return Check(
            "sentinels",
            Level.FAIL,
            f"{len(named)} of {total} Sentinels name a primary: no majority, so no failover; "
            + "; ".join(problems),
        )
    message = f"{len(named)} of {total} Sentinels agree: the primary of {service!r} is " + next(
        iter(primaries)
    )
    if problems:
        return Check("sentinels", Level.WARN, message + "; " + "; ".join(problems))
    return Check("sentinels", Level.OK, message)


def _config(conn: redis.Redis, *names: str) -> dict[str, str]:
    """``CONFIG GET`` one name at a time (Redis before 7 takes a single pattern)."""
    found: dict[str, str] = {}
    for name in names:
        answer = cast(Mapping[Any, Any], conn.config_get(name))
        for key, value in answer.items():
            found[_text(key)] = _text(value)
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: Used memory past this share of ``maxmemory`` is worth a warning: a full Redis refuses pauses.
MEMORY_WARN_SHARE = 0.8


def check_memory(conn: redis.Redis) -> Check:
    """``maxmemory-policy noeviction``, and used memory against ``maxmemory``.

    With an eviction policy, a full Redis silently deletes keys to make room, and pending
    approvals, their histories and queued jobs are keys like any other. With ``noeviction``
    a full Redis refuses new writes instead: new pauses fail, loudly, and nothing is lost.
    """
    info = conn.info("memory")
    policy = _text(info.get("maxmemory_policy", "unknown"))
    used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
    usage = (
        f"{_size(used)} used of maxmemory {_size(limit)} ({used / limit:.0%})"
        if limit
        else (f"{_size(used)} used, no maxmemory (Redis grows until the machine runs out)")
    )
    if policy != "noeviction":
        return Check(
            "memory",
            Level.FAIL,
            f"maxmemory-policy is {policy}: when Redis is full it deletes keys to make room, "
            "pending approvals and their histories included, without a word. Set "
            f"maxmemory-policy noeviction (a full Redis then refuses new pauses instead); {usage}",
        )
    if limit and used >= MEMORY_WARN_SHARE * limit:
        return Check(
            "memory", Level.WARN, f"{usage}: when it is full, new pauses fail (noeviction)"
        )
    return Check("memory", Level.OK, f"{usage}; maxmemory-policy noeviction")


def _size(count: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def check_retention(conn: redis.Redis, settings: Settings) -> Check:
    """What finished approvals Redis holds and what the sweep frees now; what has been due
    for an hour means no worker is sweeping."""
    now = time.time()
    counts = store.retention.retention_counts(
        conn, retention.history_cutoff(settings, now), retention.approval_cutoff(settings, now)
    )
    late = store.retention.retention_counts(
        conn,
        retention.history_cutoff(settings, now - OVERDUE_RETENTION),
        retention.approval_cutoff(settings, now - OVERDUE_RETENTION),
    )
    where = "archived, then removed" if settings.archive_url else "removed (no archive)"
    message = (
        f"{counts.approvals_held} finished approvals held, {counts.histories_held} with their "
        f"history; due now: {counts.histories_due} histories and {counts.approvals_due} "
        f"approvals, to be {where}"
    )
    if late.histories_due or late.approvals_due:
        return Check(
            "retention",
            Level.WARN,
            f"{message}; some have been due for over an hour: no worker is sweeping them "
            "(start `approvals worker`)",
        )
    return Check("retention", Level.OK, message)


#: Due this long ago and still in Redis: no worker runs the retention sweep.
OVERDUE_RETENTION = 3600.0


def check_archive(settings: Settings) -> Check:
    """The archive answers at ``APPROVALS_ARCHIVE_URL`` with this version's schema (Alembic's
    head); otherwise nothing leaves Redis, which grows until it is full."""
    from approvals.ops import archive

    if not settings.archive_url:
        return Check("archive", Level.OK, "no archive configured")
    problem = archive.schema_problem(settings.archive_url)
    if problem is not None:
        return Check(
            "archive", Level.FAIL, f"{problem}. Until then finished approvals stay in Redis"
        )
    where = safe_url(settings.archive_url, hide_query=True)
    return Check("archive", Level.OK, f"{where} at schema {archive.head_revision()}")


# ---------------------------------------------------------------------------------- RQ


def check_queue(conn: redis.Redis, settings: Settings) -> Check:
    """Jobs waiting, scheduled and failed, and deadlines: failed jobs are cards or updates
    that never happened; a deadline long overdue means no worker is sweeping them."""
    jobs = queue.get_queue(conn, settings)
    waiting = jobs.count
    scheduled = jobs.scheduled_job_registry.get_job_count(cleanup=False)
    failed = jobs.failed_job_registry.get_job_count(cleanup=False)
    ahead, overdue = store.deadlines.deadline_counts(conn, time.time(), deadlines.OVERDUE_SECONDS)
    counts = (
        f"queue {settings.queue}: {waiting} waiting, {scheduled} scheduled (retries), "
        f"{failed} failed; {ahead} deadlines ahead (expiries, warnings)"
    )
    problems = []
    if failed:
        problems.append(
            "each failed job is a card post, expiry or Slack update that did not happen "
            "after its retries (RQ keeps them in its FailedJobRegistry for a year)"
        )
    if overdue:
        problems.append(
            f"{overdue} deadlines are more than {deadlines.OVERDUE_SECONDS:.0f} s overdue: "
            "no worker is sweeping them (start `approvals worker`)"
        )
    if problems:
        return Check("queue", Level.WARN, f"{counts}; " + "; ".join(problems))
    return Check("queue", Level.OK, counts)


def check_workers(conn: redis.Redis, settings: Settings) -> Check:
    """At least one RQ worker listens on the queue; without one nothing is posted or resumed."""
    workers = Worker.all(queue=queue.get_queue(conn, settings), serializer=JSONSerializer)
    if not workers:
        return Check(
            "workers",
            Level.WARN,
            f"no worker listens on queue {settings.queue}: cards are not posted and decided "
            "approvals do not resume. Start `approvals worker` (two or more in production)",
        )
    names = ", ".join(sorted(f"{w.name} ({w.hostname}, {w.get_state()})" for w in workers))
    plural = "s" if len(workers) > 1 else ""
    return Check("workers", Level.OK, f"{len(workers)} worker{plural} on {settings.queue}: {names}")


def check_webhooks(conn: redis.Redis, settings: Settings) -> Check:
    """No webhook receiver has failed every delivery for a day (nothing waits on them, so
    this is the only place a dead receiver shows)."""
    from approvals.proof import webhooks

    if not settings.webhook_urls:
        return Check("webhooks", Level.OK, "no webhook receivers configured")
    failing = webhooks.failing_receivers(conn, webhooks.FAILING_REPORTED_AFTER)
    if failing:
        urls = ", ".join(safe_url(url, hide_query=True) for url in sorted(failing))
        return Check("webhooks", Level.WARN, f"failing for more than a day: {urls}")
    return Check("webhooks", Level.OK, f"{len(settings.webhook_urls)} receiver(s) answering")


def check_scheduler(conn: redis.Redis, settings: Settings) -> Check:
    """Some worker's RQ scheduler holds the queue's scheduler lock (``queue.scheduler``)."""
    key, holder, meta = queue.scheduler(conn, settings)
    if holder is None:
        return Check(
            "scheduler",
            Level.WARN,
            f"no RQ scheduler holds {key}: Slack retries do not fire. Every "
            "`approvals worker` runs one, and takes a free lock within "
            f"APPROVALS_MAINTENANCE_INTERVAL ({settings.maintenance_interval} s)",
        )
    name = holder
    where = (
        f" (pid {meta['pid']} on {meta['hostname']})"
        if "pid" in meta and "hostname" in meta
        else ""
    )
    return Check("scheduler", Level.OK, f"RQ scheduler {name}{where} holds {key}")


def check_models(conn: redis.Redis, settings: Settings) -> Check:
    """The models pending approvals resume on resolve in this environment and keep a
    conversation (llm raises ``ConversationNotSupported`` for a history with tool calls)."""
    waiting = store.pending.pending_models(conn)
    if not waiting:
        return Check("models", Level.OK, "no pending approval waits on a model")
    try:
        plugins.load_plugins(settings)
    except ConfigError as exc:
        return Check("models", Level.FAIL, str(exc))
    problems = []
    for (model_id, asynchronous), count in sorted(waiting.items()):
        kind = "async model" if asynchronous else "model"
        try:
            model: Any = (
                plugins.resolve_async_model(model_id)
                if asynchronous
                else plugins.resolve_model(model_id)
            )
        except ResumeError:
            problems.append(f"{kind} {model_id!r} ({count} waiting) is not installed here")
            continue
        if not getattr(model, "supports_conversation", True):
            problems.append(f"{kind} {model_id!r} ({count} waiting) cannot continue a conversation")
    if problems:
        return Check(
            "models",
            Level.FAIL,
            "; ".join(problems) + ": their resumes will fail once decided (install the model's "
            "llm plugin in the workers' environment, or list it in APPROVALS_LLM_PLUGINS)",
        )
    names = ", ".join(f"{m}{' (async)' if a else ''}" for m, a in sorted(waiting))
    return Check("models", Level.OK, f"pending approvals resume on {names}: all found here")


# ---------------------------------------------------------------------------------- Slack


#: slack_sdk logs every failed attempt; the check's one line says what they came to.
_QUIET = logging.getLogger("approvals.ops.doctor.slack")
_QUIET.setLevel(logging.CRITICAL + 1)


def slack_auth(settings: Settings) -> Auth:
    """``auth.test``'s answer, or why there is none (one call, shared by the Slack checks)."""
    try:
        client = slack.web_client(settings, logger=_QUIET)
    except ConfigError:
        return "SLACK_BOT_TOKEN is not set"
    try:
        return client.auth_test()
    except SlackApiError as exc:
        error = str(exc.response.get("error"))
        meaning = _TOKEN_ERRORS.get(error, "see auth.test in Slack's API docs")
        return f"Slack refused the token: {error} ({meaning})"
    except (SlackClientError, OSError) as exc:
        return _unreachable_slack(settings, exc)


def _unreachable_slack(settings: Settings, exc: Exception) -> str:
    return (
        f"cannot reach Slack at {safe_url(settings.slack_api_url)} ({exc}): check the network "
        "(a proxy?) and SLACK_API_URL"
    )


_TOKEN_ERRORS = {
    "invalid_auth": "SLACK_BOT_TOKEN is wrong, or belongs to another workspace",
    "not_authed": "no token reached Slack",
    "token_revoked": "the token was revoked; reinstall the app and copy the new one",
    "account_inactive": "the app was uninstalled or its workspace deleted",
    "token_expired": "the token expired; this app does not use token rotation",
}


def check_socket_mode(settings: Settings) -> Check:
    """Slack opens a Socket Mode connection for ``SLACK_APP_TOKEN`` (``apps.connections.open``
    answers with a URL, which is left unused: it expires on its own)."""
    client = WebClient(
        token=settings.slack_app_token, base_url=settings.slack_api_url, timeout=10, logger=_QUIET
    )
    try:
        client.apps_connections_open(app_token=settings.slack_app_token or "")
    except SlackApiError as exc:
        error = str(exc.response.get("error"))
        return Check(
            "socket",
            Level.FAIL,
            f"Slack refused SLACK_APP_TOKEN: {error} (it must be an app-level token, xapp-..., "
            "with connections:write, from the app's Basic Information page)",
        )
    except (SlackClientError, OSError) as exc:
        return Check("socket", Level.FAIL, _unreachable_slack(settings, exc))
    return Check("socket", Level.OK, "SLACK_APP_TOKEN opens Socket Mode connections")


def check_slack(auth: Auth, settings: Settings) -> Check:
    """``auth.test`` succeeded: the bot token is valid for a workspace."""
    if isinstance(auth, str):
        return Check("slack", Level.FAIL, auth)
    return Check(
        "slack",
        Level.OK,
        f"authenticated as {auth.get('user')} ({auth.get('user_id')}) in {auth.get('team')} "
        f"at {settings.slack_api_url}",
    )


def check_scopes(auth: Auth, settings: Settings) -> Check:
    """The token has ``chat:write`` and ``commands`` (and ``usergroups:read`` for groups,
    ``channels:read`` for escalation channels).

    Slack lists a token's scopes in the ``X-OAuth-Scopes`` header of every answer; the sync
    ``WebClient`` hands headers over as a plain dict keeping the server's spelling (Slack
    sends them in lower case), so the name is matched without regard to case.
    """
    if isinstance(auth, str):
        return _not_checked("scopes", "Slack")
    header = next((v for k, v in auth.headers.items() if k.lower() == "x-oauth-scopes"), None)
    if header is None:
        return Check("scopes", Level.WARN, "Slack did not list the token's scopes (X-OAuth-Scopes)")
    granted = {s.strip() for s in str(header).split(",") if s.strip()}
    needed = list(REQUIRED_SCOPES) + ([GROUP_SCOPE] if settings.approver_groups else [])
    if any(not target.startswith("S") for target in settings.escalate_to):
        needed.append(CHANNEL_MEMBERS_SCOPE)
    missing = [s for s in needed if s not in granted]
    if missing:
        return Check(
            "scopes",
            Level.FAIL,
            f"the token lacks {', '.join(missing)} ({_why_scopes(missing)}). Add them under "
            "OAuth & Permissions (or in manifest.yml) and reinstall the app",
        )
    return Check("scopes", Level.OK, f"the token has {', '.join(needed)}")


def _why_scopes(missing: list[str]) -> str:
    why = {
        "chat:write": "cards cannot be posted",
        "commands": "/agent-pending does not work",
        GROUP_SCOPE: "APPROVER_GROUPS cannot be resolved, so nobody gets in through a group",
        CHANNEL_MEMBERS_SCOPE: "members of APPROVALS_ESCALATE_TO's channels cannot be looked "
        "up, so nobody gets in through an escalation channel",
    }
    return "; ".join(f"without {s}, {why[s]}" for s in missing)


def check_channel(settings: Settings, auth: Auth | None) -> Check:
    """``APPROVALS_CHANNEL`` is set and, when Slack lets us look, the bot is in it.

    ``conversations.info`` needs ``channels:read``, which an app installed before escalation
    channels may not have, so a ``missing_scope`` answer means "cannot verify", not a fault.
    """
    channel = settings.channel
    if not channel:
        return Check(
            "channel",
            Level.WARN,
            "APPROVALS_CHANNEL is not set: an agent's first pause fails unless its gate or "
            "run_agent names channel=",
        )
    if auth is None or isinstance(auth, str):
        return Check(
            "channel", Level.WARN, f"{channel}: not checked, because the Slack check failed"
        )
    try:
        info = slack.web_client(settings).conversations_info(channel=channel)
    except SlackApiError as exc:
        error = str(exc.response.get("error"))
        if error == "missing_scope":
            return Check(
                "channel",
                Level.OK,
                f"{channel}: cannot verify (the app has no channels:read scope, and needs none); "
                "make sure the bot was invited to it",
            )
        return Check(
            "channel", Level.FAIL, f"{channel}: Slack answered {error}; {_why_channel(error)}"
        )
    except (SlackClientError, OSError) as exc:
        return Check("channel", Level.FAIL, f"{channel}: cannot ask Slack: {exc}")
    return _channel_state(channel, cast(dict[str, Any], info.get("channel") or {}))


def _why_channel(error: str) -> str:
    if error == "channel_not_found":
        return "check the id (C0..., at the bottom of the channel's details) and invite the bot"
    return "cards may not reach it"


def _channel_state(channel: str, info: dict[str, Any]) -> Check:
    name = f"#{info['name']} ({channel})" if info.get("name") else channel
    if info.get("is_archived"):
        return Check("channel", Level.FAIL, f"{name} is archived: cards cannot be posted there")
    if info.get("is_member") is False:
        return Check(
            "channel",
            Level.FAIL,
            f"the bot is not in {name}: without chat:write.public it cannot post there. "
            "Invite it with /invite @approvals",
        )
    return Check("channel", Level.OK, f"{name}: the bot is a member")


# ---------------------------------------------------------------------------------- output


def worst(checks: list[Check]) -> Level:
    """The most serious level among ``checks``."""
    levels = {c.level for c in checks}
    return next((lv for lv in (Level.FAIL, Level.WARN) if lv in levels), Level.OK)


def exit_code(checks: list[Check]) -> int:
    """0 when all is well, 1 when a check failed, 2 when there are only warnings."""
    return {Level.OK: 0, Level.FAIL: 1, Level.WARN: 2}[worst(checks)]


def render_text(checks: list[Check]) -> str:
    """One line per check: ``ok``, ``warn`` or ``FAIL``, the check's name, and the message."""
    label = {Level.OK: "ok", Level.WARN: "warn", Level.FAIL: "FAIL"}
    return "\n".join(f"{label[c.level]:<4}  {c.name:<11} {c.message}" for c in checks)


def render_json(checks: list[Check]) -> str:
    """``{"level": ..., "checks": [{"name", "level", "message"}, ...]}`` on one line."""
    return json.dumps(
        {
            "level": worst(checks).value,
            "checks": [asdict(c) | {"level": c.level.value} for c in checks],
        }
    )
