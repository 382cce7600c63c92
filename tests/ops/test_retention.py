"""Retention: finished approvals leave Redis on time, into the archive; nothing else does."""

from __future__ import annotations

import dataclasses
import json
import logging
import time

import pytest
import redis

from approvals import store
from approvals.config import Settings
from approvals.models import (
    Approval,
    OnReject,
    Policy,
    RunResult,
    Status,
    decision_to_dict,
    result_to_dict,
)
from approvals.models.outcome import Outcome
from approvals.ops import archive, retention
from tests.archives import archive_url, postgres_server  # noqa: F401 - fixtures
from tests.factories import make_approval, make_decision

DAY = 24 * 3600
HISTORY = [{"role": "user", "parts": [{"type": "text", "text": "x" * 10_000}]}]


def pause(conn: redis.Redis, approval_id: str, **overrides) -> Approval:
    """A pending approval, written as ``run_agent`` writes one."""
    approval = make_approval(id=approval_id, created_at=time.time(), **overrides)
    store.records.create(conn, approval, HISTORY, run_ttl=DAY).execute()
    return approval


def decide(conn: redis.Redis, approval_id: str, target: Status = Status.APPROVED) -> None:
    """Decided, and what follows the decision done (none of it matters to retention)."""
    decision = json.dumps(decision_to_dict(make_decision()))
    fields = {"decision": decision, "decided_by": "UALICE"}
    assert store.transitions.transition(conn, approval_id, target, fields).ok
    assert store.owed.carry_out(conn, approval_id, lambda owed: ([], lambda pipe: None))


def finish(conn: redis.Redis, approval_id: str, end: Status = Status.COMPLETED) -> None:
    """Decided, resumed, ended: the way a worker moves it."""
    decide(conn, approval_id)
    assert store.transitions.transition(conn, approval_id, Status.RUNNING).ok
    result = json.dumps(result_to_dict(RunResult(end, text="Done.")))
    assert store.transitions.transition(conn, approval_id, end, {"result": result}).ok


def held(conn: redis.Redis, approval_id: str) -> set[str]:
    """Which of the approval's keys Redis holds."""
    keys = {
        "record": store.keys.approval_key(approval_id),
        "history": store.keys.history_key(approval_id),
        "audit": store.keys.audit_key(approval_id),
    }
    return {name for name, key in keys.items() if conn.exists(key)}


def test_a_finished_approval_loses_its_history_after_a_week_and_the_rest_after_a_month(env, conn):
    """Days 0-7: all of it; days 7-30: record and audit trail; after 30 days: nothing."""
    settings = Settings.from_env()
    pause(conn, "done1")
    finish(conn, "done1")
    now = time.time()

    assert retention.sweep(conn, settings, now=now + 6 * DAY).nothing
    assert held(conn, "done1") == {"record", "history", "audit"}
    assert retention.sweep(conn, settings, now=now + 8 * DAY).histories == 1
    assert held(conn, "done1") == {"record", "audit"}
    assert retention.sweep(conn, settings, now=now + 29 * DAY).nothing
    assert retention.sweep(conn, settings, now=now + 31 * DAY).approvals == 1
    assert held(conn, "done1") == set()
    assert conn.zcard(store.keys.FINISHED_KEY) == conn.zcard(store.keys.FINISHED_HISTORY_KEY) == 0
    assert store.metrics.metric_values(conn)["retention:approval"] == 1


@pytest.mark.parametrize("end", [Status.COMPLETED, Status.PAUSED, Status.FAILED])
def test_every_way_a_resume_ends_is_finished(env, conn, end):
    settings = Settings.from_env()
    pause(conn, "ended1")
    finish(conn, "ended1", end)
    retention.sweep(conn, settings, now=time.time() + 31 * DAY)
    assert held(conn, "ended1") == set()


def test_approvals_that_are_not_finished_are_never_touched(env, conn):
    """Pending, decided, running, interrupted, and rejected-to-resume approvals keep every
    key, even when the retention indexes wrongly name them (Redis is a trust boundary)."""
    settings = Settings.from_env()
    pause(conn, "pending1")
    pause(conn, "decided1")
    decide(conn, "decided1")
    pause(conn, "running1")
    decide(conn, "running1")
    store.transitions.transition(conn, "running1", Status.RUNNING)
    pause(conn, "interrupted1")
    decide(conn, "interrupted1")
    store.transitions.transition(conn, "interrupted1", Status.RUNNING)
    store.transitions.transition(conn, "interrupted1", Status.INTERRUPTED)
    pause(conn, "rejected1")
    decide(conn, "rejected1", Status.REJECTED)
    ids = ["pending1", "decided1", "running1", "interrupted1", "rejected1"]
    assert conn.zcard(store.keys.FINISHED_KEY) == 0
    for key in (store.keys.FINISHED_KEY, store.keys.FINISHED_HISTORY_KEY):
        conn.zadd(key, dict.fromkeys(ids, 0))

    retention.sweep(conn, settings, now=time.time() + 365 * DAY)

    for approval_id in ids:
        assert held(conn, approval_id) == {"record", "history", "audit"}, approval_id
    assert conn.zcard(store.keys.FINISHED_KEY) == 0


def test_a_rejection_or_expiry_that_stops_the_run_is_finished(env, conn):
    settings = Settings.from_env()
    stop = Policy(on_reject=OnReject.STOP)
    pause(conn, "stopped1", policy=stop)
    decide(conn, "stopped1", Status.REJECTED)
    pause(conn, "stopped2", policy=stop)
    decide(conn, "stopped2", Status.EXPIRED)
    retention.sweep(conn, settings, now=time.time() + 31 * DAY)
    assert held(conn, "stopped1") == held(conn, "stopped2") == set()


def test_nothing_goes_sooner_than_the_settle_time_whatever_the_settings(env, conn):
    """The card's redraw and ``on_finish`` read the record just after the finish."""
    settings = Settings(redis_url=env["REDIS_URL"], history_retention=0, retention=0)
    pause(conn, "fresh1")
    finish(conn, "fresh1")
    assert retention.sweep(conn, settings).nothing
    later = time.time() + retention.SETTLE_SECONDS + 1
    assert retention.sweep(conn, settings, now=later).approvals == 1


def test_the_archive_holds_what_redis_let_go(env, conn, archive_url):  # noqa: F811
    """Record and audit trail are in the archive, as Redis held them, before Redis lets
    them go; a pending approval is not archived, and stays."""
    settings = dataclasses.replace(Settings.from_env(), archive_url=archive_url)
    pause(conn, "kept1", run_id="run-1")
    finish(conn, "kept1")
    store.audit.append(conn, "kept1", "note", "UBOB", text="ünïcode ✓")
    pause(conn, "waiting1")
    before = store.records.load(conn, "kept1")
    trail = store.audit.audit_trail(conn, "kept1")

    swept = retention.sweep(conn, settings, now=time.time() + 31 * DAY)

    assert swept.approvals == 1
    assert held(conn, "kept1") == set()
    assert held(conn, "waiting1") == {"record", "history", "audit"}
    stored = archive.Archive.open(archive_url)
    try:
        assert stored.load("kept1") == before
        assert stored.audit_trail("kept1") == trail
        assert stored.load("waiting1") is None
        assert [a.id for a in stored.run_of("run-1")] == ["kept1"]
        assert stored.count() == 1
    finally:
        stored.close()


def test_an_unreachable_archive_keeps_records_and_trails_in_redis(env, conn, tmp_path):
    """Only the history, which the archive never receives, leaves Redis."""
    settings = Settings(
        redis_url=env["REDIS_URL"], archive_url=f"sqlite:///{tmp_path}/missing/dir/a.db"
    )
    pause(conn, "kept2")
    finish(conn, "kept2")
    swept = retention.sweep(conn, settings, now=time.time() + 31 * DAY)
    assert (swept.histories, swept.approvals, swept.runs) == (1, 0, 0)
    assert held(conn, "kept2") == {"record", "audit"}


def test_an_archive_without_its_tables_is_said_once_and_used_once_it_is_upgraded(
    env, conn, tmp_path, caplog, monkeypatch
):
    """An archive never upgraded: one error naming `approvals archive upgrade` however many
    rounds run, and records and outcomes stay in Redis; after the upgrade the next try
    archives them, and says so once."""
    monkeypatch.setattr(retention, "ARCHIVE_RETRY_SECONDS", 0)  # every round tries again
    url = f"sqlite:///{tmp_path / 'archive.db'}"
    settings = Settings(redis_url=env["REDIS_URL"], archive_url=url)
    pause(conn, "kept3", run_id="run-3")
    finish(conn, "kept3")
    store.runs.finish_run(conn, settings, store.records.load(conn, "kept3"))
    caplog.set_level(logging.INFO, logger="approvals.ops.retention")
    later = time.time() + 31 * DAY

    retention.check_archive(settings)  # what a starting worker does
    for _ in range(3):
        swept = retention.sweep(conn, settings, now=later)
        assert (swept.approvals, swept.runs) == (0, 0)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "has no tables: run `approvals archive upgrade`" in (
        errors[0].getMessage()
    )
    assert held(conn, "kept3") == {"record", "audit"} and conn.zcard(store.keys.ENDED_KEY) == 1

    archive.upgrade(url)
    swept = retention.sweep(conn, settings, now=later)
    assert (swept.approvals, swept.runs) == (1, 1) and held(conn, "kept3") == set()
    assert len([r for r in caplog.records if "can be used again" in r.getMessage()]) == 1


def test_an_ended_runs_outcome_is_archived_soon_after_it_ends(env, conn, archive_url):  # noqa: F811
    settings = Settings(redis_url=env["REDIS_URL"], archive_url=archive_url)
    pause(conn, "last1", run_id="run-2")
    finish(conn, "last1")
    ended = store.runs.finish_run(conn, settings, store.records.load(conn, "last1"))
    assert ended is not None

    assert retention.sweep(conn, settings).runs == 1

    stored = archive.Archive.open(archive_url)
    try:
        assert Outcome.from_dict(stored.outcome("run-2")) == ended
    finally:
        stored.close()
    assert conn.zcard(store.keys.ENDED_KEY) == 0


def test_one_worker_sweeps_at_a_time(env, conn):
    settings = Settings.from_env()
    pause(conn, "done3")
    finish(conn, "done3")
    assert store.retention.take_retention_lock(conn, "someone-else", 60)
    assert retention.sweep(conn, settings, now=time.time() + 31 * DAY).nothing
    assert held(conn, "done3") == {"record", "history", "audit"}


def test_backfill_notes_what_an_older_version_left_and_only_that(env, conn):
    """Finished approvals written before retention existed are noted by when they finished;
    waiting ones are not; running it twice notes nothing more."""
    settings = Settings.from_env()
    pause(conn, "legacy1")
    finish(conn, "legacy1")
    pause(conn, "legacy-waiting")
    conn.delete(
        store.keys.FINISHED_KEY, store.keys.FINISHED_HISTORY_KEY
    )  # as an older version left it

    assert retention.backfill(conn) == 1
    assert retention.backfill(conn) == 0
    assert conn.zrange(store.keys.FINISHED_KEY, 0, -1) == [b"legacy1"]
    retention.sweep(conn, settings, now=time.time() + 31 * DAY)
    assert held(conn, "legacy1") == set()
    assert held(conn, "legacy-waiting") == {"record", "history", "audit"}
