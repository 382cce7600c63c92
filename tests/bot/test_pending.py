"""The list of waiting approvals (``/agent-pending`` and App Home), as plain dicts."""

from __future__ import annotations

import json

import pytest

from approvals.bot.pending import (
    HOME_PAGE_SIZE,
    NEXT_PAGE_ACTION,
    PAGE_SIZE,
    build_home,
    build_pending_list,
    describe_query,
)
from approvals.models import DecisionKind, Status
from approvals.slack.cards import APPROVE_ACTION, describe_state
from approvals.slack.limits import (
    BUTTON_VALUE,
    HEADER_TEXT,
    MESSAGE_BLOCKS,
    MODAL_BLOCKS,
    SECTION_TEXT,
)
from approvals.store.pending import Page
from tests.factories import CREATED_AT, make_approval, make_decided, make_decision


def _newest_first(count):
    """``count`` approvals, newest first, as store.pending.pending returns them."""
    return [
        make_approval(id=f"{n:016x}", created_at=CREATED_AT + n, summary=f"Delete file {n}")
        for n in reversed(range(count))
    ]


def _page(approvals, remaining=0, exact=True):
    """A page as store.pending.pending_page returns it: by default the last one, counted exactly."""
    return Page(approvals, remaining, exact)


def _listed_ids(blocks):
    return [
        b["elements"][0]["value"]
        for b in blocks
        if b["type"] == "actions"
        and b["elements"][0]["action_id"] != NEXT_PAGE_ACTION
        and not b["block_id"].startswith("pending-bulk")
    ]


def _next_buttons(blocks):
    return [
        e
        for b in blocks
        if b["type"] == "actions"
        for e in b["elements"]
        if e["action_id"] == NEXT_PAGE_ACTION
    ]


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
    """With nothing pending, the list says so under its header and offers no buttons."""
    assert build_pending_list(_page([]), 0) == [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": "Waiting approvals you may decide"},
        },
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": "Nothing is waiting for approval."},
        },
    ]


def test_an_empty_later_page_says_there_are_no_more():
    """Paging past the end (the rest was decided meanwhile) says there are no more."""
    blocks = build_pending_list(_page([]), 15)
    assert blocks[1]["text"]["text"] == "No more approvals."
    assert _next_buttons(blocks) == []


def test_the_note_counts_the_approvals_shown():
    """The note under the list says which of the waiting approvals are shown."""
    assert _note(build_pending_list(_page(_newest_first(1)), 0)) == "Showing 1 to 1"
    assert _note(build_pending_list(_page(_newest_first(3)), 0)) == "Showing 1 to 3"
    assert _note(build_pending_list(_page(_newest_first(5)), 15)) == "Showing 16 to 20"


def test_list_keeps_newest_first_order():
    """Approvals appear in the order given (newest first), each with its own buttons."""
    approvals = _newest_first(3)
    blocks = build_pending_list(_page(approvals), 0)
    assert _listed_ids(blocks) == [a.id for a in approvals]
    assert _note(blocks) == "Showing 1 to 3"
    assert _next_buttons(blocks) == []


def test_each_item_shows_what_and_has_buttons():
    """An item names its summary, agent, tool and id, shows the arguments, and can be decided."""
    approval = make_approval(summary="Delete build/app.o")
    blocks = build_pending_list(_page([approval]), 0)
    section, actions, divider = blocks[1:4]
    text = section["text"]["text"]
    assert text.startswith("*Delete build/app.o*")
    for part in ("cleanup-bot", "`delete_path`", f"`{approval.id}`", '"path": "build/app.o"'):
        assert part in text
    buttons = [e for e in actions["elements"] if e["type"] == "button"]  # and the scope menu
    assert [b["value"] for b in buttons] == [approval.id] * 4
    assert actions["elements"][0]["action_id"] == APPROVE_ACTION
    assert divider == {"type": "divider"}


def test_an_item_without_summary_is_titled_by_its_tool():
    """Without a gate summary, the tool name is the item's title."""
    blocks = build_pending_list(_page([make_approval()]), 0)
    assert blocks[1]["text"]["text"].startswith("*delete_path*")


def test_forty_approvals_page_in_one_message_with_a_note():
    """Too many to show: a full page fits one message, and the note says how many remain."""
    approvals = _newest_first(40)
    blocks = build_pending_list(_page(approvals[:PAGE_SIZE], 40 - PAGE_SIZE), 0)

    assert len(blocks) <= MESSAGE_BLOCKS
    assert _listed_ids(blocks) == [a.id for a in approvals[:PAGE_SIZE]]
    assert _note(blocks) == "Showing 1 to 15, 25 more"
    assert len(_next_buttons(blocks)) == 1


def test_the_note_uses_what_remains_not_the_page():
    """The note gives how many remain after the page, not how many the page holds."""
    five = _newest_first(5)
    assert _note(build_pending_list(_page(five, 7), 0)) == "Showing 1 to 5, 7 more"
    assert _note(build_pending_list(_page(five, 99), 0)) == "Showing 1 to 5, 99 more"
    assert _note(build_pending_list(_page(five, 1), 30)) == "Showing 31 to 35, 1 more"


def test_the_note_marks_a_lower_bound_with_a_plus():
    """An exact count reads "N more" however large; a lower bound reads "N+ more"."""
    five = _newest_first(5)
    assert _note(build_pending_list(_page(five, 120, exact=True), 0)) == "Showing 1 to 5, 120 more"
    assert _note(build_pending_list(_page(five, 120, exact=False), 0)) == (
        "Showing 1 to 5, 120+ more"
    )
    assert _note(build_pending_list(_page(five, 7, exact=False), 0)) == "Showing 1 to 5, 7+ more"
    assert _note(build_pending_list(_page(five, 1, exact=False), 30)) == (
        "Showing 31 to 35, 1+ more"
    )
    # Either way there is a next page to go to.
    assert len(_next_buttons(build_pending_list(_page(five, 7, exact=False), 0))) == 1
    assert len(_next_buttons(build_pending_list(_page(five, 7, exact=True), 0))) == 1


def test_an_exact_nothing_more_has_no_plus_and_no_next_button():
    """The last page (remaining 0, exact) only says which approvals are shown."""
    blocks = build_pending_list(_page(_newest_first(5), 0, exact=True), 10)
    assert _note(blocks) == "Showing 11 to 15"
    assert _next_buttons(blocks) == []


# --- paging ----------------------------------------------------------------------------------


def test_no_next_button_on_the_last_page():
    """When nothing remains after the page there is nothing to page to."""
    blocks = build_pending_list(_page(_newest_first(PAGE_SIZE)), 0)
    assert _next_buttons(blocks) == []
    assert blocks[-1]["type"] == "context"


@pytest.mark.parametrize("query", ["", "mine", "all", "cleanup-bot", "Deploy Bot ü"])
def test_the_next_button_carries_the_next_offset_and_the_query(query):
    """The Next button's value is JSON that names where the next page starts and the filter."""
    blocks = build_pending_list(_page(_newest_first(PAGE_SIZE), 4), 30, query)
    (button,) = _next_buttons(blocks)
    assert blocks[-1]["elements"] == [button]
    assert button["text"]["text"] == "Next"
    assert json.loads(button["value"]) == {"offset": 45, "query": query}
    assert len(button["value"]) <= BUTTON_VALUE


def test_next_buttons_of_different_pages_have_different_block_ids():
    """Each page's Next block has its own id, so Slack never mixes the two up."""
    first = build_pending_list(_page(_newest_first(PAGE_SIZE), 5), 0)[-1]
    second = build_pending_list(_page(_newest_first(PAGE_SIZE), 5), PAGE_SIZE)[-1]
    assert first["block_id"] != second["block_id"]


def test_a_full_page_of_long_approvals_stays_within_the_message_limits():
    """15 items with huge fields, the note and the Next button fit Slack's message limits."""
    page = [
        make_approval(
            id=f"{n:016x}",
            summary="s" * 5000,
            agent="a" * 5000,
            requested_by="UREQ",
            arguments={"content": "x" * 100_000},
        )
        for n in range(PAGE_SIZE)
    ]
    blocks = build_pending_list(_page(page, 500, exact=False), 0, "a" * 1000)
    assert len(blocks) <= MESSAGE_BLOCKS
    assert len(blocks[0]["text"]["text"]) <= HEADER_TEXT
    assert all(len(b["text"]["text"]) <= SECTION_TEXT for b in blocks if b["type"] == "section")
    assert len(_listed_ids(blocks)) == PAGE_SIZE
    assert len(_next_buttons(blocks)) == 1


@pytest.mark.parametrize(
    ("query", "header"),
    [
        ("", "Waiting approvals you may decide"),
        ("mine", "Waiting approvals requested by you"),
        ("all", "All waiting approvals"),
        ("cleanup-bot", "Waiting approvals from cleanup-bot that you may decide"),
    ],
)
def test_describe_query_says_what_the_list_shows(query, header):
    """The header reads the filter: yours to decide, yours requested, everything, or one agent."""
    assert describe_query(query) == header
    assert build_pending_list(_page([]), 0, query)[0]["text"]["text"] == header


def test_huge_arguments_stay_short_in_the_list():
    """Each item's text fits a section, however long its arguments."""
    approval = make_approval(arguments={"content": "x" * 100_000})
    text = build_pending_list(_page([approval]), 0)[1]["text"]["text"]
    assert len(text) <= 1000
    assert "more characters not shown" in text
    long_title = make_approval(summary="s" * 5000, agent="a" * 5000)
    blocks = build_pending_list(_page([long_title]), 0)
    assert all(len(b["text"]["text"]) <= SECTION_TEXT for b in blocks if b["type"] == "section")


# --- App Home ---------------------------------------------------------------------------------


def _recent(count):
    """``count`` decided approvals, newest decision first, as
    store.pending.recent_decisions returns."""
    kinds = [DecisionKind.APPROVE, DecisionKind.REJECT, DecisionKind.RESPOND, DecisionKind.EXPIRE]
    recent = []
    for n in reversed(range(count)):
        kind = kinds[n % len(kinds)]
        recent.append(
            make_approval(
                id=f"d{n:015x}",
                summary=f"Decided {n}",
                status=kind.status,
                decision=make_decision(kind, "system" if kind is DecisionKind.EXPIRE else "UBOB"),
            )
        )
    return recent


def test_home_is_a_home_view_within_its_block_limit():
    """The App Home tab is a home view with a longer list than a message page, within 100 blocks."""
    approvals = _newest_first(HOME_PAGE_SIZE)
    view = build_home(_page(approvals, 5), _recent(10))
    assert view["type"] == "home"
    assert len(view["blocks"]) <= MODAL_BLOCKS
    shown = _listed_ids(view["blocks"])
    assert HOME_PAGE_SIZE > PAGE_SIZE
    assert shown == [a.id for a in approvals]


def test_home_sends_to_the_slash_command_instead_of_paging():
    """Home has no Next button; when more wait it points to /agent-pending."""
    blocks = build_home(_page(_newest_first(HOME_PAGE_SIZE), 5), [])["blocks"]
    assert _next_buttons(blocks) == []
    assert _note(blocks) == "Showing 1 to 20, 5 more"
    texts = [e["text"] for b in blocks if b["type"] == "context" for e in b["elements"]]
    assert "Type `/agent-pending` to see them all." in texts


def test_home_note_marks_a_lower_bound_with_a_plus():
    """Home's note, too, reads "N+ more" when only a lower bound of what remains is known."""
    blocks = build_home(_page(_newest_first(HOME_PAGE_SIZE), 80, exact=False), [])["blocks"]
    assert _note(blocks) == "Showing 1 to 20, 80+ more"
    assert _next_buttons(blocks) == []
    assert "/agent-pending" in json.dumps(blocks)


def test_home_without_more_waiting_does_not_point_to_the_command():
    """When the whole list fits, Home does not send people elsewhere."""
    blocks = build_home(_page(_newest_first(3)), [])["blocks"]
    assert "/agent-pending" not in json.dumps(blocks)


def test_home_lists_recent_decisions_newest_first():
    """Under "Recent decisions", each decided approval shows its title, agent, id and state."""
    recent = _recent(4)
    blocks = build_home(_page([]), recent)["blocks"]
    headers = [b["text"]["text"] for b in blocks if b["type"] == "header"]
    assert headers[-1] == "Recent decisions"
    start = next(i for i, b in enumerate(blocks) if b.get("text", {}).get("text") == headers[-1])
    lines = [b["text"]["text"] for b in blocks[start + 1 :]]
    assert len(lines) == 4
    for line, approval in zip(lines, recent, strict=True):
        assert line.startswith(f"*{approval.summary}* · cleanup-bot · `{approval.id}`\n")
        assert line.endswith(describe_state(approval))
    assert "Expired without a decision" in lines[0]
    assert "Answered by a reviewer" in lines[1]


def test_home_recent_decision_without_summary_is_titled_by_its_tool():
    """A decided approval without summary is named by its tool."""
    blocks = build_home(_page([]), [make_decided(Status.COMPLETED)])["blocks"]
    assert blocks[-1]["text"]["text"].startswith("*delete_path* · ")


def test_home_with_many_pending_and_recent_stays_within_100_blocks():
    """A full Home page and a long history of decisions still fit a home view."""
    view = build_home(_page(_newest_first(HOME_PAGE_SIZE), 500, exact=False), _recent(60))
    assert len(view["blocks"]) <= MODAL_BLOCKS
    assert _listed_ids(view["blocks"]) == [a.id for a in _newest_first(HOME_PAGE_SIZE)]


def test_home_with_nothing_waiting_says_so():
    """An empty App Home says nothing is waiting and that nothing was decided yet."""
    assert build_home(_page([]), []) == {
        "type": "home",
        "blocks": [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": "Waiting approvals you may decide"},
            },
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": "Nothing is waiting for approval."},
            },
            {"type": "header", "text": {"type": "plain_text", "text": "Recent decisions"}},
            {"type": "section", "text": {"type": "mrkdwn", "text": "None yet."}},
        ],
    }
