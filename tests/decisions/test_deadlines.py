"""Deadlines: kept in Redis with the pause, taken by one sweeper when due, never lost."""

from __future__ import annotations

import time

from rq import Queue
from rq.serializers import JSONSerializer

from approvals import store
from approvals.config import Settings
from approvals.decisions import deadlines
from approvals.decisions.review import decide
from approvals.models import DecisionKind, GateOptions, Status
from approvals.store import queue
from tests.factories import make_approval


def _jobs(conn, settings) -> list[tuple[str, list]]:
    jobs = Queue(settings.queue, connection=conn, serializer=JSONSerializer).get_jobs()
    return [(job.func_name, job.args) for job in jobs]


def test_nothing_fires_before_its_deadline(env, conn):
    """A deadline one second ahead is not taken; at its time it becomes a job, once."""
    settings = Settings.from_env()
    now = time.time()
    deadlines.add(conn, deadlines.Kind.EXPIRE, "a1", now + 1)

    assert deadlines.sweep(conn, settings, now=now + 0.99) == 0
    assert _jobs(conn, settings) == []
    assert deadlines.sweep(conn, settings, now=now + 1) == 1
    assert _jobs(conn, settings) == [(queue.EXPIRE, ["a1"])]
    assert deadlines.sweep(conn, settings, now=now + 2) == 0
    assert conn.zcard(store.keys.DEADLINES_KEY) == 0


def test_a_warning_becomes_its_own_job(env, conn):
    settings = Settings.from_env()
    deadlines.add(conn, deadlines.Kind.WARN, "a1", time.time() - 1)
    deadlines.sweep(conn, settings)
    assert _jobs(conn, settings) == [(queue.WARN, ["a1"])]


def test_a_taken_deadline_is_held_from_other_sweepers_then_due_again(env, conn):
    """A sweeper that dies after taking a deadline does not lose it: after the hold it is
    due again (two jobs at worst, never none; the jobs ignore a decided approval)."""
    now = time.time()
    deadlines.add(conn, deadlines.Kind.EXPIRE, "a1", now - 1)

    assert store.deadlines.take_due_deadlines(conn, now, deadlines.HOLD_SECONDS) == [
        ("expire", "a1")
    ]
    assert store.deadlines.take_due_deadlines(conn, now + 1, deadlines.HOLD_SECONDS) == []
    later = now + deadlines.HOLD_SECONDS
    assert store.deadlines.take_due_deadlines(conn, later, deadlines.HOLD_SECONDS) == [
        ("expire", "a1")
    ]


def test_an_unknown_kind_in_redis_enqueues_nothing(env, conn):
    """Redis is a trust boundary: only expiry and warning jobs can come out of a deadline."""
    settings = Settings.from_env()
    conn.zadd(store.keys.DEADLINES_KEY, {"os.system:rm -rf /": time.time() - 1})
    assert deadlines.sweep(conn, settings) == 1
    assert _jobs(conn, settings) == []
    assert conn.zcard(store.keys.DEADLINES_KEY) == 0


def test_reminders_and_escalation_are_scheduled_with_the_expiry(env, conn):
    """A gate's reminder and escalation times become deadlines beside the expiry and the
    warning, each of the kind its job carries out; 0 schedules none."""
    settings = Settings.from_env()
    approval = make_approval(created_at=1000.0, expires_at=2000.0)
    asked = GateOptions(expires_in=1000, remind_after=300.0, escalate_after=600.0,
                        escalate_to=["C0ESCALATE"])  # fmt: skip
    assert deadlines.plan(approval, settings, asked) == 1000
    deadlines.schedule(conn, settings, approval)
    scores = dict(conn.zrange(store.keys.DEADLINES_KEY, 0, -1, withscores=True))
    assert scores == {
        f"expire:{approval.id}".encode(): 2000.0,
        f"warn:{approval.id}".encode(): 1900.0,
        f"remind:{approval.id}".encode(): 1300.0,
        f"escalate:{approval.id}".encode(): 1600.0,
    }
    kinds = {deadlines.Kind(member.decode().split(":")[0]) for member in scores}
    assert {kind.job for kind in kinds} == {queue.EXPIRE, queue.WARN, queue.REMIND, queue.ESCALATE}

    quiet = make_approval(id="0000aaaa0000bbbb", created_at=1000.0, expires_at=0.0)
    off = GateOptions(expires_in=None, remind_after=0.0, escalate_after=0.0, escalate_to=[])
    assert deadlines.plan(quiet, settings, off) is None
    deadlines.schedule(conn, settings, quiet)
    assert conn.zscore(store.keys.DEADLINES_KEY, f"expire:{quiet.id}") is None
    assert not [k for k in conn.zrange(store.keys.DEADLINES_KEY, 0, -1) if quiet.id.encode() in k]


def test_a_pause_writes_its_deadlines_and_a_decision_removes_them(env, conn):
    """The expiry and the warning (10% of the window before) are written with the pause; the
    decision that leaves pending takes them away, so nothing fires for a decided approval."""
    settings = Settings.from_env()
    approval = make_approval(created_at=1000.0, expires_at=2000.0)
    pipe = store.records.create(conn, approval, [])
    deadlines.schedule(pipe, settings, approval)
    pipe.execute()
    scores = dict(conn.zrange(store.keys.DEADLINES_KEY, 0, -1, withscores=True))
    assert scores == {
        f"expire:{approval.id}".encode(): 2000.0,
        f"warn:{approval.id}".encode(): 1900.0,
    }

    decided = decide(conn, settings, approval.id, DecisionKind.APPROVE, "UALICE")

    assert decided.status is Status.APPROVED
    assert conn.zcard(store.keys.DEADLINES_KEY) == 0
