"""``approvals doctor``: each check against the real thing (private redis-servers, a real
``approvals worker``, the real slack_sdk client against the Slack stand-in)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from click.testing import CliRunner

from approvals import store
from approvals.cli.main import cli
from approvals.config import Settings, safe_url
from approvals.decisions import deadlines
from approvals.ops import archive, doctor, retention
from approvals.ops.doctor import Level
from approvals.store import queue
from tests.archives import archive_url, downgrade, newer_migrations, postgres_server  # noqa: F401
from tests.conftest import BOT_TOKEN
from tests.ops.test_retention import finish, pause
from tests.processes import (
    ROOT,
    approvals_command,
    free_port,
    redis_binary,
    start_redis,
    start_worker,
    wait_for_workers,
    wait_until,
)
from tests.slack_standin import SlackStandIn


@dataclass
class AofRedis:
    base: str
    _dbs: Iterator[int]

    def new_db(self) -> str:
        url = f"{self.base}/{next(self._dbs)}"
        conn = redis.Redis.from_url(url)
        conn.flushdb()
        conn.close()
        return url


@pytest.fixture(scope="module")
def aof_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AofRedis]:
    """A second private redis-server, this one with AOF on (appendfsync everysec)."""
    binary = redis_binary()
    folder = tmp_path_factory.mktemp("redis-aof")
    process, base = start_redis(
        binary, folder, ["--appendonly", "yes", "--appendfsync", "everysec"]
    )
    yield AofRedis(base, itertools.count(1))
    process.terminate()
    process.wait(10)


class ScopedStandIn(SlackStandIn):
    """The stand-in, answering with the given ``X-OAuth-Scopes`` (None: no such header)."""

    def __init__(self, scopes: str | None) -> None:
        super().__init__(token=BOT_TOKEN)
        self.scopes = scopes

    def _handle_api(self, method: str, query: str, headers: Any, body: bytes) -> Any:
        reply = super()._handle_api(method, query, headers, body)
        if "X-OAuth-Scopes" in reply.headers:
            if self.scopes is None:
                del reply.headers["X-OAuth-Scopes"]
            else:
                reply.headers["X-OAuth-Scopes"] = self.scopes
        return reply


@pytest.fixture
def scoped_slack(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Start a stand-in granting the given scopes, and point SLACK_API_URL at it."""
    started: list[SlackStandIn] = []

    def start(scopes: str | None) -> SlackStandIn:
        standin = ScopedStandIn(scopes).start()
        started.append(standin)
        monkeypatch.setenv("SLACK_API_URL", standin.base_url)
        return standin

    yield start
    for standin in started:
        standin.stop()


def by_name(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {c.name: c for c in checks}


def run_doctor(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["doctor", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


# ---------------------------------------------------------------------------------- Redis


def test_redis_without_aof_warns_that_a_kill_loses_recent_pauses(env):
    """The private test server runs without AOF: persistence is a warning that says why."""
    conn = redis.Redis.from_url(env["REDIS_URL"])
    check = doctor.check_persistence(conn)
    assert check.level is Level.WARN
    assert "appendonly no" in check.message and "kill -9" in check.message
    assert "pause" in check.message and "appendonly yes" in check.message


@pytest.mark.parametrize(
    ("policy", "level", "loses"),
    [
        ("everysec", Level.OK, "about the last second"),
        ("always", Level.OK, "next to nothing"),
        ("no", Level.WARN, "~30 s"),
    ],
)
def test_redis_with_aof_names_appendfsync_and_what_it_can_lose(aof_redis, policy, level, loses):
    """With AOF on, the check names the appendfsync policy and the writes it can lose."""
    conn = redis.Redis.from_url(aof_redis.new_db())
    conn.config_set("appendfsync", policy)
    try:
        check = doctor.check_persistence(conn)
    finally:
        conn.config_set("appendfsync", "everysec")
    assert check.level is level
    assert f"appendfsync {policy}" in check.message and loses in check.message


def test_redis_check_names_the_version(env):
    """A reachable Redis 5+ is ok, and the line says which version answered where."""
    check = doctor.check_redis(redis.Redis.from_url(env["REDIS_URL"]), Settings.from_env())
    assert check.level is Level.OK
    assert check.message.startswith("Redis ") and env["REDIS_URL"] in check.message


def test_unreachable_redis_fails_without_printing_the_password(env, monkeypatch):
    """Nothing listening at REDIS_URL: FAIL, the Redis-based checks are skipped, exit 1."""
    monkeypatch.setenv("REDIS_URL", f"redis://ops:s3cret@127.0.0.1:{free_port()}/0")
    code, output = run_doctor()
    assert code == 1
    lines = output.splitlines()
    assert lines[0].startswith("FAIL  redis") and "cannot reach Redis" in lines[0]
    assert "ops:***@127.0.0.1" in lines[0] and "s3cret" not in output
    for line, name in zip(
        lines[1:5], ("persistence", "queue", "workers", "scheduler"), strict=True
    ):
        assert line.split()[1] == name and "not checked, because the Redis check failed" in line


# ---------------------------------------------------------------------------------- archive


def _archive_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.split()[1:2] == ["archive"])


def _failing_archive(monkeypatch: pytest.MonkeyPatch, url: str) -> str:
    """``approvals doctor`` with APPROVALS_ARCHIVE_URL=url: exit 1; its archive line, a FAIL."""
    monkeypatch.setenv("APPROVALS_ARCHIVE_URL", url)
    code, output = run_doctor()
    line = _archive_line(output)
    assert code == 1 and line.startswith("FAIL  archive"), output
    return line


def test_an_archive_never_upgraded_fails_naming_the_command_until_it_is(
    env,
    monkeypatch,
    archive_url,  # noqa: F811
):
    """APPROVALS_ARCHIVE_URL set, `approvals archive upgrade` never run: FAIL (exit 1),
    naming the command and that finished approvals stay in Redis; after it, ok."""
    downgrade(archive_url)
    line = _failing_archive(monkeypatch, archive_url)
    assert "has no tables: run `approvals archive upgrade`" in line
    assert "finished approvals stay in Redis" in line
    assert CliRunner().invoke(cli, ["archive", "upgrade"]).exit_code == 0
    line = _archive_line(run_doctor()[1])
    assert line.startswith("ok    archive") and f"schema {archive.head_revision()}" in line


def test_an_archive_behind_the_codes_schema_fails_until_it_is_migrated(
    env,
    monkeypatch,
    tmp_path,
    archive_url,  # noqa: F811
):
    """This version's migrations go one revision further than the archive (as after
    upgrading approvals): FAIL naming both revisions and the command; after it, ok."""
    monkeypatch.setattr(archive, "MIGRATIONS", newer_migrations(tmp_path))
    line = _failing_archive(monkeypatch, archive_url)
    assert "is at schema 0001, behind this version's 9002" in line
    assert "run `approvals archive upgrade`" in line
    upgraded = CliRunner().invoke(cli, ["archive", "upgrade"])
    assert upgraded.exit_code == 0 and "schema 9002" in upgraded.output
    assert _archive_line(run_doctor()[1]).startswith("ok    archive")


def test_an_archive_a_newer_version_migrated_fails_and_says_so(env, archive_url):  # noqa: F811
    """A revision this version does not know: FAIL, saying a newer approvals migrated it
    (upgrading here would not help)."""
    engine = sa.create_engine(archive.engine_url(archive_url))
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = '9002'"))
    engine.dispose()
    check = doctor.check_archive(
        Settings.from_env(os.environ | {"APPROVALS_ARCHIVE_URL": archive_url})
    )
    assert check.level is Level.FAIL
    assert "at schema 9002, which this version does not know" in check.message


def test_an_unreachable_archive_fails_without_its_password(env):
    """Nothing listens where APPROVALS_ARCHIVE_URL points: FAIL, password hidden."""
    url = f"postgresql://ops:s3cret@127.0.0.1:{free_port()}/approvals"
    check = doctor.check_archive(Settings.from_env(os.environ | {"APPROVALS_ARCHIVE_URL": url}))
    assert check.level is Level.FAIL and "cannot reach the archive at" in check.message
    assert "ops:***@127.0.0.1" in check.message and "s3cret" not in check.message


def test_without_an_archive_there_is_no_archive_check(env):
    """The archive is checked only where one is configured."""
    assert "archive" not in by_name(doctor.run_checks(Settings.from_env()))


# ---------------------------------------------------------------------------------- RQ


def test_queue_counts_waiting_scheduled_and_failed_jobs(env, conn):
    """Waiting, scheduled and failed jobs are counted; a failed one makes it a warning."""
    settings = Settings.from_env()
    jobs = queue.get_queue(conn, settings)
    # A card job for an approval that does not exist fails in a real burst worker.
    jobs.enqueue(queue.POST_CARD, "does-not-exist", job_id="card-does-not-exist")
    child_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        approvals_command("worker", "--burst"), env=child_env, cwd=ROOT, check=True, timeout=60
    )
    failed = doctor.check_queue(conn, settings)
    assert failed.level is Level.WARN and "0 waiting, 0 scheduled" in failed.message
    assert "1 failed" in failed.message and "FailedJobRegistry" in failed.message
    jobs.enqueue(queue.ANNOUNCE, "a1", job_id="announce-a1")
    jobs.enqueue(queue.ANNOUNCE, "a2", job_id="announce-a2")
    jobs.enqueue_in(timedelta(hours=1), queue.EXPIRE, "a3", job_id="expire-a3")

    check = doctor.check_queue(conn, settings)
    assert check.level is Level.WARN
    assert "2 waiting, 1 scheduled" in check.message and "1 failed" in check.message


def test_an_empty_queue_is_ok(env, conn):
    """No jobs anywhere: ok, with the counts."""
    check = doctor.check_queue(conn, Settings.from_env())
    assert check.level is Level.OK
    assert "0 waiting, 0 scheduled" in check.message and "0 failed" in check.message


def test_deadlines_are_counted_and_long_overdue_ones_warn(env, conn):
    """Deadlines ahead are counted; one overdue by more than a minute means no worker sweeps."""
    settings = Settings.from_env()
    now = time.time()
    deadlines.add(conn, deadlines.Kind.EXPIRE, "a1", now + 3600)
    deadlines.add(conn, deadlines.Kind.WARN, "a1", now + 3000)
    ahead = doctor.check_queue(conn, settings)
    assert ahead.level is Level.OK and "2 deadlines ahead" in ahead.message

    deadlines.add(conn, deadlines.Kind.EXPIRE, "a2", now - 2 * deadlines.OVERDUE_SECONDS)
    late = doctor.check_queue(conn, settings)
    assert late.level is Level.WARN
    assert "1 deadlines are more than 60 s overdue" in late.message
    assert "approvals worker" in late.message


def test_without_workers_both_worker_checks_warn(env, conn):
    """No worker: nothing is posted or resumed, and no scheduler fires Slack retries."""
    settings = Settings.from_env()
    workers = doctor.check_workers(conn, settings)
    scheduler = doctor.check_scheduler(conn, settings)
    assert workers.level is Level.WARN and "no worker" in workers.message
    assert scheduler.level is Level.WARN
    assert "rq:scheduler-lock:approvals" in scheduler.message
    assert "Slack retries" in scheduler.message


def test_a_running_worker_is_counted_and_holds_the_scheduler_lock(env, conn, tmp_path):
    """A real `approvals worker`: one worker on the queue, and its scheduler holds the lock."""
    settings = Settings.from_env()
    worker = start_worker(env, tmp_path / "worker.log", "doctor-w1")
    try:
        wait_for_workers(env, [worker], 1)
        scheduler = wait_until(
            lambda: "pid" in (c := doctor.check_scheduler(conn, settings)).message and c,
            30,
            "the worker's scheduler to take its lock",
        )
        workers = doctor.check_workers(conn, settings)
    finally:
        worker.stop()
    assert workers.level is Level.OK
    assert workers.message.startswith("1 worker on approvals: doctor-w1 (")
    assert "holds rq:scheduler-lock:approvals" in scheduler.message and "pid" in scheduler.message


# ---------------------------------------------------------------------------------- Slack


def test_slack_auth_ok_names_the_bot_and_workspace(env, slack):
    """auth.test through the real client: ok, naming who the token is."""
    checks = by_name(doctor.run_checks(Settings.from_env()))
    assert checks["slack"].level is Level.OK
    assert "authenticated as approvals (UBOT) in Test" in checks["slack"].message
    assert [c["method"] for c in slack.calls()] == ["auth.test", "conversations.info"]


def test_a_bad_token_fails_with_slacks_reason(env, slack, monkeypatch):
    """A wrong token: FAIL with Slack's error and what it means; scopes are not checked."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-wrong")
    code, output = run_doctor()
    assert code == 1
    line = next(x for x in output.splitlines() if " slack " in x)
    assert line.startswith("FAIL") and "invalid_auth" in line and "SLACK_BOT_TOKEN" in line
    assert "not checked, because the Slack check failed" in output


def test_socket_mode_checks_the_app_token_only_when_it_is_set(env, slack, monkeypatch):
    """With SLACK_APP_TOKEN the doctor opens a connection for it: ok for the right token, a
    failure naming the token and where to get one for a wrong one; without it, no check."""
    assert "socket" not in by_name(doctor.run_checks(Settings.from_env()))
    monkeypatch.setenv("SLACK_APP_TOKEN", slack.app_token)
    assert by_name(doctor.run_checks(Settings.from_env()))["socket"].level is Level.OK
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-1-wrong")
    check = by_name(doctor.run_checks(Settings.from_env()))["socket"]
    assert check.level is Level.FAIL and "SLACK_APP_TOKEN: invalid_auth" in check.message
    assert "connections:write" in check.message


def test_a_missing_token_fails(env, monkeypatch):
    """No SLACK_BOT_TOKEN at all: the Slack check says so."""
    monkeypatch.delenv("SLACK_BOT_TOKEN")
    check = doctor.check_slack(doctor.slack_auth(Settings.from_env()), Settings.from_env())
    assert check.level is Level.FAIL and check.message == "SLACK_BOT_TOKEN is not set"


def test_unreachable_slack_fails(env, monkeypatch):
    """Nothing at SLACK_API_URL: FAIL, naming the URL."""
    url = f"http://127.0.0.1:{free_port()}/api/"
    monkeypatch.setenv("SLACK_API_URL", url)
    check = doctor.check_slack(doctor.slack_auth(Settings.from_env()), Settings.from_env())
    assert check.level is Level.FAIL and f"cannot reach Slack at {url}" in check.message


def test_scopes_are_read_from_the_auth_test_header(env, slack, monkeypatch):
    """The stand-in grants every scope: ok, and usergroups:read counts only with groups."""
    check = by_name(doctor.run_checks(Settings.from_env()))["scopes"]
    assert check.level is Level.OK and check.message == "the token has chat:write, commands"
    monkeypatch.setenv("APPROVER_GROUPS", "S0123")
    check = by_name(doctor.run_checks(Settings.from_env()))["scopes"]
    assert check.message == "the token has chat:write, commands, usergroups:read"
    monkeypatch.setenv("APPROVALS_ESCALATE_TO", "C0ESC")
    check = by_name(doctor.run_checks(Settings.from_env()))["scopes"]
    assert check.message == "the token has chat:write, commands, usergroups:read, channels:read"


@pytest.mark.parametrize(
    ("granted", "groups", "level", "names"),
    [
        ("chat:write", "", Level.FAIL, ["commands"]),
        ("commands", "", Level.FAIL, ["chat:write"]),
        ("chat:write,commands", "S0123", Level.FAIL, ["usergroups:read"]),
        ("chat:write,commands", "", Level.OK, []),
        ("chat:write,commands,usergroups:read", "S0123", Level.OK, []),
    ],
)
def test_missing_scopes_fail_and_say_what_breaks(
    env, scoped_slack, monkeypatch, granted, groups, level, names
):
    """Each missing scope is named, with what does not work without it."""
    scoped_slack(granted)
    monkeypatch.setenv("APPROVER_GROUPS", groups)
    check = by_name(doctor.run_checks(Settings.from_env()))["scopes"]
    assert check.level is level
    for name in names:
        assert f"without {name}," in check.message
    if names:
        assert "reinstall" in check.message


def test_escalation_channels_need_channels_read(env, scoped_slack, monkeypatch):
    """Channel members are looked up after an escalation: without channels:read, a failure."""
    scoped_slack("chat:write,commands")
    monkeypatch.setenv("APPROVALS_ESCALATE_TO", "C0ESC,S0SRE")
    check = by_name(doctor.run_checks(Settings.from_env()))["scopes"]
    assert check.level is Level.FAIL and "without channels:read," in check.message


def test_no_scopes_header_is_a_warning(env, scoped_slack):
    """A Slack that does not list the scopes cannot be checked: a warning, not a failure."""
    scoped_slack(None)
    check = by_name(doctor.run_checks(Settings.from_env()))["scopes"]
    assert check.level is Level.WARN and "X-OAuth-Scopes" in check.message


def test_the_channel_is_found_and_the_bot_is_in_it(env, slack):
    """conversations.info answers: ok, with the channel's name."""
    check = by_name(doctor.run_checks(Settings.from_env()))["channel"]
    assert check.level is Level.OK and check.message == "#c0cards (C0CARDS): the bot is a member"


def test_missing_scope_for_the_channel_is_not_an_error(env, slack):
    """The manifest has no channels:read: missing_scope means 'cannot verify', ok."""
    slack.fail_next("conversations.info", error="missing_scope")
    check = by_name(doctor.run_checks(Settings.from_env()))["channel"]
    assert check.level is Level.OK and "cannot verify" in check.message


def test_an_unknown_channel_fails(env, slack):
    """channel_not_found: FAIL, with how to find the right id."""
    slack.fail_next("conversations.info", error="channel_not_found")
    check = by_name(doctor.run_checks(Settings.from_env()))["channel"]
    assert check.level is Level.FAIL and "channel_not_found" in check.message


def test_no_approvals_channel_is_a_warning(env, slack, monkeypatch):
    """Without APPROVALS_CHANNEL, agents must name a channel themselves: a warning."""
    monkeypatch.delenv("APPROVALS_CHANNEL")
    check = by_name(doctor.run_checks(Settings.from_env()))["channel"]
    assert check.level is Level.WARN and "APPROVALS_CHANNEL is not set" in check.message


# ---------------------------------------------------------------------------------- command


def test_text_output_is_one_line_per_check_and_warnings_exit_2(env, slack):
    """No AOF and no worker: warnings only, so exit 2; one `level name message` line each."""
    code, output = run_doctor()
    assert code == 2
    lines = output.splitlines()
    names = ["redis", "persistence", "queue", "workers", "scheduler", "models", "memory"]
    names += ["retention", "slack", "scopes", "channel"]
    assert [line.split()[1] for line in lines] == names
    assert {line.split()[0] for line in lines} == {"ok", "warn"}


def test_json_output(env, slack):
    """--json: one object with the overall level and every check."""
    code, output = run_doctor("--json")
    report = json.loads(output)
    assert code == 2 and report["level"] == "warn"
    assert report["checks"][0] == {
        "name": "redis",
        "level": "ok",
        "message": report["checks"][0]["message"],
    }
    assert {c["level"] for c in report["checks"]} == {"ok", "warn"}


def test_a_healthy_installation_exits_0(env, aof_redis, tmp_path):
    """AOF on, a worker with its scheduler, a good token: every line ok, exit 0 (a real run)."""
    healthy = {**env, "REDIS_URL": aof_redis.new_db()}
    worker = start_worker(healthy, tmp_path / "worker.log", "doctor-healthy")
    try:
        wait_for_workers(healthy, [worker], 1)
        child_env = {**os.environ, **healthy, "PYTHONPATH": str(ROOT)}

        def healthy_run() -> subprocess.CompletedProcess[str] | None:
            run = subprocess.run(
                approvals_command("doctor"),
                env=child_env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            return run if run.returncode == 0 else None

        run = wait_until(healthy_run, 30, "approvals doctor to report all ok")
    finally:
        worker.stop()
    assert all(line.startswith("ok ") for line in run.stdout.splitlines()), run.stdout
    assert "appendfsync everysec" in run.stdout


def test_safe_url_hides_only_the_password():
    """Passwords never reach the output; the rest of the URL does."""
    assert safe_url("rediss://u:p@h:6380/2") == "rediss://u:***@h:6380/2"
    assert safe_url("redis://:p@h/0") == "redis://:***@h/0"
    assert safe_url("redis://h:6379/0") == "redis://h:6379/0"


def test_exit_code_follows_the_worst_level():
    """0 all ok, 2 warnings only, 1 any failure."""
    ok, warn, fail = (doctor.Check("x", lv, "") for lv in (Level.OK, Level.WARN, Level.FAIL))
    assert doctor.exit_code([ok]) == 0
    assert doctor.exit_code([ok, warn]) == 2
    assert doctor.exit_code([warn, fail, ok]) == 1


def test_the_aof_fixture_really_has_aof_on(aof_redis):
    """Guard for the fixture: the second server runs with appendonly yes."""
    conn = redis.Redis.from_url(aof_redis.new_db())
    assert conn.config_get("appendonly") == {"appendonly": "yes"}


# ---------------------------------------------------------------------------------- models


def test_models_of_pending_approvals_are_found_and_counted(env, conn):
    """Real pauses, sync and async, on the scripted model: both resolve here."""
    import asyncio

    from approvals import run_agent, run_agent_async
    from tests.agents.scripted import calls, script
    from tests.agents.tools import delete_path, publish_post

    assert doctor.check_models(conn, Settings.from_env()).message.startswith("no pending")
    run_agent("scripted", script(calls(("delete_path", {"path": "a"}))), tools=[delete_path])
    asyncio.run(
        run_agent_async(
            "scripted", script(calls(("publish_post", {"slug": "b"}))), tools=[publish_post]
        )
    )
    check = doctor.check_models(conn, Settings.from_env())
    assert check.level is Level.OK
    assert "scripted, scripted (async)" in check.message


def test_a_model_missing_here_or_without_conversations_fails(env, conn):
    from tests.factories import make_approval

    store.records.create(conn, make_approval(id="m1", model_id="gpt-nowhere"), []).execute()
    store.records.create(conn, make_approval(id="m2", model_id="gpt-nowhere"), []).execute()
    store.records.create(conn, make_approval(id="m3", model_id="forgetful"), []).execute()
    check = doctor.check_models(conn, Settings.from_env())
    assert check.level is Level.FAIL
    assert "model 'gpt-nowhere' (2 waiting) is not installed here" in check.message
    assert "model 'forgetful' (1 waiting) cannot continue a conversation" in check.message
    assert "APPROVALS_LLM_PLUGINS" in check.message


def test_what_the_model_check_warns_of_is_what_llm_does(env):
    """A history with a tool call on a model without conversations: llm itself raises
    ConversationNotSupported, so a resume on it could never work."""
    import llm

    from tests.agents.tools import list_files

    history = [
        llm.Message.from_dict({"role": "user", "parts": [{"type": "text", "text": "clean up"}]}),
        llm.Message.from_dict(
            {
                "role": "assistant",
                "parts": [
                    {"type": "tool_call", "name": "list_files", "arguments": {"path": "a"},
                     "tool_call_id": "tc_1"},
                ],
            }
        ),
    ]  # fmt: skip
    model = llm.get_model("forgetful")
    with pytest.raises(llm.ConversationNotSupported):
        model.chain(messages=history, tools=[list_files]).text()


def test_run_agent_refuses_a_model_without_conversations_before_the_run(env, conn):
    """Such a model is refused up front (a clear GateError), not at the first resume: no
    model call, nothing stored."""
    from approvals import GateError, run_agent
    from tests.agents.scripted import calls, script
    from tests.agents.tools import delete_path
    from tests.e2e import model_calls

    prompt = script(calls(("delete_path", {"path": "a"})))
    with pytest.raises(GateError, match="forgetful does not support conversations"):
        run_agent("forgetful", prompt, tools=[delete_path])
    assert model_calls(env) == [] and store.pending.pending(conn) == []


# ---------------------------------------------------------------------------------- memory


@pytest.fixture
def limited_redis(tmp_path: Path) -> Iterator[Callable[[str], redis.Redis]]:
    """A private redis-server with ``maxmemory 64mb`` and the given policy."""
    started: list[subprocess.Popen[bytes]] = []
    clients: list[redis.Redis] = []

    def start(policy: str) -> redis.Redis:
        binary = redis_binary()
        folder = tmp_path / f"redis-{len(started)}"
        folder.mkdir()
        args = ["--maxmemory", "64mb", "--maxmemory-policy", policy]
        process, base = start_redis(binary, folder, args)
        started.append(process)
        clients.append(redis.Redis.from_url(f"{base}/0"))
        return clients[-1]

    yield start
    for client in clients:
        client.close()
    for process in started:
        process.terminate()
        process.wait(10)


def test_an_eviction_policy_fails_and_says_why(limited_redis):
    """allkeys-lru would delete pending approvals when Redis is full."""
    check = doctor.check_memory(limited_redis("allkeys-lru"))
    assert check.level is Level.FAIL
    assert "allkeys-lru" in check.message and "pending approvals" in check.message
    assert "noeviction" in check.message


def test_noeviction_reports_used_memory_against_maxmemory(limited_redis):
    check = doctor.check_memory(limited_redis("noeviction"))
    assert check.level is Level.OK
    assert "of maxmemory 64.0 MB" in check.message


def test_retention_counts_what_the_sweep_will_free(env, conn):
    settings = Settings.from_env()
    for approval_id in ("r1", "r2"):
        pause(conn, approval_id)
        finish(conn, approval_id)
    month_ago = time.time() - 31 * 24 * 3600
    for key in (store.keys.FINISHED_KEY, store.keys.FINISHED_HISTORY_KEY):
        conn.zadd(key, {"r1": month_ago})

    check = doctor.check_retention(conn, settings)

    assert check.level is Level.WARN and "no worker is sweeping" in check.message
    assert "2 finished approvals held" in check.message
    assert "due now: 1 histories and 1 approvals" in check.message
    retention.sweep(conn, settings)
    assert doctor.check_retention(conn, settings).level is Level.OK
