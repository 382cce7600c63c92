"""The ``approvals`` command: run the bot and workers, and decide from a terminal.

Each command is a thin wrapper over the library; decisions go through ``review.decide``, the
same function the Slack buttons use.
"""

from __future__ import annotations

import datetime
import functools
import getpass
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click
import redis

from approvals import store
from approvals.config import Settings
from approvals.decisions import grants, policy
from approvals.decisions.review import CLI_ACTOR_PREFIX, decide, retry
from approvals.dev.cli import demo_run, dev_run
from approvals.errors import ApprovalsError
from approvals.models import Approval, DecisionKind
from approvals.ops import lookup
from approvals.slack.cards import decision_line, plain_text
from approvals.store import queue

F = TypeVar("F", bound=Callable[..., Any])


def pass_settings(func: F) -> F:
    """Read settings from the environment; any ApprovalsError, and a Redis that is down or
    refuses, becomes one line (what failed, where, what to do) and exit 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            settings = Settings.from_env()
        except ApprovalsError as exc:
            raise click.ClickException(str(exc)) from None
        try:
            return func(settings, *args, **kwargs)
        except ApprovalsError as exc:
            raise click.ClickException(str(exc)) from None
        except redis.RedisError as exc:
            from approvals.ops.doctor import redis_problem

            raise click.ClickException(redis_problem(settings, exc)) from None

    return wrapper  # type: ignore[return-value]


def _processes_option(help: str) -> Callable[[F], F]:
    """``--processes N`` (1 to 64), for the commands that can run supervised copies."""
    return click.option(
        "--processes", default=1, show_default=True, type=click.IntRange(1, 64), help=help
    )


@click.group()
@click.version_option(package_name="approvals")
def cli() -> None:
    """Approve, reject or edit what llm agents are about to do, from Slack."""


@cli.command(name="bot")
@click.option("--port", default=3000, show_default=True, help="HTTP port (0 picks a free one).")
@click.option("--host", default="0.0.0.0", show_default=True, help="Interface to listen on.")
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="HTTP mode: gunicorn worker processes (default: one per core).",
)
@click.option(
    "--threads",
    default=4,
    show_default=True,
    type=click.IntRange(1, 256),
    help="HTTP mode: requests each worker process answers at once.",
)
@click.option(
    "--timeout",
    default=30,
    show_default=True,
    type=click.IntRange(1, 3600),
    help="HTTP mode: seconds before a silent worker is replaced, and the most SIGTERM waits "
    "for requests in flight and the work they started.",
)
@pass_settings
def bot_run(
    settings: Settings, port: int, host: str, workers: int | None, threads: int, timeout: int
) -> None:
    """Run the Slack app: Socket Mode if SLACK_APP_TOKEN is set, else HTTP at /slack/events."""
    import os

    from approvals.bot.app import check_settings
    from approvals.bot.server import serve_http, serve_socket_mode
    from approvals.ops.doctor import start_problem
    from approvals.ops.logs import configure_logging

    configure_logging(settings)
    check_settings(settings)
    problem = start_problem(settings)
    if problem is not None:  # said once here, not by each gunicorn process as it dies
        raise click.ClickException(f"the bot cannot start: {problem}")
    if settings.slack_app_token:
        if workers is not None and workers > 1:
            raise click.UsageError("--workers is for HTTP mode; Socket Mode runs one process")
        serve_socket_mode(settings, settings.slack_app_token)
    else:
        workers = workers or os.cpu_count() or 1
        serve_http(settings, host, port, workers, threads, timeout)


@cli.command(name="worker")
@click.option("--burst", is_flag=True, help="Stop when the queue is empty.")
@click.option("--name", default=None, help="Worker name (default: RQ's).")
@_processes_option("Run this many workers and restart any that dies.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics at /metrics on this port (0 picks a free one); one "
    "server for all --processes, since every number is read from Redis.",
)
@pass_settings
def worker_run(
    settings: Settings, burst: bool, name: str | None, processes: int, metrics_port: int | None
) -> None:
    """Run an RQ worker that posts cards and resumes decided approvals."""
    from approvals.ops import metrics
    from approvals.worker.main import run_pool, run_worker

    with store.connection.connect(
        settings
    ) as conn:  # Redis down: one line now, before loading tools
        conn.ping()
    if metrics_port is not None:
        port = metrics.serve(settings, metrics_port)
        click.echo(f"approvals worker metrics at http://0.0.0.0:{port}/metrics")
    if processes > 1:
        run_pool(settings, processes)
    else:
        run_worker(settings, burst=burst, name=name)


@cli.command(name="pending")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--limit", default=100, show_default=True)
@pass_settings
def pending_list(settings: Settings, as_json: bool, limit: int) -> None:
    """List the approvals waiting for a decision, newest first."""
    approvals = store.pending.pending(store.connection.connect(settings), limit=limit)
    if not approvals and not as_json:
        click.echo("Nothing is waiting for approval.")
    for approval in approvals:
        if as_json:
            click.echo(json.dumps(_summary(approval)))
        else:
            age = _age(time.time() - approval.created_at)
            args = json.dumps(approval.shown_arguments, ensure_ascii=False)
            click.echo(f"{approval.id}  {age:>5}  {approval.agent}  {approval.tool_name} {args}")


@cli.command(name="approve")
@click.argument("approval_id")
@pass_settings
def approve_one(settings: Settings, approval_id: str) -> None:
    """Approve a waiting call: the worker runs it and resumes the agent."""
    _decide(settings, approval_id, DecisionKind.APPROVE, None)


@cli.command(name="reject")
@click.argument("approval_id")
@click.option("--reason", default=None, help="Told to the model, so the agent can re-plan.")
@pass_settings
def reject_one(settings: Settings, approval_id: str, reason: str | None) -> None:
    """Reject a waiting call: the agent is told and resumes without running it."""
    _decide(settings, approval_id, DecisionKind.REJECT, reason)


@cli.command(name="retry")
@click.argument("approval_id")
@pass_settings
def retry_one(settings: Settings, approval_id: str) -> None:
    """Run an interrupted approval's tool again (only if running it twice is safe)."""
    conn = store.connection.connect(settings)
    retry(conn, settings, approval_id, CLI_ACTOR_PREFIX + getpass.getuser())
    queue.enqueue_announce(conn, settings, approval_id)
    click.echo(f"{approval_id}: retried; a worker runs it again.")


@cli.command(name="show")
@click.argument("approval_id")
@click.option(
    "--verify",
    is_flag=True,
    help="Check the audit chain and its receipts' signatures; exit 1 if not.",
)
@pass_settings
def show_one(settings: Settings, approval_id: str, verify: bool) -> None:
    """Print an approval's record and its audit trail (from Redis, else the archive)."""
    conn = store.connection.connect(settings)
    if verify:
        _verify_trail(settings, conn, approval_id)
    approval, trail = lookup.find_approval(conn, settings, approval_id)
    click.echo(json.dumps({**_summary(approval), **approval.record()}, indent=2, default=str))
    for event in trail:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(event.pop("at", "0"))))
        click.echo(
            f"{at}  {event.pop('event', '?'):<16} {event.pop('actor', '?'):<16} "
            f"{json.dumps(event, ensure_ascii=False) if event else ''}"
        )


@cli.command(name="result")
@click.argument("some_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="The outcome as one JSON object.")
@pass_settings
def result_show(settings: Settings, some_id: str, as_json: bool) -> None:
    """Print how a run ended, or where it is now (ID: a pause id or a run id; from Redis,
    else the archive)."""
    outcome = lookup.find_outcome(store.connection.connect(settings), settings, some_id)
    if as_json:
        click.echo(json.dumps(outcome.to_dict(), ensure_ascii=False))
        return
    click.echo(f"run {outcome.run_id}: {outcome.status}")
    for line in (outcome.text, outcome.reason and f"reason: {outcome.reason}"):
        if line:
            click.echo(line)
    if outcome.stopped_by:
        click.echo(f"stopped by {outcome.stopped_by}")
    for call in outcome.calls:
        decided = call.decision
        who = f"{decided.kind.value} by {decided.actor_name or decided.actor}" if decided else ""
        click.echo(f"  {call.pause_id}  {call.tool} {json.dumps(call.arguments)}  {who}")


@cli.group(name="audit")
def audit_group() -> None:
    """Read the audit trails of every approval."""


@audit_group.command(name="export")
@click.option(
    "--since",
    default="30d",
    show_default=True,
    help="Events from this time on: a UTC date or time (2026-11-01, 2026-11-01T12:00) or an "
    "age (90m, 12h, 30d).",
)
@click.option(
    "--format",
    "output",
    type=click.Choice(["ndjson"]),
    default="ndjson",
    show_default=True,
    help="One JSON object per event and line, oldest first.",
)
@pass_settings
def audit_export(settings: Settings, since: str, output: str) -> None:
    """Print the audit events of every approval, from Redis and the archive."""
    start = _since(since, time.time())
    for approval_id, event in lookup.audit_events(
        store.connection.connect(settings), settings, start
    ):
        click.echo(json.dumps({"approval_id": approval_id, **event}, ensure_ascii=False))


def _since(text: str, now: float) -> float:
    """``--since`` as epoch seconds: an age, epoch seconds, or an ISO-8601 time (UTC when
    it names no zone)."""
    units = {"m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isdigit():
        return now - int(text[:-1]) * units[text[-1]]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither a date, a time, epoch seconds nor an age like 30d"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


@cli.group(name="retention")
def retention_group() -> None:
    """How long finished approvals stay in Redis (see docs/operations.md)."""


@retention_group.command(name="backfill")
@pass_settings
def retention_backfill(settings: Settings) -> None:
    """Note the finished approvals an older version left in Redis, so workers remove them
    when due. Run it once after upgrading; running it again changes nothing."""
    from approvals.ops import retention

    noted = retention.backfill(store.connection.connect(settings))
    click.echo(f"{noted} finished approvals noted; workers remove them when due")


@cli.group(name="archive")
def archive_group() -> None:
    """The archive of finished approvals (APPROVALS_ARCHIVE_URL)."""


@archive_group.command(name="upgrade")
@pass_settings
def archive_upgrade(settings: Settings) -> None:
    """Create the archive's tables, or migrate them to this version's schema."""
    from approvals.config import safe_url
    from approvals.ops import archive

    if not settings.archive_url:
        raise click.ClickException("APPROVALS_ARCHIVE_URL is not set: there is no archive")
    revision = archive.upgrade(settings.archive_url)
    click.echo(f"archive at {safe_url(settings.archive_url)}: schema {revision}")


def _verify_trail(settings: Settings, conn: Any, approval_id: str) -> None:
    """``show --verify``: the verdict first, then the record as usual (exit 1 when broken)."""
    from approvals.proof import audit, keys

    # An unknown id is refused, not "0 entries, fine"; an archived one is checked there.
    lines = lookup.find_audit_lines(conn, settings, approval_id)
    check = audit.check_lines(approval_id, lines, keys.jwks(settings))
    problems = list(check.problems)
    if store.owed.owing(conn, [approval_id]):
        problems.append(
            "its decision is recorded, but not yet what follows it (the audit entry, the "
            "receipt): a worker carries that out within a minute"
        )
    for problem in problems:
        click.echo(f"BROKEN  {problem}", err=True)
    if problems:
        raise click.ClickException(f"the audit trail of {approval_id} does not verify")
    click.echo(
        f"verified: {check.entries} audit entries chained, {check.receipts} receipt(s) signed"
    )


def _decide(settings: Settings, approval_id: str, kind: DecisionKind, reason: str | None) -> None:
    from approvals.proof import keys

    keys.public_keys(settings)  # an unreadable signing key stops here, before deciding
    conn = store.connection.connect(settings)
    approval = decide(
        conn, settings, approval_id, kind, CLI_ACTOR_PREFIX + getpass.getuser(), reason=reason
    )
    queue.enqueue_announce(conn, settings, approval_id)
    click.echo(f"{approval_id}: {plain_text(decision_line(approval))}")


def _summary(approval: Approval) -> dict[str, Any]:
    return {
        "id": approval.id,
        "status": approval.status.value,
        "agent": approval.agent,
        "tool": approval.tool_name,
        "arguments": approval.arguments,
        "created_at": approval.created_at,
        "card_ts": approval.card_ts,
    }


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


cli.add_command(dev_run)
cli.add_command(demo_run)


@cli.group(name="keys")
def keys_group() -> None:
    """Manage the Ed25519 keys receipts are signed with (APPROVALS_SIGNING_KEY)."""


@keys_group.command(name="generate")
@click.argument("path", type=click.Path(dir_okay=False))
@pass_settings
def keys_generate(settings: Settings, path: str) -> None:
    """Write a new private key to PATH (PEM, PKCS#8, mode 600) and print its kid."""
    from approvals.proof import keys

    click.echo(keys.generate_key(path))


@keys_group.command(name="rotate")
@click.argument("new_path", type=click.Path(dir_okay=False))
@pass_settings
def keys_rotate(settings: Settings, new_path: str) -> None:
    """Start signing with a new key at NEW_PATH; the current one keeps verifying.

    Writes the current key's public half next to it (``<key>.pub.pem``) and prints the
    settings to deploy: remove that file from APPROVALS_VERIFY_KEYS to retire the old key,
    once its last receipts have expired.
    """
    from approvals.proof import keys

    settings.require("APPROVALS_SIGNING_KEY")
    assert settings.signing_key is not None
    public = settings.signing_key + ".pub.pem"
    old_kid = keys.write_public_key(settings.signing_key, public)
    new_kid = keys.generate_key(new_path)
    verify = ",".join(dict.fromkeys([public, *settings.verify_keys]))
    click.echo(f"new key {new_kid}; {old_kid} still verifies. Deploy to the bot and the CLI:")
    click.echo(f"APPROVALS_SIGNING_KEY={new_path}")
    click.echo(f"APPROVALS_VERIFY_KEYS={verify}")


@keys_group.command(name="jwks")
@pass_settings
def keys_jwks(settings: Settings) -> None:
    """Print the public keys as a JWKS document (what /.well-known/jwks.json serves)."""
    from approvals.proof import keys

    click.echo(json.dumps(keys.jwks(settings), indent=2))


@cli.group(name="receipt")
def receipt_group() -> None:
    """Inspect the signed receipts of released calls."""


@receipt_group.command(name="verify")
@click.argument("token")
@click.option("--args", "arguments", required=True, help="The call's arguments, as JSON.")
@click.option("--tool", default=None, help="The tool being called (default: the one it names).")
@click.option("--require-person", is_flag=True, help="Refuse a call a grant or rule released.")
@click.option(
    "--jwks",
    "jwks_file",
    type=click.File(),
    default=None,
    help="A JWKS file to check against (default: this deployment's keys).",
)
@pass_settings
def receipt_verify(
    settings: Settings,
    token: str,
    arguments: str,
    tool: str | None,
    require_person: bool,
    jwks_file: Any,
) -> None:
    """Explain a receipt and check it against ARGS; exit 1, with the reason, if it fails."""
    from approvals.proof import keys, receipts

    claims = receipts.unverified_claims(token)
    for name, value in claims.items():
        click.echo(f"{name:<13} {json.dumps(value, ensure_ascii=False)}")
    try:
        parsed = json.loads(arguments)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--args") from None
    jwks = json.load(jwks_file) if jwks_file is not None else keys.jwks(settings)
    receipts.verify_receipt(
        token,
        tool=tool or str(claims.get("tool", "")),
        arguments=parsed,
        keys=jwks,
        require_person=require_person,
    )
    click.echo("valid: signed by a known key, for these arguments, and not expired")


@cli.command(name="api")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8000, show_default=True, help="HTTP port (0 picks a free one).")
@pass_settings
def api_run(settings: Settings, host: str, port: int) -> None:
    """Run the HTTP API any agent asks through (OpenAPI at /v1/openapi.json)."""
    from approvals.api.server import serve
    from approvals.ops.logs import configure_logging

    configure_logging(settings)
    serve(settings, host, port)


@cli.group(name="tokens")
def tokens_group() -> None:
    """Bearer tokens for the HTTP API, one per agent."""


@tokens_group.command(name="create")
@click.option("--agent", required=True, help="The agent this token asks for.")
@click.option("--tools", default="", help="Comma-separated tools it may ask for (default: any).")
@pass_settings
def tokens_create(settings: Settings, agent: str, tools: str) -> None:
    """Create a token; it is printed once, alone on the last line."""
    from approvals.proof.tokens import create_token

    names = tuple(name.strip() for name in tools.split(",") if name.strip())
    token, secret = create_token(store.connection.connect(settings), agent, names)
    click.echo(f"token {token.id} for agent {agent!r} (store it now: it is not shown again)")
    click.echo(secret)


@cli.command(name="mcp")
@pass_settings
def mcp_run(settings: Settings) -> None:
    """Serve the MCP tools request_approval and list_pending over stdio (through the API at
    APPROVALS_API_URL, as APPROVALS_API_TOKEN's agent)."""
    from approvals.api.mcp_server import build_server

    settings.require("APPROVALS_API_TOKEN")
    build_server(settings).run()


@cli.group(name="hook")
def hook_group() -> None:
    """Hooks of coding agents that ask people in Slack through `approvals api`."""


@hook_group.command(name="claude-code")
@click.option(
    "--tools",
    default="Bash|Write|Edit|MultiEdit",
    show_default=True,
    help="Regex of the tool names that need a person (others pass).",
)
@click.option("--command-pattern", default=None, help="Regex: only Bash commands matching it ask.")
@click.option(
    "--timeout",
    default=300.0,
    show_default=True,
    type=click.FloatRange(1, 86400),
    help="Seconds to wait for a decision; then the call is denied.",
)
@click.option(
    "--project-writes-pass",
    is_flag=True,
    help="Writes inside the session's working directory pass; only writes outside it ask.",
)
def hook_claude_code(
    tools: str, command_pattern: str | None, timeout: float, project_writes_pass: bool
) -> None:
    """Claude Code PreToolUse hook: reads the call on stdin, prints allow or deny (never allows
    on error or timeout). As a PostToolUse (or PostToolUseFailure) hook, reports what an
    approved call did to its card's thread; it never blocks the agent (exit 0, problems on
    stderr). Reads APPROVALS_API_URL and APPROVALS_API_TOKEN."""
    import re
    import sys

    from approvals.api.claude_code import HookRules, failure_output, run_hook

    raw = sys.stdin.read()
    try:
        rules = HookRules(
            re.compile(tools),
            re.compile(command_pattern) if command_pattern else None,
            project_writes_pass,
        )
        output = run_hook(raw, Settings.from_env(), rules, timeout)
    except Exception as exc:  # a bad option or setting: deny, never allow
        output = failure_output(raw, str(exc))
    if output:
        click.echo(output)


@tokens_group.command(name="list")
@pass_settings
def tokens_list(settings: Settings) -> None:
    """List tokens: id, agent, tools, created (never the tokens themselves)."""
    from approvals.proof.tokens import list_tokens

    for token in list_tokens(store.connection.connect(settings)):
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(token.created_at))
        click.echo(f"{token.id}  {token.agent}  {','.join(token.tools) or '*'}  {created}")


@tokens_group.command(name="revoke")
@click.argument("token_id")
@pass_settings
def tokens_revoke(settings: Settings, token_id: str) -> None:
    """Revoke a token by its id (from ``approvals tokens list``)."""
    from approvals.proof.tokens import revoke_token

    if not revoke_token(store.connection.connect(settings), token_id):
        raise click.ClickException(f"no token with id {token_id!r}")
    click.echo(f"token {token_id} revoked")


@cli.group(name="grants")
def grants_group() -> None:
    """List and revoke the grants approvers made from cards."""


@grants_group.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_settings
def grants_list(settings: Settings, as_json: bool) -> None:
    """Every grant, newest first, live, expired or revoked."""
    now = time.time()
    for grant in grants.list_grants(store.connection.connect(settings)):
        if as_json:
            click.echo(json.dumps(grants.to_dict(grant)))
            continue
        state = "revoked" if grant.revoked_at else ("live" if grant.live(now) else "expired")
        until = (
            f" until {time.strftime('%Y-%m-%d %H:%M', time.localtime(grant.expires_at))}"
            if (grant.expires_at)
            else ""
        )
        click.echo(
            f"{grant.id}  {state}{until}  {grant.scope.label}  {grant.tool}  agent={grant.agent}"
            f"  by={grant.created_by}  uses={grant.uses}"
        )


@grants_group.command(name="revoke")
@click.argument("grant_id", metavar="ID")
@pass_settings
def grants_revoke(settings: Settings, grant_id: str) -> None:
    """Revoke a grant: calls it covered wait for a person again."""
    actor = CLI_ACTOR_PREFIX + getpass.getuser()
    grants.revoke(store.connection.connect(settings), settings, grant_id, actor, is_operator=True)
    click.echo(f"revoked {grant_id}")


@cli.group(name="policy")
def policy_group() -> None:
    """Check the policy rules of APPROVALS_POLICY."""


@policy_group.command(name="test")
@click.option("--agent", required=True, help="The agent name the call comes from.")
@click.option("--tool", required=True, help="The tool's name.")
@click.option("--args", "arguments", default="{}", show_default=True, help="Arguments as JSON.")
@click.option("--requester", default="", help="The Slack user id the agent acts for.")
@click.option("--channel", default=None, help="The card's channel (default APPROVALS_CHANNEL).")
@click.option("--file", "path", default=None, help="A policy file (default APPROVALS_POLICY).")
@pass_settings
def policy_test(
    settings: Settings,
    agent: str,
    tool: str,
    arguments: str,
    requester: str,
    channel: str | None,
    path: str | None,
) -> None:
    """Say which rule would decide a call, and why each rule before it did not."""
    try:
        args = json.loads(arguments)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--args") from None
    if not isinstance(args, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--args")
    path = path or settings.policy_path
    if not path:
        raise click.ClickException("no policy: set APPROVALS_POLICY or pass --file")
    call = policy.Call(agent, tool, args, requester, channel or settings.channel or "")
    verdict = policy.evaluate(policy.load(path), call)
    for line in verdict.trace:
        click.echo(line)
    rule = f" (rule {verdict.rule_id})" if verdict.rule_id else ""
    click.echo(f"=> {verdict.action.value}{rule}")


@cli.command(name="doctor")
@click.option("--json", "as_json", is_flag=True, help="One JSON object with every check.")
@pass_settings
def doctor_run(settings: Settings, as_json: bool) -> None:
    """Check Redis, Slack, the queue and the workers; exit 1 on a failure, 2 on warnings only."""
    from approvals.ops import doctor

    checks = doctor.run_checks(settings)
    click.echo(doctor.render_json(checks) if as_json else doctor.render_text(checks))
    raise SystemExit(doctor.exit_code(checks))


def main() -> None:
    cli(prog_name="approvals")


if __name__ == "__main__":  # pragma: no cover
    main()
