"""The approval record: created, loaded (and refused when damaged), its card, claims and flags.

Against a private real redis-server, a fresh database per test."""

from __future__ import annotations

import json

import pytest

from approvals import store
from approvals.errors import CorruptRecord, UnknownApproval
from approvals.models import Status
from approvals.models.preview import Preview, PreviewKind
from tests.factories import HISTORY, make_approval, stored_approval


def test_create_is_not_written_until_executed(conn):
    """create() only queues the writes: nothing exists until the caller executes the pipeline."""
    approval = make_approval()
    pipe = store.records.create(conn, approval, HISTORY)
    assert conn.dbsize() == 0
    pipe.execute()
    assert store.records.load(conn, approval.id) == approval


def test_create_then_load_and_history(conn):
    """A created approval loads back as pending, with the history it was saved with."""
    approval = stored_approval(conn)
    loaded = store.records.load(conn, approval.id)
    assert loaded == approval
    assert loaded.status is Status.PENDING
    assert store.records.load_history(conn, approval.id) == HISTORY


def test_set_card_records_the_first_card_only(conn):
    """The card's ts is recorded once; a second post does not overwrite it."""
    approval = stored_approval(conn)
    assert store.records.set_card(conn, approval.id, "1700000001.000100") is True
    assert store.records.set_card(conn, approval.id, "1700000002.000200") is False
    assert store.records.load(conn, approval.id).card_ts == "1700000001.000100"


def test_claim_is_once_only_until_released(conn):
    """A flag can be claimed once; after release it can be claimed again."""
    approval = stored_approval(conn)
    assert store.records.claim(conn, approval.id, "result_published") is True
    assert store.records.claim(conn, approval.id, "result_published") is False
    store.records.release(conn, approval.id, "result_published")
    assert store.records.claim(conn, approval.id, "result_published") is True


def test_flags_do_not_disturb_loading(conn):
    """Claim flags live in the same hash without breaking load()."""
    approval = stored_approval(conn)
    store.records.claim(conn, approval.id, "result_published")
    assert store.records.load(conn, approval.id) == approval


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
    approval = stored_approval(conn)
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


@pytest.mark.parametrize(
    "stored",
    ["not json", "[]", '{"head": 1}', '{"head": "x", "kind": "video", "sha256": "s", "length": 1}',
     '{"head": "long", "kind": "text", "sha256": "s", "length": 2}'],
)  # fmt: skip
def test_a_malformed_preview_computed_again_is_ignored(conn, stored):
    """Redis is a trust boundary: a damaged preview_again field leaves the pause's preview."""
    approval = make_approval(preview="rm build/app.o", preview_length=14)
    store.records.create(conn, approval, HISTORY).execute()
    conn.hset(store.keys.approval_key(approval.id), store.records.PREVIEW_AGAIN, stored)
    assert store.records.load(conn, approval.id).preview == "rm build/app.o"


def test_a_preview_computed_again_stands_in_for_the_pauses(conn):
    """preview_fields, written with a transition, make the new preview the approval's."""
    approval = make_approval(preview="rm build/app.o", preview_length=14)
    store.records.create(conn, approval, HISTORY).execute()
    again = Preview("rm build/app.o build/app.d", PreviewKind.TEXT)
    conn.hset(store.keys.approval_key(approval.id), mapping=store.records.preview_fields(again))
    loaded = store.records.load(conn, approval.id)
    assert loaded.preview == again.text and loaded.preview_sha256 == again.sha256
    assert loaded.preview_length == len(again.text) and not loaded.preview_cut
