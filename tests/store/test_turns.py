"""Turns: several calls of one model turn, settled once.

Against a private real redis-server, a fresh database per test."""

from __future__ import annotations

from approvals import store
from approvals.models import Status
from tests.factories import HISTORY, make_approval


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
