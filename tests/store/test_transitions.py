"""The one atomic move between statuses, and quorum votes.

Against a private real redis-server, a fresh database per test."""

from __future__ import annotations

import json
import threading

import pytest

from approvals import store
from approvals.models import Status
from tests.factories import CREATED_AT, stored_approval


def test_transition_from_pending_succeeds_once(conn):
    """The first decision wins; the second is told the status and who decided."""
    approval = stored_approval(conn)
    first = store.transitions.transition(
        conn, approval.id, Status.APPROVED, {"decided_by": "UALICE"}
    )
    assert first == store.transitions.TransitionResult(ok=True, previous="pending", decided_by=None)

    second = store.transitions.transition(
        conn, approval.id, Status.REJECTED, {"decided_by": "UBOB"}
    )
    assert second == store.transitions.TransitionResult(
        ok=False, previous="approved", decided_by="UALICE"
    )

    assert store.records.load(conn, approval.id).status is Status.APPROVED
    assert conn.hget(store.keys.approval_key(approval.id), "decided_by") == b"UALICE"


def test_transition_writes_its_fields_with_the_status(conn):
    """Fields passed to a winning transition are stored with it."""
    approval = stored_approval(conn)
    decision = json.dumps({"kind": "reject", "actor": "UALICE", "at": CREATED_AT + 60})
    store.transitions.transition(conn, approval.id, Status.REJECTED, {"decision": decision})
    loaded = store.records.load(conn, approval.id)
    assert loaded.status is Status.REJECTED
    assert loaded.decision is not None and loaded.decision.actor == "UALICE"


def test_a_transition_records_its_audit_event_and_lease_in_the_same_step(conn):
    """A resume moves to running with its lease and its audit line, or with neither."""
    approval = stored_approval(conn)
    store.transitions.transition(conn, approval.id, Status.APPROVED)
    entry = store.audit.audit_entry("resume_started", "worker")

    won = store.transitions.transition(conn, approval.id, Status.RUNNING, event=entry, lease=15)
    lost = store.transitions.transition(
        conn,
        approval.id,
        Status.RUNNING,
        event=store.audit.audit_entry("again", "worker"),
        lease=15,
    )

    assert won.ok and not lost.ok
    assert [e["event"] for e in store.audit.audit_trail(conn, approval.id)] == [
        "paused",  # written by store.records.create
        "resume_started",
    ]
    assert 0 < conn.ttl(store.keys.lease_key(approval.id)) <= 15

    assert store.transitions.transition(conn, approval.id, Status.COMPLETED).ok
    assert not conn.exists(store.keys.lease_key(approval.id))  # the run's lease ends with it


def test_a_transition_that_does_not_happen_leaves_no_lease(conn):
    approval = stored_approval(conn)  # pending: cannot go to running
    result = store.transitions.transition(conn, approval.id, Status.RUNNING, lease=15, event="x")
    assert not result.ok
    assert not conn.exists(store.keys.lease_key(approval.id))
    assert [e["event"] for e in store.audit.audit_trail(conn, approval.id)] == ["paused"]


def test_transition_from_a_wrong_status_changes_nothing(conn):
    """A move the table forbids (pending → running) leaves the hash and the index untouched."""
    approval = stored_approval(conn)
    key = store.keys.approval_key(approval.id)
    before = conn.hgetall(key)

    result = store.transitions.transition(
        conn, approval.id, Status.RUNNING, {"started_by": "worker"}
    )

    assert result.ok is False
    assert result.previous == "pending"
    assert conn.hgetall(key) == before
    assert store.pending.pending_count(conn) == 1


@pytest.mark.parametrize("target", [Status.EXPIRED, Status.REJECTED])
def test_a_transition_narrowed_to_pending_leaves_a_running_approval_alone(conn, target):
    """With sources=[pending], a running approval (which recovery may move back) is not taken."""
    approval = stored_approval(conn)
    store.transitions.transition(conn, approval.id, Status.APPROVED, {"decided_by": "UALICE"})
    assert store.transitions.transition(conn, approval.id, Status.RUNNING).ok
    key = store.keys.approval_key(approval.id)
    before = conn.hgetall(key)

    result = store.transitions.transition(
        conn, approval.id, target, {"decided_by": "system"}, sources=[Status.PENDING]
    )

    assert result == store.transitions.TransitionResult(
        ok=False, previous="running", decided_by="UALICE"
    )
    assert conn.hgetall(key) == before
    assert store.leases.running_ids(conn) == [approval.id]


def test_a_transition_narrowed_to_pending_still_decides_a_pending_one(conn):
    """sources=[pending] does not stop the ordinary decision."""
    approval = stored_approval(conn)
    result = store.transitions.transition(
        conn, approval.id, Status.EXPIRED, sources=[Status.PENDING]
    )
    assert result == store.transitions.TransitionResult(
        ok=True, previous="pending", decided_by=None
    )
    assert store.records.load(conn, approval.id).status is Status.EXPIRED
    assert store.pending.pending_count(conn) == 0


def test_without_sources_a_transition_takes_every_legal_source(conn):
    """Unnarrowed, running may go back to a decided status (how recovery requeues a run)."""
    approval = stored_approval(conn)
    store.transitions.transition(conn, approval.id, Status.APPROVED)
    assert store.transitions.transition(conn, approval.id, Status.RUNNING).ok
    assert store.transitions.transition(conn, approval.id, Status.APPROVED).ok
    assert store.records.load(conn, approval.id).status is Status.APPROVED
    assert store.leases.running_ids(conn) == []


def test_transition_of_an_unknown_approval_reports_nothing_found(conn):
    """Transitioning an id that does not exist fails with no previous status and creates nothing."""
    result = store.transitions.transition(conn, "nope", Status.APPROVED, {"decided_by": "UALICE"})
    assert result == store.transitions.TransitionResult(ok=False, previous="", decided_by=None)
    assert conn.exists(store.keys.approval_key("nope")) == 0


def test_a_full_run_follows_the_table(conn):
    """pending → approved → running → completed, and a completed approval moves no further."""
    approval = stored_approval(conn)
    assert store.transitions.transition(conn, approval.id, Status.APPROVED).ok
    assert store.transitions.transition(conn, approval.id, Status.RUNNING).ok
    assert not store.transitions.transition(
        conn, approval.id, Status.RUNNING
    ).ok  # resumed at most once
    assert store.transitions.transition(conn, approval.id, Status.COMPLETED).ok
    assert not store.transitions.transition(conn, approval.id, Status.FAILED).ok
    assert store.records.load(conn, approval.id).status is Status.COMPLETED


def test_twenty_racing_deciders_have_exactly_one_winner(settings, conn):
    """Concurrent clicks: exactly one transition succeeds and every loser is told who won."""
    approval = stored_approval(conn)
    client = store.connection.connect(settings)
    start = threading.Barrier(20)
    results = [None] * 20

    def decide(i):
        start.wait()
        results[i] = store.transitions.transition(
            client, approval.id, Status.APPROVED, {"decided_by": f"U{i}"}
        )

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    client.close()

    winners = [i for i, r in enumerate(results) if r.ok]
    assert len(winners) == 1
    winner = f"U{winners[0]}"
    assert conn.hget(store.keys.approval_key(approval.id), "decided_by") == winner.encode()
    losers = [r for r in results if not r.ok]
    assert all(r.previous == "approved" and r.decided_by == winner for r in losers)


def _decision(kind="approve", actor="UALICE", **extra):
    return json.dumps({"kind": kind, "actor": actor, "at": CREATED_AT + 60, **extra})


def test_vote_counts_distinct_voters_until_the_quorum(conn):
    """Each new person is counted; the approval stays pending until enough approved."""
    approval = stored_approval(conn)
    first = store.transitions.vote(
        conn, approval.id, Status.APPROVED, "UA", 3, _decision(actor="UA")
    )
    second = store.transitions.vote(
        conn, approval.id, Status.APPROVED, "UB", 3, _decision(actor="UB")
    )
    assert first == store.transitions.VoteResult("counted", count=1)
    assert second == store.transitions.VoteResult("counted", count=2)
    loaded = store.records.load(conn, approval.id)
    assert loaded.status is Status.PENDING
    assert loaded.votes == ("UA", "UB")
    assert loaded.decision is None
    assert store.pending.pending_count(conn) == 1


def test_a_second_vote_by_the_same_person_is_a_duplicate(conn):
    """The same person approving twice is reported and not counted again."""
    approval = stored_approval(conn)
    store.transitions.vote(conn, approval.id, Status.APPROVED, "UA", 2, _decision(actor="UA"))
    again = store.transitions.vote(
        conn, approval.id, Status.APPROVED, "UA", 2, _decision(actor="UA")
    )
    assert again == store.transitions.VoteResult("duplicate", count=1)
    loaded = store.records.load(conn, approval.id)
    assert loaded.status is Status.PENDING
    assert loaded.votes == ("UA",)


def test_the_vote_that_completes_the_quorum_decides(conn):
    """The last needed vote moves the approval, stores its decision and leaves the pending index."""
    approval = stored_approval(conn)
    store.transitions.vote(conn, approval.id, Status.APPROVED, "UA", 2, _decision(actor="UA"))
    decision = _decision(actor="UB", actor_name="Bob")
    result = store.transitions.vote(conn, approval.id, Status.APPROVED, "UB", 2, decision)
    assert result == store.transitions.VoteResult("decided", count=2, voters=("UA", "UB"))
    key = store.keys.approval_key(approval.id)
    assert conn.hget(key, "decision") == decision.encode()
    assert conn.hget(key, "decided_by") == b"UB"
    loaded = store.records.load(conn, approval.id)
    assert loaded.status is Status.APPROVED
    assert loaded.votes == ("UA", "UB")
    assert loaded.decision is not None and loaded.decision.actor_name == "Bob"
    assert store.pending.pending_count(conn) == 0
    assert [a.id for a in store.pending.recent_decisions(conn)] == [approval.id]


def test_a_single_vote_decides_when_one_is_required(conn):
    """With a quorum of one (every edit and response), the first vote decides."""
    approval = stored_approval(conn)
    result = store.transitions.vote(
        conn, approval.id, Status.RESPONDED, "UA", 1, _decision("respond")
    )
    assert result.outcome == "decided"
    assert store.records.load(conn, approval.id).status is Status.RESPONDED


def test_the_decision_json_is_stored_untouched(conn):
    """Empty lists and objects in edited arguments survive exactly (no Lua JSON round trip)."""
    approval = stored_approval(conn)
    arguments = {"path": "x", "tags": [], "options": {}, "nested": {"a": [], "b": {}}}
    decision = _decision("edit", arguments=arguments, reason="ünïcode ✓\n")
    assert (
        store.transitions.vote(conn, approval.id, Status.EDITED, "UA", 1, decision).outcome
        == "decided"
    )
    assert conn.hget(store.keys.approval_key(approval.id), "decision") == decision.encode()
    loaded = store.records.load(conn, approval.id)
    assert loaded.decision is not None
    assert loaded.decision.arguments == arguments
    assert json.dumps(loaded.decision.arguments) == json.dumps(arguments)


def test_a_vote_after_a_rejection_loses(conn):
    """Once someone rejected, a vote is refused and told what happened and who did it."""
    approval = stored_approval(conn)
    store.transitions.vote(conn, approval.id, Status.APPROVED, "UA", 2, _decision(actor="UA"))
    store.transitions.transition(conn, approval.id, Status.REJECTED, {"decided_by": "UREJ"})
    result = store.transitions.vote(
        conn, approval.id, Status.APPROVED, "UB", 2, _decision(actor="UB")
    )
    assert result == store.transitions.VoteResult("lost", previous="rejected", decided_by="UREJ")
    loaded = store.records.load(conn, approval.id)
    assert loaded.status is Status.REJECTED
    assert loaded.votes == ("UA",)


def test_a_vote_after_the_quorum_loses(conn):
    """A vote arriving after the approval was decided changes nothing."""
    approval = stored_approval(conn)
    store.transitions.vote(conn, approval.id, Status.APPROVED, "UA", 1, _decision(actor="UA"))
    result = store.transitions.vote(
        conn, approval.id, Status.APPROVED, "UB", 1, _decision(actor="UB")
    )
    assert result == store.transitions.VoteResult("lost", previous="approved", decided_by="UA")
    assert store.records.load(conn, approval.id).votes == ("UA",)


def test_a_vote_on_an_unknown_approval_finds_nothing(conn):
    """Voting on an id that does not exist reports no previous status and creates nothing."""
    result = store.transitions.vote(conn, "nope", Status.APPROVED, "UA", 1, _decision())
    assert result == store.transitions.VoteResult("lost", previous="", decided_by=None)
    assert conn.exists(store.keys.approval_key("nope")) == 0


def test_racing_voters_reach_the_quorum_exactly_once(settings, conn):
    """Twenty people approving at once: two are counted, one decides, the rest lose."""
    approval = stored_approval(conn)
    client = store.connection.connect(settings)
    start = threading.Barrier(20)
    results = [None] * 20

    def vote(i):
        start.wait()
        results[i] = store.transitions.vote(
            client, approval.id, Status.APPROVED, f"U{i}", 3, _decision(actor=f"U{i}")
        )

    threads = [threading.Thread(target=vote, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    client.close()

    outcomes = sorted(r.outcome for r in results)
    assert outcomes == ["counted"] * 2 + ["decided"] + ["lost"] * 17
    loaded = store.records.load(conn, approval.id)
    assert len(loaded.votes) == 3
    winner = next(f"U{i}" for i, r in enumerate(results) if r.outcome == "decided")
    assert loaded.votes[-1] == winner
    assert loaded.decision is not None and loaded.decision.actor == winner
