"""The pending index and its pages, and the recent decisions.

Against a private real redis-server, a fresh database per test."""

from __future__ import annotations

import time

from approvals import store
from approvals.models import Status
from tests.factories import CREATED_AT, stored_approval


def test_pending_lists_newest_first(conn):
    """The pending list shows the newest approval first, and honours the limit."""
    for n in range(3):
        stored_approval(conn, id=f"id{n}", created_at=CREATED_AT + n)
    assert [a.id for a in store.pending.pending(conn)] == ["id2", "id1", "id0"]
    assert [a.id for a in store.pending.pending(conn, limit=2)] == ["id2", "id1"]
    assert store.pending.pending_count(conn) == 3


def test_pending_is_empty_on_a_fresh_database(conn):
    """With nothing waiting, the list is empty and the count zero."""
    assert store.pending.pending(conn) == []
    assert store.pending.pending_count(conn) == 0


def test_pending_skips_a_corrupt_record(conn):
    """One unreadable record does not hide the other pending approvals."""
    stored_approval(conn, id="good", created_at=CREATED_AT)
    stored_approval(conn, id="bad", created_at=CREATED_AT + 1)
    conn.hset(store.keys.approval_key("bad"), "record", "{not json")
    assert [a.id for a in store.pending.pending(conn)] == ["good"]


def test_leaving_pending_removes_it_from_the_pending_index(conn):
    """Once decided, an approval is no longer listed or counted as pending."""
    keep = stored_approval(conn, id="keep", created_at=CREATED_AT)
    decided = stored_approval(conn, id="decided", created_at=CREATED_AT + 1)
    store.transitions.transition(conn, decided.id, Status.EDITED, {"decided_by": "UALICE"})
    assert [a.id for a in store.pending.pending(conn)] == [keep.id]
    assert store.pending.pending_count(conn) == 1


def _seven(conn):
    """id0..id6 (id6 newest); even ones from agent "even", odd ones from agent "odd"."""
    for n in range(7):
        stored_approval(
            conn, id=f"id{n}", created_at=CREATED_AT + n, agent="even" if n % 2 == 0 else "odd"
        )


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
        stored_approval(conn, id=f"id{n:03d}", created_at=CREATED_AT + n)
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


def test_recent_decisions_are_newest_first(conn):
    """Decided approvals are listed by when they were decided, newest first, up to the limit."""
    for n in range(4):
        stored_approval(conn, id=f"id{n}", created_at=CREATED_AT + n)
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
        stored_approval(conn, id=f"id{n}", created_at=CREATED_AT + n)
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
    stored_approval(conn)
    assert store.pending.recent_decisions(conn) == []


def test_recent_decisions_keep_only_the_latest_200(conn):
    """The decided index is trimmed so it never grows without bound."""
    for n in range(205):
        stored_approval(conn, id=f"id{n:03d}", created_at=CREATED_AT + n)
        store.transitions.transition(conn, f"id{n:03d}", Status.APPROVED)
    assert conn.zcard(store.keys.DECIDED_KEY) == 200
    assert [a.id for a in store.pending.recent_decisions(conn, limit=1)] == ["id204"]
