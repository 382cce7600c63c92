"""The ``approvals`` command: run the bot and workers, and decide from a terminal.

Each command is a thin wrapper over the library; decisions go through ``review.decide``, the
same function the Slack buttons use.
"""

from __future__ import annotations

import functools
import getpass
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from approvals import grants, outcomes, policy, queue, store
from approvals.cards import decision_line
from approvals.config import Settings
from approvals.dev.cli import demo_run, dev_run
from approvals.errors import ApprovalsError
from approvals.models import Approval, DecisionKind
from approvals.review import CLI_ACTOR_PREFIX, decide, retry

F = TypeVar("F", bound=Callable[..., Any])


def pass_settings(func: F) -> F:
    """Read settings from the environment; any ApprovalsError becomes one line and exit 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(Settings.from_env(), *args, **kwargs)
        except ApprovalsError as exc:
            raise click.ClickException(str(exc)) from None

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

    from approvals.logs import configure_logging
    from bot.app import check_settings
    from bot.server import serve_http, serve_socket_mode

    configure_logging(settings)
    check_settings(settings)
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
@pass_settings
def worker_run(settings: Settings, burst: bool, name: str | None, processes: int) -> None:
    """Run an RQ worker that posts cards and resumes decided approvals."""
    from worker.main import run_pool, run_worker

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
    approvals = store.pending(store.connect(settings), limit=limit)
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
    conn = store.connect(settings)
    retry(conn, settings, approval_id, CLI_ACTOR_PREFIX + getpass.getuser())
    queue.enqueue_announce(conn, settings, approval_id)
    click.echo(f"{approval_id}: retried; a worker runs it again.")


@cli.command(name="show")
@click.argument("approval_id")
@pass_settings
def show_one(settings: Settings, approval_id: str) -> None:
    """Print an approval's record and its audit trail."""
    conn = store.connect(settings)
    approval = store.load(conn, approval_id)
    click.echo(json.dumps({**_summary(approval), **approval.record()}, indent=2, default=str))
    for event in store.audit_trail(conn, approval_id):
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
    """Print how a run ended, or where it is now (ID: a pause id or a run id)."""
    conn = store.connect(settings)
    outcome = outcomes.run_outcome(conn, outcomes.run_id_of(conn, some_id))
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


def _decide(settings: Settings, approval_id: str, kind: DecisionKind, reason: str | None) -> None:
    conn = store.connect(settings)
    approval = decide(
        conn, settings, approval_id, kind, CLI_ACTOR_PREFIX + getpass.getuser(), reason=reason
    )
    queue.enqueue_announce(conn, settings, approval_id)
    click.echo(f"{approval_id}: {decision_line(approval)}")


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


@cli.group(name="grants")
def grants_group() -> None:
    """List and revoke the grants approvers made from cards."""


@grants_group.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_settings
def grants_list(settings: Settings, as_json: bool) -> None:
    """Every grant, newest first, live, expired or revoked."""
    now = time.time()
    for grant in grants.list_grants(store.connect(settings)):
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
    grants.revoke(store.connect(settings), settings, grant_id, actor, is_operator=True)
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
    from approvals import doctor

    checks = doctor.run_checks(settings)
    click.echo(doctor.render_json(checks) if as_json else doctor.render_text(checks))
    raise SystemExit(doctor.exit_code(checks))


def main() -> None:
    cli(prog_name="approvals")


if __name__ == "__main__":  # pragma: no cover
    main()
