"""The approval card and its thread messages: pure Block Kit, asserted as plain dicts."""

from __future__ import annotations

import json
import re
import time

import pytest

from approvals.models import DecisionKind, OnReject, Policy, RunResult, SiblingResult, Status
from approvals.secrets import DEFAULT_SECRET_NAMES, MASK, secret_names
from approvals.slack.cards import (
    APPROVE_ACTION,
    EDIT_ACTION,
    REJECT_ACTION,
    RESPOND_ACTION,
    arguments_text,
    build_card,
    build_card_text,
    build_decision_message,
    build_result_messages,
    build_vote_message,
    build_warning_message,
    decision_line,
    describe_state,
    edit_diff,
    plain_text,
    slack_date,
)
from approvals.slack.limits import (
    FIELD_TEXT,
    HEADER_TEXT,
    MESSAGE_BLOCKS,
    SECTION_TEXT,
    SIBLING_PREVIEW,
)
from tests.factories import CREATED_AT, make_approval, make_decided, make_decision


def _of_type(blocks, kind):
    return [b for b in blocks if b["type"] == kind]


def _texts(blocks):
    """Every text string in the blocks, flattened."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(blocks)
    return "\n".join(found)


def _assert_within_slack_limits(blocks):
    """The limits Slack enforces on a message: block count and text lengths per block type."""
    assert len(blocks) <= MESSAGE_BLOCKS
    for block in blocks:
        if block["type"] == "header":
            assert len(block["text"]["text"]) <= HEADER_TEXT
        if block["type"] == "section":
            if "text" in block:
                assert len(block["text"]["text"]) <= SECTION_TEXT
            for field in block.get("fields", []):
                assert len(field["text"]) <= FIELD_TEXT
        if block["type"] == "context":
            assert len(block["elements"]) <= 10
            for element in block["elements"]:
                assert len(element["text"]) <= SECTION_TEXT


# --- the card ----------------------------------------------------------------------------------


def test_card_header_names_the_tool():
    """The header says an approval is needed, and for which tool."""
    header = build_card(make_approval())[0]
    assert header == {
        "type": "header",
        "text": {"type": "plain_text", "text": "Approval needed: delete_path"},
    }


def test_card_shows_the_summary_in_bold():
    """The gate's summary is the first thing under the header."""
    blocks = build_card(make_approval(summary="Delete build/app.o"))
    assert blocks[1] == {
        "type": "section",
        "text": {"type": "mrkdwn", "text": "*Delete build/app.o*"},
    }


def test_card_fields_name_agent_tool_and_requester():
    """Agent, tool and who asked are shown as fields; the requester as a mention."""
    blocks = build_card(make_approval(requested_by="UREQ"))
    fields = next(b["fields"] for b in blocks if "fields" in b)
    assert [f["text"] for f in fields] == [
        "*Agent*\ncleanup-bot",
        "*Tool*\n`delete_path`",
        "*Requested by*\n<@UREQ>",
    ]


def test_card_without_a_requester_has_two_fields():
    """No requester, no requester field."""
    fields = next(b["fields"] for b in build_card(make_approval()) if "fields" in b)
    assert len(fields) == 2


def test_card_shows_the_arguments_in_a_code_block():
    """The proposed arguments are pretty JSON inside a code block."""
    approval = make_approval(arguments={"path": "build/app.o", "recursive": True})
    blocks = build_card(approval)
    code = [b for b in blocks if b.get("text", {}).get("text", "").startswith("```")]
    assert len(code) == 1
    text = code[0]["text"]["text"]
    assert text.endswith("```")
    assert json.loads(text.strip("`\n")) == {"path": "build/app.o", "recursive": True}


def test_card_shows_a_bare_key_and_masks_a_key_that_looks_secret():
    """``delete_key(key=...)`` shows which key; a value that looks secret is masked."""
    names = secret_names(["key"], DEFAULT_SECRET_NAMES)
    shown = build_card(make_approval(arguments={"key": "prod/db/users"}, secret_arguments=names))
    assert '"key": "prod/db/users"' in _texts(shown)
    token = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
    masked = _texts(build_card(make_approval(arguments={"key": token}, secret_arguments=names)))
    assert token not in masked and f'"key": "{MASK}"' in masked


def test_plain_text_gives_a_terminal_local_times_and_no_slack_markup():
    """Dates become local times, mentions ``@id``, links label and address, escapes undone."""
    at = CREATED_AT + 60
    text = plain_text(
        f"approved by <@UALICE> {slack_date(at)} for <!subteam^SOPS> and <#C1|ops>: "
        "see <https://example.com/run|the run>, &lt;b&gt; &amp; <https://example.com>"
    )
    local = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(at))
    assert text == (
        f"approved by @UALICE {local} for @SOPS and #ops: "
        "see the run (https://example.com/run), <b> & https://example.com"
    )


def test_card_lists_siblings_that_already_ran():
    """Calls of the same turn that already ran are shown in a context block, on one line each."""
    approval = make_approval(
        siblings=[
            SiblingResult("list_files", '["build/app.o",\n"build/app"]'),
            SiblingResult("read_file", "contents"),
        ]
    )
    contexts = _of_type(build_card(approval), "context")
    text = contexts[0]["elements"][0]["text"]
    assert text.startswith("Already ran this turn:")
    assert '• `list_files` → ["build/app.o", "build/app"]' in text
    assert "• `read_file` → contents" in text


def test_a_long_sibling_result_is_cut_with_a_mark_and_one_that_fits_is_not():
    """The record keeps SIBLING_PREVIEW + 1 characters, so the card can tell a cut result."""
    cut = "x" * (SIBLING_PREVIEW + 1)
    whole = "y" * SIBLING_PREVIEW
    approval = make_approval(
        siblings=[SiblingResult("read_file", cut), SiblingResult("list_files", whole)]
    )
    text = _of_type(build_card(approval), "context")[0]["elements"][0]["text"]
    assert f"• `read_file` → {'x' * (SIBLING_PREVIEW - 1)}…\n" in text
    assert text.endswith(f"• `list_files` → {whole}")


def test_card_without_siblings_has_no_sibling_context():
    """No siblings, no "Already ran" line."""
    assert "Already ran" not in _texts(build_card(make_approval()))


def test_pending_card_has_one_actions_block_with_four_buttons():
    """While pending: Approve, Reject, Edit and Respond, each carrying only the approval id."""
    approval = make_approval()
    actions = _of_type(build_card(approval), "actions")
    assert len(actions) == 1
    buttons = [e for e in actions[0]["elements"] if e["type"] == "button"]  # beside: the scope menu
    assert [b["text"]["text"] for b in buttons] == ["Approve", "Reject", "Edit", "Respond"]
    assert {b["value"] for b in buttons} == {approval.id}
    assert [b["action_id"] for b in buttons] == [
        APPROVE_ACTION,
        REJECT_ACTION,
        EDIT_ACTION,
        RESPOND_ACTION,
    ]
    assert len({b["action_id"] for b in buttons}) == 4


def test_approve_button_asks_for_confirmation():
    """Approve needs a second click that names the tool; Reject and Edit open modals instead."""
    elements = _of_type(build_card(make_approval()), "actions")[0]["elements"]
    buttons = [e for e in elements if e["type"] == "button"]
    assert "delete_path" in buttons[0]["confirm"]["text"]["text"]
    assert buttons[0]["style"] == "primary"
    assert buttons[1]["style"] == "danger"


def test_pending_card_says_it_is_waiting():
    """A pending card says it waits for a decision."""
    assert "Waiting for a decision" in _texts(build_card(make_approval()))


@pytest.mark.parametrize(
    "status",
    [
        Status.APPROVED,
        Status.EDITED,
        Status.REJECTED,
        Status.RUNNING,
        Status.COMPLETED,
        Status.FAILED,
        Status.PAUSED,
        Status.RESPONDED,
        Status.EXPIRED,
    ],
)
def test_decided_card_has_no_buttons(status):
    """Once decided, the buttons are gone, so nobody can click again."""
    blocks = build_card(make_decided(status))
    assert _of_type(blocks, "actions") == []


@pytest.mark.parametrize(
    ("actor", "shown"), [("UALICE", "<@UALICE>"), ("cli:alice", "alice (CLI)")]
)
def test_decided_card_says_who_decided(actor, shown):
    """The state line names the decider: a Slack mention, or the CLI login."""
    approval = make_approval(
        status=Status.APPROVED, decision=make_decision(DecisionKind.APPROVE, actor)
    )
    state = _of_type(build_card(approval), "context")[-1]["elements"][0]["text"]
    assert state.startswith(":white_check_mark: Approved · approved by ")
    assert shown in state


def test_rejected_card_shows_the_reason():
    """A rejection reason is shown on the card."""
    approval = make_approval(
        status=Status.REJECTED,
        decision=make_decision(DecisionKind.REJECT, "UBOB", reason="wrong folder"),
    )
    state = _texts(build_card(approval))
    assert "rejected by <@UBOB>" in state
    assert state.endswith(": wrong folder")


def test_failed_card_shows_the_error():
    """A failed run shows its error on the card."""
    state = _texts(build_card(make_decided(Status.FAILED)))
    assert ":x: Failed" in state
    assert "ResumeError: tool vanished" in state


def _buttons(approval):
    (actions,) = _of_type(build_card(approval), "actions")
    return [b["text"]["text"] for b in actions["elements"] if b["type"] == "button"]


def _fields(approval):
    return [f["text"] for f in next(b["fields"] for b in build_card(approval) if "fields" in b)]


def test_respond_button_opens_a_modal_without_confirmation():
    """Respond carries the id, asks for no confirm dialog and is not styled as a decision."""
    approval = make_approval()
    buttons = _of_type(build_card(approval), "actions")[0]["elements"]
    respond = next(b for b in buttons if b["action_id"] == RESPOND_ACTION)
    assert respond["value"] == approval.id
    assert "confirm" not in respond
    assert "style" not in respond


def test_no_edit_button_when_nothing_is_editable():
    """With editable=() there is nothing to edit: Approve, Reject and Respond only."""
    assert _buttons(make_approval(policy=Policy(editable=()))) == ["Approve", "Reject", "Respond"]


def test_no_edit_button_when_the_editable_names_match_no_argument():
    """An editable list naming no argument of the tool leaves nothing to edit either."""
    approval = make_approval(policy=Policy(editable=("nonexistent",)))
    assert _buttons(approval) == ["Approve", "Reject", "Respond"]


def test_edit_button_when_some_arguments_are_editable():
    """One editable argument is enough for the Edit button."""
    approval = make_approval(policy=Policy(editable=("recursive",)))
    assert _buttons(approval) == ["Approve", "Reject", "Edit", "Respond"]


def test_a_quorum_offers_only_approve_and_reject():
    """When two approvals are required nobody edits or answers alone: no Edit, no Respond."""
    assert _buttons(make_approval(policy=Policy(approvals_required=2))) == ["Approve", "Reject"]


@pytest.mark.parametrize(
    ("votes", "shown"),
    [
        ((), "*Approvals*\n0 of 2 (none yet)"),
        (("UALICE",), "*Approvals*\n1 of 2 (<@UALICE>)"),
        (("UALICE", "cli:bob"), "*Approvals*\n2 of 2 (<@UALICE>, bob (CLI))"),
    ],
)
def test_a_quorum_card_counts_the_votes_and_names_the_voters(votes, shown):
    """The Approvals field says how many of how many approved, and who."""
    approval = make_approval(policy=Policy(approvals_required=2), votes=votes)
    assert _fields(approval)[-1] == shown


def test_a_single_approval_has_no_approvals_field():
    """Without a quorum there is nothing to count."""
    assert not any(f.startswith("*Approvals*") for f in _fields(make_approval()))


def test_a_pending_card_shows_when_it_expires():
    """While pending, the Expires field shows the expiry as a Slack date."""
    approval = make_approval(expires_at=CREATED_AT + 3600)
    assert f"*Expires*\n{slack_date(CREATED_AT + 3600)}" in _fields(approval)
    assert slack_date(CREATED_AT + 3600) == (
        "<!date^1700003600^{date_short_pretty} {time}|1700003600>"
    )


@pytest.mark.parametrize("status", [Status.APPROVED, Status.RUNNING, Status.EXPIRED])
def test_a_decided_card_no_longer_shows_the_expiry(status):
    """Once decided (or expired) the Expires field is gone."""
    approval = make_decided(status, expires_at=CREATED_AT + 3600)
    assert not any(f.startswith("*Expires*") for f in _fields(approval))


def test_a_card_without_an_expiry_time_has_no_expires_field():
    """expires_at 0 (not set) shows no Expires field."""
    assert not any(f.startswith("*Expires*") for f in _fields(make_approval()))


def test_an_edited_card_shows_the_diff():
    """The card of an edited approval shows what the reviewer changed."""
    approval = make_approval(
        status=Status.EDITED,
        decision=make_decision(DecisionKind.EDIT, arguments={"path": "build/tmp.o"}),
    )
    text = _texts(build_card(approval))
    assert f"*Edited before running:*\n{edit_diff(approval)}" in text


def test_a_long_edit_diff_on_the_card_keeps_its_code_block_closed():
    """A huge edit still shows a closed code block on the card."""
    approval = make_approval(
        status=Status.EDITED,
        decision=make_decision(DecisionKind.EDIT, arguments={"path": "b" * 5000}),
    )
    blocks = build_card(approval)
    _assert_within_slack_limits(blocks)
    (diff,) = [b for b in blocks if "Edited before running" in b.get("text", {}).get("text", "")]
    assert diff["text"]["text"].endswith("```")


def test_a_plain_approval_card_shows_no_diff():
    """Only an edit puts a diff on the card."""
    approval = make_approval(status=Status.APPROVED, decision=make_decision())
    assert "Edited before running" not in _texts(build_card(approval))


# --- decision lines ----------------------------------------------------------------------------


def test_decision_line_of_a_response():
    """A response says the reviewer answered instead of the tool, who and when."""
    approval = make_approval(
        status=Status.RESPONDED,
        decision=make_decision(DecisionKind.RESPOND, "UALICE", response="it is gone already"),
    )
    assert decision_line(approval) == (
        f"answered instead of the tool by <@UALICE> {slack_date(CREATED_AT + 60)}"
    )
    assert describe_state(approval).startswith(":speech_balloon: Answered by a reviewer · ")


def test_decision_line_of_an_expiry_names_no_person():
    """An expiry says when it expired, not who (the timer is nobody)."""
    approval = make_approval(
        status=Status.EXPIRED, decision=make_decision(DecisionKind.EXPIRE, "system")
    )
    assert decision_line(approval) == f"expired {slack_date(CREATED_AT + 60)}"
    assert describe_state(approval) == (
        f":alarm_clock: Expired without a decision · expired {slack_date(CREATED_AT + 60)}"
    )


def test_decision_line_of_a_quorum_names_every_approver():
    """An approval decided by a quorum credits everyone who approved, in order."""
    approval = make_approval(
        status=Status.APPROVED,
        policy=Policy(approvals_required=2),
        votes=("UALICE", "UBOB"),
        decision=make_decision(DecisionKind.APPROVE, "UBOB"),
    )
    assert decision_line(approval).startswith("approved by <@UALICE>, <@UBOB> ")


def test_a_rejection_after_partial_votes_names_the_rejecter():
    """Rejecting a quorum that already has approvals credits the person who rejected."""
    approval = make_approval(
        status=Status.REJECTED,
        policy=Policy(approvals_required=3),
        votes=("UA", "UB"),
        decision=make_decision(DecisionKind.REJECT, "UC", reason="no"),
    )
    assert decision_line(approval).startswith("rejected by <@UC> ")


@pytest.mark.parametrize("status", [Status.REJECTED, Status.EXPIRED])
def test_a_stopped_run_says_so(status):
    """A rejection or expiry under on_reject=stop says the run was stopped there."""
    kind = DecisionKind.REJECT if status is Status.REJECTED else DecisionKind.EXPIRE
    approval = make_approval(
        status=status,
        policy=Policy(on_reject=OnReject.STOP),
        decision=make_decision(kind, "UALICE" if kind is DecisionKind.REJECT else "system"),
    )
    assert "The run was stopped here" in describe_state(approval)
    assert "The run stops here" in _texts(build_decision_message(approval))


@pytest.mark.parametrize("status", [Status.REJECTED, Status.EXPIRED])
def test_a_resumed_refusal_does_not_say_stopped(status):
    """Under on_reject=resume nothing is said about stopping."""
    kind = DecisionKind.REJECT if status is Status.REJECTED else DecisionKind.EXPIRE
    approval = make_approval(status=status, decision=make_decision(kind))
    assert "stop" not in describe_state(approval)
    assert "stop" not in _texts(build_decision_message(approval))


def test_each_revision_of_the_state_has_its_own_block_id():
    """The state block's id changes with the status, so Slack redraws it."""
    ids = {
        _of_type(build_card(make_decided(s)), "context")[-1]["block_id"]
        for s in (Status.APPROVED, Status.RUNNING, Status.COMPLETED)
    }
    assert len(ids) == 3


def test_huge_arguments_are_cut_to_fit_with_a_note():
    """100 KB of arguments: every text fits Slack's limits, and the card says what was cut."""
    approval = make_approval(arguments={"path": "build/app.o", "content": "x" * 100_000})
    blocks = build_card(approval)
    _assert_within_slack_limits(blocks)
    code = next(b for b in blocks if b.get("text", {}).get("text", "").startswith("```"))
    text = code["text"]["text"]
    assert text.endswith("```")
    assert re.search(r"\(\d+ more characters not shown\)", text)
    assert '"path": "build/app.o"' in text


def test_the_note_counts_the_characters_not_shown():
    """The number in the note is exactly how many characters of the JSON were left out."""
    arguments = {"content": "x" * 100_000}
    body = json.dumps(arguments, indent=2)
    inner = arguments_text(arguments)[len("```\n") : -len("\n```")]
    note = re.search(r"\n… \((\d+) more characters not shown\)$", inner)
    assert note is not None
    shown = inner[: note.start()]
    assert body.startswith(shown)
    assert int(note.group(1)) == len(body) - len(shown)


def test_everything_long_is_cut_to_fit():
    """Long names, summaries, sibling outputs and reasons never push a text past Slack's limits."""
    approval = make_approval(
        agent="a" * 5000,
        tool_name="t" * 500,
        summary="s" * 5000,
        requested_by="U" * 3000,
        arguments={"k" * 4000: "v"},
        siblings=[SiblingResult("n" * 400, "o" * 5000) for _ in range(15)],
        status=Status.FAILED,
        decision=make_decision(DecisionKind.REJECT, reason="r" * 5000),
        result=RunResult(Status.FAILED, error="e" * 5000),
    )
    _assert_within_slack_limits(build_card(approval))
    assert len(build_card_text(approval)) <= 3000


def test_card_text_says_what_the_agent_wants():
    """The notification text names agent, tool and state."""
    assert build_card_text(make_approval()) == (
        "cleanup-bot wants to run delete_path: :hourglass_flowing_sand: Waiting for a decision"
    )


# --- thread messages ----------------------------------------------------------------------------


def test_decision_message_keeps_the_mention_and_reason_intact():
    """The thread reply names the decider with a working mention and quotes the reason as typed."""
    approval = make_approval(
        status=Status.REJECTED,
        decision=make_decision(DecisionKind.REJECT, "UALICE", reason="Use the CI cache"),
    )
    text = build_decision_message(approval)[0]["text"]["text"]
    assert text.startswith("Rejected by <@UALICE> ")
    assert text.endswith(": Use the CI cache")


def test_decision_message_for_an_edit_shows_the_diff():
    """An edit's thread reply carries the diff of what changed."""
    approval = make_approval(
        status=Status.EDITED,
        decision=make_decision(DecisionKind.EDIT, arguments={"path": "build/tmp.o"}),
    )
    blocks = build_decision_message(approval)
    assert len(blocks) == 2
    assert blocks[0]["text"]["text"].startswith("Approved with edits by ")
    assert blocks[1]["text"]["text"] == edit_diff(approval)


def test_decision_message_for_an_approval_has_no_diff():
    """A plain approval is a single line."""
    approval = make_approval(status=Status.APPROVED, decision=make_decision())
    assert len(build_decision_message(approval)) == 1


def test_decision_message_for_a_response_quotes_what_the_agent_receives():
    """A response's thread reply says who answered and quotes the text the model gets."""
    approval = make_approval(
        status=Status.RESPONDED,
        decision=make_decision(DecisionKind.RESPOND, "UALICE", response="Already deleted."),
    )
    blocks = build_decision_message(approval)
    assert blocks[0]["text"]["text"].startswith("Answered instead of the tool by <@UALICE> ")
    assert blocks[1]["text"]["text"] == "The agent receives:\n>Already deleted."
    assert len(blocks) == 2


def test_decision_message_for_a_long_response_fits():
    """A very long response is cut to fit a section."""
    approval = make_approval(
        status=Status.RESPONDED,
        decision=make_decision(DecisionKind.RESPOND, response="r" * 10_000),
    )
    _assert_within_slack_limits(build_decision_message(approval))


def test_decision_message_for_an_expiry():
    """An expiry's thread reply starts with a capital and says when."""
    approval = make_approval(
        status=Status.EXPIRED, decision=make_decision(DecisionKind.EXPIRE, "system")
    )
    assert build_decision_message(approval) == [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"Expired {slack_date(CREATED_AT + 60)}"},
        }
    ]


def test_vote_message_counts_toward_the_quorum():
    """A vote that does not decide yet says who approved and how many of how many."""
    approval = make_approval(policy=Policy(approvals_required=3), votes=("UALICE", "UBOB"))
    assert build_vote_message(approval) == [
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": "<@UBOB> approved: 2 of 3 approvals so far."},
        }
    ]


def test_warning_message_says_when_it_expires():
    """The reminder before expiry gives the expiry time and says the tool will not run."""
    approval = make_approval(expires_at=CREATED_AT + 3600)
    text = _texts(build_warning_message(approval))
    assert slack_date(CREATED_AT + 3600) in text
    assert "the tool will not run" in text


def test_edit_diff_shows_old_and_new_lines():
    """Only changed arguments appear, old value with -, new value with +."""
    approval = make_approval(
        arguments={"path": "build/app.o", "recursive": False},
        decision=make_decision(
            DecisionKind.EDIT, arguments={"path": "build/tmp.o", "recursive": False}
        ),
    )
    assert edit_diff(approval) == '```\n- path: "build/app.o"\n+ path: "build/tmp.o"\n```'


def test_edit_diff_shows_added_and_removed_arguments():
    """An argument added or dropped by the edit shows null on the side it is missing."""
    approval = make_approval(
        arguments={"path": "a", "old": 1},
        decision=make_decision(DecisionKind.EDIT, arguments={"path": "a", "new": True}),
    )
    assert edit_diff(approval).splitlines()[1:-1] == [
        "- new: null",
        "+ new: true",
        "- old: 1",
        "+ old: null",
    ]


def test_edit_diff_without_changes_says_so():
    """An edit that changed nothing says "(no change)"."""
    approval = make_approval(
        decision=make_decision(DecisionKind.EDIT, arguments={"path": "build/app.o"})
    )
    assert edit_diff(approval) == "```\n(no change)\n```"


def test_result_messages_of_a_long_answer_fit_and_lose_nothing():
    """A 20,000-character answer is split into sections of at most 3000 characters, in order."""
    answer = "".join(chr(ord("a") + i % 26) for i in range(20_000))
    approval = make_decided(Status.COMPLETED)
    approval.result = RunResult(Status.COMPLETED, text=answer)

    messages = build_result_messages(approval)

    assert len(messages) == 1
    blocks = messages[0]
    assert blocks[0] == {
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": ":checkered_flag: Final answer"}],
    }
    sections = blocks[1:]
    assert len(sections) > 1
    assert all(len(s["text"]["text"]) <= SECTION_TEXT for s in sections)
    assert "".join(s["text"]["text"] for s in sections) == answer


def test_a_very_long_answer_spreads_over_several_messages():
    """An answer too long for one message goes out as several, each within the block limit."""
    answer = "y" * 200_000
    approval = make_decided(Status.COMPLETED)
    approval.result = RunResult(Status.COMPLETED, text=answer)

    messages = build_result_messages(approval)

    assert len(messages) > 1
    for blocks in messages:
        _assert_within_slack_limits(blocks)
    sections = [b for blocks in messages for b in blocks if b["type"] == "section"]
    assert "".join(s["text"]["text"] for s in sections) == answer


def test_result_message_of_an_empty_answer_says_so():
    """A run that ends without text still gets a visible reply."""
    approval = make_decided(Status.COMPLETED)
    approval.result = RunResult(Status.COMPLETED, text=None)
    assert "(no text)" in _texts(build_result_messages(approval))


def test_result_message_of_a_failed_run_shows_the_error():
    """A failed run's reply quotes the error."""
    messages = build_result_messages(make_decided(Status.FAILED))
    assert messages == [
        [
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": ":x: The run failed: ResumeError: tool vanished",
                },
            }
        ]
    ]


def test_result_message_of_a_paused_run_points_to_the_next_card():
    """A run that paused again says so."""
    assert "paused again" in _texts(build_result_messages(make_decided(Status.PAUSED)))


def test_result_messages_first_show_what_the_tool_returned():
    """A run whose tool ran posts the tool's output, then the final answer, in one reply."""
    approval = make_decided(Status.COMPLETED)
    approval.result = RunResult(
        Status.COMPLETED,
        text="Done.",
        executed_arguments={"path": "build/app.o"},
        tool_output="deleted build/app.o",
    )
    messages = build_result_messages(approval)
    assert len(messages) == 1
    assert messages[0][0] == {
        "type": "section",
        "text": {
            "type": "mrkdwn",
            "text": "`delete_path` ran and returned:\n```\ndeleted build/app.o\n```",
        },
    }
    assert _texts(messages[0][1:]).startswith(":checkered_flag: Final answer")
    assert _texts(messages[0]).endswith("Done.")


def test_a_failed_run_still_shows_what_the_tool_returned():
    """When the tool ran and the run failed later, both the output and the error are posted."""
    approval = make_decided(Status.FAILED)
    approval.result = RunResult(
        Status.FAILED, error="boom", executed_arguments={"path": "x"}, tool_output="deleted x"
    )
    (blocks,) = build_result_messages(approval)
    assert "ran and returned" in _texts(blocks[:1])
    assert _texts(blocks[1:]) == ":x: The run failed: boom"


def test_no_tool_output_message_when_the_tool_did_not_run():
    """A response or rejection ran nothing: only the final answer is posted."""
    approval = make_decided(Status.COMPLETED, DecisionKind.RESPOND)
    approval.result = RunResult(Status.COMPLETED, text="Fine.", tool_output=None)
    messages = build_result_messages(approval)
    assert len(messages) == 1
    assert "ran and returned" not in _texts(messages)


def test_a_huge_tool_output_is_cut_to_fit():
    """100 KB of tool output still gives a message within Slack's limits."""
    approval = make_decided(Status.COMPLETED)
    approval.result = RunResult(
        Status.COMPLETED, text="ok", executed_arguments={}, tool_output="o" * 100_000
    )
    for blocks in build_result_messages(approval):
        _assert_within_slack_limits(blocks)


def test_a_tool_output_with_a_very_long_answer_stays_within_the_block_limit():
    """The first reply holds the output, the answer's heading and 40 sections: under 50."""
    approval = make_decided(Status.COMPLETED)
    approval.result = RunResult(
        Status.COMPLETED, text="z" * 200_000, executed_arguments={}, tool_output="o" * 100_000
    )
    messages = build_result_messages(approval)
    assert len(messages) > 1
    assert "ran and returned" in _texts(messages[0][:1])
    for blocks in messages:
        _assert_within_slack_limits(blocks)


def test_no_result_no_messages():
    """Before the run ends there is nothing to post."""
    assert build_result_messages(make_approval()) == []


def test_a_turn_card_lists_each_call_with_its_buttons_and_fits_slack():
    """Every call with its own buttons (or who decided it), Approve all while two wait, and
    at most 20 calls shown within 50 blocks, with a line counting the rest."""
    from approvals.slack.cards import APPROVE_ALL_ACTION, build_card

    ids = tuple(f"{n:016x}" for n in range(25))
    calls = [
        make_approval(id=i, tool_call_id=f"tc_{i}", turn=ids, arguments={"path": f"p{n}"})
        for n, i in enumerate(ids)
    ]
    calls[1] = make_decided(Status.REJECTED, DecisionKind.REJECT, id=ids[1], turn=ids)
    lead = calls[0]
    lead.turn_calls = tuple(calls)
    blocks = build_card(lead)
    assert len(blocks) <= MESSAGE_BLOCKS
    approve = [e["value"] for b in blocks if b["type"] == "actions" for e in b["elements"]
               if e.get("action_id") == "approval_approve"]  # fmt: skip
    assert approve == [ids[0], *ids[2:20]]
    text = json.dumps(blocks)
    assert "rejected by <@UALICE>" in text and "5 more calls of this turn not shown" in text
    assert APPROVE_ALL_ACTION in text
    for call in calls:
        call.status = Status.REJECTED
    assert APPROVE_ALL_ACTION not in json.dumps(build_card(lead))


def test_a_card_asked_again_after_its_state_changed_says_so_above_its_buttons():
    """A stale approval waits again: its card says the state changed since it was approved,
    then offers the buttons; a card never asked again says nothing of it."""
    from approvals.slack.cards import STALE_NOTICE, build_card

    fresh = build_card(make_approval())
    assert STALE_NOTICE not in json.dumps(fresh)
    again = build_card(make_approval(stale=1))
    texts = [b.get("text", {}).get("text") for b in again]
    at = texts.index(STALE_NOTICE)
    assert "Changed since it was approved" in STALE_NOTICE
    assert any(b["type"] == "actions" for b in again[at:])


def test_the_thread_is_told_what_changed_or_that_it_could_not_be_read():
    """The stale reply names both fingerprints, or says the state could not be read."""
    from approvals.slack.cards import build_stale_message

    assert "`v1`, now `v2`" in json.dumps(build_stale_message("v1", "v2"))
    assert "could not be read" in json.dumps(build_stale_message("v1", None))
