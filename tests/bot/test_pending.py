"""The list of waiting approvals (``/agent-pending`` and App Home), as plain dicts."""

from __future__ import annotations

import re

from approvals.cards import APPROVE_ACTION
from approvals.limits import MESSAGE_BLOCKS, MODAL_BLOCKS, SECTION_TEXT
from bot.pending import build_home, build_pending_list
from tests.factories import CREATED_AT, make_approval


def _newest_first(count):
    """``count`` approvals, newest first, as store.pending returns them."""
    return [
        make_approval(id=f"{n:016x}", created_at=CREATED_AT + n, summary=f"Delete file {n}")
        for n in reversed(range(count))
    ]


def _listed_ids(blocks):
    return [b["elements"][0]["value"] for b in blocks if b["type"] == "actions"]


def _note(blocks):
    notes = [
        e["text"]
        for b in blocks
        if b["type"] == "context"
        for e in b["elements"]
        if e["text"].startswith("Showing")
    ]
    return notes[0] if notes else None


def test_empty_list_says_nothing_is_waiting():
    """With nothing pending, the list says so and offers no buttons."""
    assert build_pending_list([], 0) == [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": "Nothing is waiting for approval."},
        }
    ]


def test_header_counts_the_waiting_approvals():
    """The header gives the total, with the right plural."""
    assert build_pending_list(_newest_first(1), 1)[0]["text"]["text"] == "1 approval waiting"
    assert build_pending_list(_newest_first(3), 3)[0]["text"]["text"] == "3 approvals waiting"


def test_list_keeps_newest_first_order():
    """Approvals appear in the order given (newest first), each with its own buttons."""
    approvals = _newest_first(3)
    blocks = build_pending_list(approvals, 3)
    assert _listed_ids(blocks) == [a.id for a in approvals]
    assert _note(blocks) is None


def test_each_item_shows_what_and_has_buttons():
    """An item names its summary, agent, tool and id, shows the arguments, and can be decided."""
    approval = make_approval(summary="Delete build/app.o")
    blocks = build_pending_list([approval], 1)
    section, actions, divider = blocks[1:4]
    text = section["text"]["text"]
    assert text.startswith("*Delete build/app.o*")
    for part in ("cleanup-bot", "`delete_path`", f"`{approval.id}`", '"path": "build/app.o"'):
        assert part in text
    assert [b["value"] for b in actions["elements"]] == [approval.id] * 3
    assert actions["elements"][0]["action_id"] == APPROVE_ACTION
    assert divider == {"type": "divider"}


def test_an_item_without_summary_is_titled_by_its_tool():
    """Without a gate summary, the tool name is the item's title."""
    blocks = build_pending_list([make_approval()], 1)
    assert blocks[1]["text"]["text"].startswith("*delete_path*")


def test_forty_approvals_fit_in_one_message_with_a_note():
    """Too many to show: the newest that fit are listed, and a note says how many of how many."""
    approvals = _newest_first(40)
    blocks = build_pending_list(approvals, 40)

    assert len(blocks) <= MESSAGE_BLOCKS
    shown = _listed_ids(blocks)
    assert shown == [a.id for a in approvals[: len(shown)]]
    note = _note(blocks)
    assert note is not None
    match = re.fullmatch(r"Showing the newest (\d+) of 40\.", note)
    assert match is not None
    assert int(match.group(1)) == len(shown)


def test_the_note_uses_the_total_not_the_page():
    """When the store returned fewer than exist, the note and header give the real total."""
    blocks = build_pending_list(_newest_first(5), 120)
    assert blocks[0]["text"]["text"] == "120 approvals waiting"
    assert _note(blocks) == "Showing the newest 5 of 120."


def test_huge_arguments_stay_short_in_the_list():
    """Each item's text fits a section, however long its arguments."""
    approval = make_approval(arguments={"content": "x" * 100_000})
    text = build_pending_list([approval], 1)[1]["text"]["text"]
    assert len(text) <= 1000
    assert "more characters not shown" in text
    long_title = make_approval(summary="s" * 5000, agent="a" * 5000)
    blocks = build_pending_list([long_title], 1)
    assert all(len(b["text"]["text"]) <= SECTION_TEXT for b in blocks if b["type"] == "section")


def test_home_is_a_home_view_within_its_block_limit():
    """The App Home tab is a home view with the same list, within 100 blocks."""
    approvals = _newest_first(40)
    view = build_home(approvals, 40)
    assert view["type"] == "home"
    assert len(view["blocks"]) <= MODAL_BLOCKS
    shown = _listed_ids(view["blocks"])
    assert len(shown) > len(_listed_ids(build_pending_list(approvals, 40)))
    assert shown == [a.id for a in approvals[: len(shown)]]


def test_home_with_nothing_waiting_says_so():
    """An empty App Home says nothing is waiting."""
    assert build_home([], 0) == {
        "type": "home",
        "blocks": [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": "Nothing is waiting for approval."},
            }
        ],
    }
