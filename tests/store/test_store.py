"""The Redis store, against a private real redis-server (one fresh database per test)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from approvals import store
from approvals.config import Settings
from approvals.errors import CorruptRecord, UnknownApproval
from approvals.models import Status
from tests.factories import CREATED_AT, make_approval

HISTORY = [
    {"role": "user", "parts": [{"type": "text", "text": "Tidy the build folder"}]},
    {"role": "assistant", "parts": [{"type": "tool_call", "name": "delete_path"}]},
]


@pytest.fixture
def settings(env):
    return Settings.from_env()


def _create(conn, **overrides):
    approval = make_approval(**overrides)
    store.records.create(conn, approval, HISTORY).execute()
    return approval


def test_connect_reaches_the_configured_database(settings, conn):
    """connect() talks to the database named by REDIS_URL."""
    client = store.connection.connect(settings)
    client.set("probe", "1")
    assert conn.get("probe") == b"1"
    client.close()


def test_create_is_not_written_until_executed(conn):
    """create() only queues the writes: nothing exists until the caller executes the pipeline."""
    approval = make_approval()
    pipe = store.records.create(conn, approval, HISTORY)
    assert conn.dbsize() == 0
    pipe.execute()
    assert store.records.load(conn, approval.id) == approval


def test_create_then_load_and_history(conn):
    """A created approval loads back as pending, with the history it was saved with."""
    approval = _create(conn)
    loaded = store.records.load(conn, approval.id)
    assert loaded == approval
    assert loaded.status is Status.PENDING
    assert store.records.load_history(conn, approval.id) == HISTORY


def test_pending_lists_newest_first(conn):
    """The pending list shows the newest approval first, and honours the limit."""
    for n in range(3):
        _create(conn, id=f"id{n}", created_at=CREATED_AT + n)
    assert [a.id for a in store.pending.pending(conn)] == ["id2", "id1", "id0"]
    assert [a.id for a in store.pending.pending(conn, limit=2)] == ["id2", "id1"]
    assert store.pending.pending_count(conn) == 3


def test_pending_is_empty_on_a_fresh_database(conn):
    """With nothing waiting, the list is empty and the count zero."""
    assert store.pending.pending(conn) == []
    assert store.pending.pending_count(conn) == 0


def test_pending_skips_a_corrupt_record(conn):
    """One unreadable record does not hide the other pending approvals."""
    _create(conn, id="good", created_at=CREATED_AT)
    _create(conn, id="bad", created_at=CREATED_AT + 1)
    conn.hset(store.keys.approval_key("bad"), "record", "{not json")
    assert [a.id for a in store.pending.pending(conn)] == ["good"]


def test_transition_from_pending_succeeds_once(conn):
    """The first decision wins; the second is told the status and who decided."""
    approval = _create(conn)
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
    approval = _create(conn)
    decision = json.dumps({"kind": "reject", "actor": "UALICE", "at": CREATED_AT + 60})
    store.transitions.transition(conn, approval.id, Status.REJECTED, {"decision": decision})
    loaded = store.records.load(conn, approval.id)
    assert loaded.status is Status.REJECTED
    assert loaded.decision is not None and loaded.decision.actor == "UALICE"


def test_a_transition_records_its_audit_event_and_lease_in_the_same_step(conn):
    """A resume moves to running with its lease and its audit line, or with neither."""
    approval = _create(conn)
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
    approval = _create(conn)  # pending: cannot go to running
    result = store.transitions.transition(conn, approval.id, Status.RUNNING, lease=15, event="x")
    assert not result.ok
    assert not conn.exists(store.keys.lease_key(approval.id))
    assert [e["event"] for e in store.audit.audit_trail(conn, approval.id)] == ["paused"]


def test_transition_from_a_wrong_status_changes_nothing(conn):
    """A move the table forbids (pending → running) leaves the hash and the index untouched."""
    approval = _create(conn)
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
    approval = _create(conn)
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
    approval = _create(conn)
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
    approval = _create(conn)
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


def test_leaving_pending_removes_it_from_the_pending_index(conn):
    """Once decided, an approval is no longer listed or counted as pending."""
    keep = _create(conn, id="keep", created_at=CREATED_AT)
    decided = _create(conn, id="decided", created_at=CREATED_AT + 1)
    store.transitions.transition(conn, decided.id, Status.EDITED, {"decided_by": "UALICE"})
    assert [a.id for a in store.pending.pending(conn)] == [keep.id]
    assert store.pending.pending_count(conn) == 1


def test_a_full_run_follows_the_table(conn):
    """pending → approved → running → completed, and a completed approval moves no further."""
    approval = _create(conn)
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
    approval = _create(conn)
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


def test_set_card_records_the_first_card_only(conn):
    """The card's ts is recorded once; a second post does not overwrite it."""
    approval = _create(conn)
    assert store.records.set_card(conn, approval.id, "1700000001.000100") is True
    assert store.records.set_card(conn, approval.id, "1700000002.000200") is False
    assert store.records.load(conn, approval.id).card_ts == "1700000001.000100"


def test_claim_is_once_only_until_released(conn):
    """A flag can be claimed once; after release it can be claimed again."""
    approval = _create(conn)
    assert store.records.claim(conn, approval.id, "result_published") is True
    assert store.records.claim(conn, approval.id, "result_published") is False
    store.records.release(conn, approval.id, "result_published")
    assert store.records.claim(conn, approval.id, "result_published") is True


def test_flags_do_not_disturb_loading(conn):
    """Claim flags live in the same hash without breaking load()."""
    approval = _create(conn)
    store.records.claim(conn, approval.id, "result_published")
    assert store.records.load(conn, approval.id) == approval


def test_audit_trail_is_oldest_first(conn):
    """The audit trail starts with the pause and lists later events in order, details as text."""
    approval = _create(conn)
    store.audit.append(conn, approval.id, "approved", "UALICE", reason="", arguments={"path": "x"})
    store.audit.append(conn, approval.id, "resume_started", "worker")

    trail = store.audit.audit_trail(conn, approval.id)

    assert [(e["event"], e["actor"]) for e in trail] == [
        ("paused", "cleanup-bot"),
        ("approved", "UALICE"),
        ("resume_started", "worker"),
    ]
    assert trail[0]["tool"] == "delete_path"
    assert json.loads(trail[1]["arguments"]) == {"path": "x"}
    assert trail[1]["reason"] == ""
    assert all(float(e["at"]) > 0 for e in trail)


def test_audit_trail_is_one_compact_json_line_per_event(conn):
    """Each event is one JSON line in a plain list, so a waiting approval's trail stays small."""
    approval = _create(conn)
    key = store.keys.audit_key(approval.id)

    assert conn.type(key) == b"list"
    assert json.loads(conn.lindex(key, 0))["event"] == "paused"
    assert conn.memory_usage(key) < 512


def test_an_unreadable_audit_entry_is_shown_as_such_not_a_crash(conn):
    """Redis is a trust boundary: a line that is not a JSON object does not break the trail."""
    approval = _create(conn)
    conn.rpush(store.keys.audit_key(approval.id), b"\xff{not json", b"[1, 2]")
    store.audit.append(conn, approval.id, "approved", "UALICE")

    trail = store.audit.audit_trail(conn, approval.id)

    assert [e["event"] for e in trail] == ["paused", "unreadable", "unreadable", "approved"]
    assert trail[1]["raw"].endswith("{not json")


def test_audit_trail_of_an_unknown_approval_is_empty(conn):
    """An approval that never existed has no audit events."""
    assert store.audit.audit_trail(conn, "nope") == []


def test_load_of_an_unknown_id_raises_unknown_approval(conn):
    """Loading an id that does not exist raises UnknownApproval naming it."""
    with pytest.raises(UnknownApproval) as info:
        store.records.load(conn, "nope")
    assert info.value.approval_id == "nope"


def test_load_of_garbage_json_is_corrupt(conn):
    """A hash whose record is not JSON is refused."""
    conn.hset(store.keys.approval_key("x"), mapping={"record": "{not json", "status": "pending"})
    with pytest.raises(CorruptRecord):
        store.records.load(conn, "x")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("record", None),
        ("record", "[]"),
        ("status", None),
        ("status", "on hold"),
        ("status", b"\xff\xfe"),
        ("decision", "[1, 2"),
        ("result", '"completed"'),
    ],
)
def test_load_of_a_damaged_hash_is_corrupt(conn, name, value):
    """A hash with a missing or bad record, status, decision or result is refused."""
    approval = make_approval()
    mapping = {"record": json.dumps(approval.record()), "status": "pending", name: value}
    conn.hset(
        store.keys.approval_key(approval.id),
        mapping={k: v for k, v in mapping.items() if v is not None},
    )
    with pytest.raises(CorruptRecord):
        store.records.load(conn, approval.id)


def test_load_of_a_record_stored_under_another_id_is_corrupt(conn):
    """A hash holding the record of a different approval is refused."""
    approval = make_approval(id="other")
    conn.hset(
        store.keys.approval_key("mine"),
        mapping={"record": json.dumps(approval.record()), "status": "pending"},
    )
    with pytest.raises(CorruptRecord):
        store.records.load(conn, "mine")


def test_load_of_a_hash_with_a_non_utf8_field_name_is_corrupt(conn):
    """Undecodable bytes anywhere in the hash are refused as CorruptRecord."""
    approval = _create(conn)
    conn.hset(store.keys.approval_key(approval.id), b"\xff", b"1")
    with pytest.raises(CorruptRecord):
        store.records.load(conn, approval.id)


@pytest.mark.parametrize("stored", [None, "{not json", '{"role": "user"}', "[1, 2]"])
def test_load_history_of_a_missing_or_malformed_history_is_corrupt(conn, stored):
    """A history that is absent, not JSON, or not a list of messages is refused."""
    if stored is not None:
        conn.set(store.keys.history_key("x"), stored)
    with pytest.raises(CorruptRecord):
        store.records.load_history(conn, "x")


# --- votes toward a quorum ------------------------------------------------------------------------


def _decision(kind="approve", actor="UALICE", **extra):
    return json.dumps({"kind": kind, "actor": actor, "at": CREATED_AT + 60, **extra})


def test_vote_counts_distinct_voters_until_the_quorum(conn):
    """Each new person is counted; the approval stays pending until enough approved."""
    approval = _create(conn)
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
    approval = _create(conn)
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
    approval = _create(conn)
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
    approval = _create(conn)
    result = store.transitions.vote(
        conn, approval.id, Status.RESPONDED, "UA", 1, _decision("respond")
    )
    assert result.outcome == "decided"
    assert store.records.load(conn, approval.id).status is Status.RESPONDED


def test_the_decision_json_is_stored_untouched(conn):
    """Empty lists and objects in edited arguments survive exactly (no Lua JSON round trip)."""
    approval = _create(conn)
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
    approval = _create(conn)
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
    approval = _create(conn)
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
    approval = _create(conn)
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


# --- pages of pending approvals -------------------------------------------------------------------


def _seven(conn):
    """id0..id6 (id6 newest); even ones from agent "even", odd ones from agent "odd"."""
    for n in range(7):
        _create(conn, id=f"id{n}", created_at=CREATED_AT + n, agent="even" if n % 2 == 0 else "odd")


def _ids(page):
    return [a.id for a in page]


def _shape(page):
    """A page as (ids, remaining, exact), to compare in one assertion."""
    return (_ids(page.approvals), page.remaining, page.exact)


def test_pending_page_is_newest_first_with_what_remains(conn):
    """The first page holds the newest ones; remaining says how many come after it."""
    _seven(conn)
    page = store.pending.pending_page(conn, lambda a: True, 0, 3)
    assert isinstance(page, store.pending.Page)
    assert _ids(page.approvals) == ["id6", "id5", "id4"]
    assert page.remaining == 4
    assert page.exact is True


def test_pending_page_skips_the_offset(conn):
    """Later pages start after the offset; the last page has nothing remaining."""
    _seven(conn)
    assert _shape(store.pending.pending_page(conn, lambda a: True, 3, 3)) == (
        ["id3", "id2", "id1"],
        1,
        True,
    )
    assert _shape(store.pending.pending_page(conn, lambda a: True, 6, 3)) == (["id0"], 0, True)


def test_pending_page_past_the_end_is_empty(conn):
    """An offset beyond the list gives an empty page and nothing remaining."""
    _seven(conn)
    assert store.pending.pending_page(conn, lambda a: True, 20, 3) == store.pending.Page(
        [], 0, exact=True
    )


def test_pending_page_filters_before_paging(conn):
    """Offset and remaining count only the approvals the filter keeps."""
    _seven(conn)
    keep = lambda a: a.agent == "even"  # noqa: E731
    assert _shape(store.pending.pending_page(conn, keep, 0, 2)) == (["id6", "id4"], 2, True)
    assert _shape(store.pending.pending_page(conn, keep, 2, 2)) == (["id2", "id0"], 0, True)


def test_pending_page_reads_across_batches(conn):
    """A filter that keeps few approvals still fills the page from later batches."""
    _seven(conn)
    keep = lambda a: a.agent == "odd"  # noqa: E731
    assert _shape(store.pending.pending_page(conn, keep, 0, 3, batch=2)) == (
        ["id5", "id3", "id1"],
        0,
        True,
    )
    # The page fills in the second batch; the third batch finds id1 after it and stops
    # there, so the count is only a lower bound.
    assert _shape(store.pending.pending_page(conn, keep, 1, 1, batch=2)) == (["id3"], 1, False)


def test_pending_page_on_an_empty_database(conn):
    """With nothing pending the page is empty, and that is exact."""
    assert store.pending.pending_page(conn, lambda a: True, 0, 15) == store.pending.Page(
        [], 0, exact=True
    )


def test_pending_page_skips_decided_and_corrupt_approvals(conn):
    """Decided approvals leave the list, and a corrupt one does not hide the others."""
    _seven(conn)
    store.transitions.transition(conn, "id6", Status.APPROVED)
    conn.hset(store.keys.approval_key("id5"), "record", "{not json")
    assert _shape(store.pending.pending_page(conn, lambda a: True, 0, 2)) == (
        ["id4", "id3"],
        3,
        True,
    )


def test_remaining_is_not_cut_short_by_the_batch_the_page_ends_in(conn):
    """An undercount of what remains is never presented as exact.

    With 7 pending read 3 at a time, the first page of 2 fills in the first batch: what
    remains is then only counted to the batch's end, and the page says it is a lower bound.
    """
    _seven(conn)
    page = store.pending.pending_page(conn, lambda a: True, 0, 2, batch=3)
    assert _ids(page.approvals) == ["id6", "id5"]
    assert 1 <= page.remaining <= 5
    assert page.exact is (page.remaining == 5)
    assert page.exact is False


def test_pending_page_over_several_batches_is_exact_only_when_all_was_read(conn):
    """250 pending, read 100 at a time: early pages give a lower bound, the last an exact count."""
    for n in range(250):
        _create(conn, id=f"id{n:03d}", created_at=CREATED_AT + n)
    newest = [f"id{n:03d}" for n in reversed(range(250))]
    keep = lambda a: True  # noqa: E731

    first = store.pending.pending_page(conn, keep, 0, 15, batch=100)
    assert _shape(first) == (newest[:15], 85, False)

    middle = store.pending.pending_page(conn, keep, 120, 15, batch=100)
    assert _shape(middle) == (newest[120:135], 65, False)

    # The page ends exactly where the second batch does: the third batch is read in full.
    boundary = store.pending.pending_page(conn, keep, 185, 15, batch=100)
    assert _shape(boundary) == (newest[185:200], 50, True)

    late = store.pending.pending_page(conn, keep, 210, 15, batch=100)
    assert _shape(late) == (newest[210:225], 25, True)

    last = store.pending.pending_page(conn, keep, 240, 15, batch=100)
    assert _shape(last) == (newest[240:], 0, True)

    past = store.pending.pending_page(conn, keep, 250, 15, batch=100)
    assert _shape(past) == ([], 0, True)


# --- recent decisions and user groups -------------------------------------------------------------


def test_recent_decisions_are_newest_first(conn):
    """Decided approvals are listed by when they were decided, newest first, up to the limit."""
    for n in range(4):
        _create(conn, id=f"id{n}", created_at=CREATED_AT + n)
    for approval_id, target in [
        ("id2", Status.APPROVED),
        ("id0", Status.REJECTED),
        ("id3", Status.EXPIRED),
    ]:
        store.transitions.transition(conn, approval_id, target)
        time.sleep(0.002)
    assert [a.id for a in store.pending.recent_decisions(conn)] == ["id3", "id0", "id2"]
    assert [a.id for a in store.pending.recent_decisions(conn, limit=2)] == ["id3", "id0"]
    assert [a.status for a in store.pending.recent_decisions(conn)] == [
        Status.EXPIRED,
        Status.REJECTED,
        Status.APPROVED,
    ]


def test_recent_decisions_keep_their_position_after_running(conn):
    """Running and finishing do not reorder the list of decisions."""
    for n in range(2):
        _create(conn, id=f"id{n}", created_at=CREATED_AT + n)
    store.transitions.transition(conn, "id0", Status.APPROVED)
    time.sleep(0.002)
    store.transitions.transition(conn, "id1", Status.APPROVED)
    store.transitions.transition(conn, "id0", Status.RUNNING)
    store.transitions.transition(conn, "id0", Status.COMPLETED)
    recent = store.pending.recent_decisions(conn)
    assert [a.id for a in recent] == ["id1", "id0"]
    assert recent[1].status is Status.COMPLETED


def test_recent_decisions_are_empty_at_first(conn):
    """Nothing decided, nothing recent."""
    _create(conn)
    assert store.pending.recent_decisions(conn) == []


def test_recent_decisions_keep_only_the_latest_200(conn):
    """The decided index is trimmed so it never grows without bound."""
    for n in range(205):
        _create(conn, id=f"id{n:03d}", created_at=CREATED_AT + n)
        store.transitions.transition(conn, f"id{n:03d}", Status.APPROVED)
    assert conn.zcard(store.keys.DECIDED_KEY) == 200
    assert [a.id for a in store.pending.recent_decisions(conn, limit=1)] == ["id204"]


def test_a_cached_user_group_is_read_back_until_it_expires(conn):
    """Group members are cached with a time to live; an unknown group is not cached."""
    store.caches.cache_members(conn, "S1", ["UA", "UB"], ttl=60)
    assert store.caches.cached_members(conn, "S1") == ["UA", "UB"]
    assert 0 < conn.ttl(f"{store.keys.PREFIX}usergroup:S1") <= 60
    assert store.caches.cached_members(conn, "S2") is None


def test_an_empty_group_is_cached_as_empty(conn):
    """A group with no members is cached as an empty list, not as missing."""
    store.caches.cache_members(conn, "S1", [], ttl=60)
    assert store.caches.cached_members(conn, "S1") == []


@pytest.mark.parametrize("stored", ['{"UA": 1}', '["UA", 2]', '"UA"'])
def test_a_malformed_group_cache_is_ignored(conn, stored):
    """A cached value that is not a list of ids is treated as not cached."""
    conn.set(f"{store.keys.PREFIX}usergroup:S1", stored)
    assert store.caches.cached_members(conn, "S1") is None


def test_a_turn_is_settled_once_when_its_last_call_is_decided(conn):
    """settle_turn: False while a call waits or owes what follows its decision; True once,
    for the first caller to find every call decided and carried out; a turn's record reads
    with all its calls, and only the lead is a pause."""
    ids = ("aaaa000000000001", "aaaa000000000002")
    pipe = None
    for n, approval_id in enumerate(ids):
        approval = make_approval(id=approval_id, tool_call_id=f"tc_{n}", turn=ids, run_id="run-t")
        pipe = store.records.create(conn, approval, HISTORY if n == 0 else [], pipeline=pipe,
                            in_run=n == 0)  # fmt: skip
    pipe.execute()
    assert [a.id for a in store.records.load(conn, ids[1]).turn_calls] == list(ids)
    assert store.runs.run_pauses(conn, "run-t") == [ids[0]]
    assert store.turns.turn_of(conn, ids[1]) == ids and store.turns.turn_of(conn, "nope") == ()
    assert store.turns.turn_pending(conn, ids) == list(ids)
    store.transitions.transition(conn, ids[0], Status.APPROVED, sources=[Status.PENDING])
    assert not store.turns.settle_turn(conn, ids)
    store.transitions.transition(conn, ids[1], Status.REJECTED, sources=[Status.PENDING])
    assert store.turns.turn_pending(conn, ids) == []
    assert not store.turns.settle_turn(conn, ids)  # decided, but what follows is not carried out
    for approval_id in ids:
        assert store.owed.carry_out(conn, approval_id, lambda owed: ([], lambda pipe: None))
    assert [store.turns.settle_turn(conn, ids) for _ in range(3)] == [True, False, False]
