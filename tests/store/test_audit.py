"""The audit trail as Redis keeps it.

Against a private real redis-server, a fresh database per test."""

from __future__ import annotations

import json

from approvals import store
from tests.factories import stored_approval


def test_audit_trail_is_oldest_first(conn):
    """The audit trail starts with the pause and lists later events in order, details as text."""
    approval = stored_approval(conn)
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
    approval = stored_approval(conn)
    key = store.keys.audit_key(approval.id)

    assert conn.type(key) == b"list"
    assert json.loads(conn.lindex(key, 0))["event"] == "paused"
    assert conn.memory_usage(key) < 512


def test_an_unreadable_audit_entry_is_shown_as_such_not_a_crash(conn):
    """Redis is a trust boundary: a line that is not a JSON object does not break the trail."""
    approval = stored_approval(conn)
    conn.rpush(store.keys.audit_key(approval.id), b"\xff{not json", b"[1, 2]")
    store.audit.append(conn, approval.id, "approved", "UALICE")

    trail = store.audit.audit_trail(conn, approval.id)

    assert [e["event"] for e in trail] == ["paused", "unreadable", "unreadable", "approved"]
    assert trail[1]["raw"].endswith("{not json")


def test_audit_trail_of_an_unknown_approval_is_empty(conn):
    """An approval that never existed has no audit events."""
    assert store.audit.audit_trail(conn, "nope") == []
