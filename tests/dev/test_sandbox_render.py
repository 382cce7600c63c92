"""The sandbox's Block Kit renderer: every block the bot emits renders natively, anything else
shows as raw JSON, and nothing the bot (or a model's arguments) sends can inject markup."""

from __future__ import annotations

import json
import re
import time

import pytest

from approvals.bot import modals, pending
from approvals.dev.sandbox.blocks import (
    SUPPORTED_BLOCKS,
    FormState,
    raw_json,
    render_blocks,
    render_view,
)
from approvals.dev.sandbox.mrkdwn import TextContext, render_mrkdwn, render_plain
from approvals.models import DecisionKind, RunResult, SiblingResult, Status
from approvals.slack import cards
from approvals.store.pending import Page
from tests.factories import make_approval, make_decided, make_decision

CTX = TextContext(users={"UALICE": "alice"}, channels={"C0APPROVALS": "approvals"})
ENUM_SCHEMA = {
    "properties": {
        "path": {"type": "string", "description": "What to delete"},
        "mode": {"enum": ["file", "tree"], "type": "string"},
        "depth": {"type": "integer"},
        "recursive": {"type": "boolean", "default": False},
        "options": {"type": "object"},
    },
    "required": ["path"],
    "type": "object",
}


def _card(status):
    if status is Status.PENDING:
        siblings = [SiblingResult("list_files", "a\nb")]
        return cards.build_card(make_approval(siblings=siblings, requested_by="UALICE"))
    kind = DecisionKind.REJECT if status is Status.REJECTED else DecisionKind.APPROVE
    return cards.build_card(make_decided(status, kind))


def _typed_approval():
    approval = make_approval(arguments={"path": "a", "mode": "tree", "depth": 2})
    approval.tools[1].schema.update(ENUM_SCHEMA)
    return approval


def _page():
    waiting = [make_approval(id=f"{n:016x}", summary=f"Delete {n}") for n in range(3)]
    return Page(approvals=waiting, remaining=5, exact=True)


def _long_answer():
    approval = make_approval(
        status=Status.COMPLETED,
        decision=make_decision(),
        result=RunResult(Status.COMPLETED, text="x" * 9000),
    )
    return cards.build_result_messages(approval)


#: What the bot posts and opens, in every state it knows: blocks (a list) or a view (a dict).
#: Each is built inside its own test, so a builder that changes fails one case, not the file.
BOT_OUTPUTS = {
    **{f"card {s}": (lambda s=s: [_card(s)]) for s in Status},
    "decision": lambda: [
        cards.build_decision_message(make_decided(Status.EDITED, DecisionKind.EDIT))
    ],
    **{
        f"result {s}": (lambda s=s: cards.build_result_messages(make_decided(s)))
        for s in (Status.COMPLETED, Status.FAILED, Status.PAUSED)
    },
    "long result": _long_answer,
    "edit modal": lambda: [modals.build_edit_modal(_typed_approval())],
    "reject modal": lambda: [modals.build_reject_modal(_typed_approval())],
    "respond modal": lambda: [modals.build_respond_modal(_typed_approval())],
    "notice modal": lambda: [modals.build_notice_modal("Nothing changed.")],
    "pending list": lambda: [pending.build_pending_list(_page(), 0)],
    "home": lambda: [pending.build_home(_page(), [make_decided(Status.COMPLETED)])],
}


def _block_types(thing):
    blocks = thing["blocks"] if isinstance(thing, dict) else thing
    return {b["type"] for b in blocks}


@pytest.mark.parametrize("name", BOT_OUTPUTS)
def test_everything_the_bot_emits_renders_without_falling_back_to_json(name):
    """Cards in every state, thread replies, modals (typed inputs too), lists and the Home tab."""
    for thing in BOT_OUTPUTS[name]():
        assert _block_types(thing) <= SUPPORTED_BLOCKS
        html = render_view(thing, CTX) if isinstance(thing, dict) else render_blocks(thing, CTX)
        assert "bk-unknown" not in html, html


def test_a_pending_card_shows_what_a_person_decides_on():
    """Header, summary, fields, arguments, what already ran, status, and the three buttons."""
    approval = make_approval(
        summary="Delete build/app.o",
        requested_by="UALICE",
        siblings=[SiblingResult("list_files", "build/app.o")],
    )
    page = render_blocks(cards.build_card(approval), CTX)
    assert '<div class="bk-header">Approval needed: delete_path</div>' in page
    assert "<strong>Delete build/app.o</strong>" in page
    assert '<div class="bk-field"><strong>Agent</strong><br>cleanup-bot</div>' in page
    assert '<span class="mk-mention">@alice</span>' in page
    assert '<pre class="mk-pre">{\n  &quot;path&quot;' not in page  # quotes stay readable
    assert '<pre class="mk-pre">{\n  "path": "build/app.o"\n}</pre>' in page
    assert '<div class="bk-context"><span>Already ran this turn:' in page
    assert "⏳ Waiting for a decision" in page
    buttons = re.findall(r'<button type="button" class="([^"]+)" data-action-id="(\w+)"', page)
    assert ("bk-button bk-primary", cards.APPROVE_ACTION) in buttons
    assert ("bk-button bk-danger", cards.REJECT_ACTION) in buttons
    assert ("bk-button", cards.EDIT_ACTION) in buttons
    assert page.count(f'data-value="{approval.id}"') == len(buttons)
    assert f'data-block-id="decide-{approval.id}"' in page


def test_a_confirm_becomes_a_dialog_next_to_its_button():
    """Approve's confirm is a <dialog> with Slack's title, text and both labels."""
    page = render_blocks([cards.build_buttons(make_approval())], CTX)
    dialog = re.search(r"<dialog class=\"bk-confirm\">(.*?)</dialog>", page).group(1)
    assert '<h3 class="bk-confirm-title">Approve?</h3>' in dialog
    assert 'Run <code class="mk-code">delete_path</code> now?' in dialog
    assert ">Cancel</button>" in dialog and "data-confirm-ok>Approve</button>" in dialog


def test_header_divider_context_and_image_blocks():
    page = render_blocks(
        [
            {"type": "header", "text": {"type": "plain_text", "text": "3 < 4 :tada:"}},
            {"type": "divider"},
            {
                "type": "context",
                "elements": [
                    {"type": "image", "image_url": "https://x.test/a.png", "alt_text": "a"},
                    {"type": "plain_text", "text": "plain *not bold*"},
                ],
            },
            {"type": "image", "image_url": "https://x.test/b.png", "alt_text": 'b"c'},
        ],
        CTX,
    )
    assert '<div class="bk-header">3 &lt; 4 🎉</div>' in page
    assert '<hr class="bk-divider">' in page
    assert '<img class="bk-context-image" src="https://x.test/a.png" alt="a">' in page
    assert "<span>plain *not bold*</span>" in page
    assert 'alt="b&quot;c"' in page


def test_section_with_a_button_accessory():
    block = {
        "type": "section",
        "block_id": "s1",
        "text": {"type": "mrkdwn", "text": "Pick"},
        "accessory": {
            "type": "button",
            "action_id": "go",
            "value": "v",
            "text": {"type": "plain_text", "text": "Go"},
        },
    }
    page = render_blocks([block], CTX)
    assert '<div class="bk-accessory"><button type="button" class="bk-button" ' in page
    assert 'data-action-id="go" data-block-id="s1" data-value="v">Go</button>' in page


def test_inputs_render_prefilled_and_show_typed_values_and_errors():
    """Text (one line and multi-line), number and select inputs carry their ids and values."""
    view = modals.build_reject_modal(make_approval())
    form = FormState(
        values={modals.REASON_BLOCK: {modals.VALUE_ACTION: "typed <b>"}},
        errors={modals.REASON_BLOCK: "Say why"},
    )
    page = render_view(view, CTX, form)
    assert '<header class="bk-modal-title">Reject' in page
    assert (
        "data-modal-submit>Reject</button>" in page and "data-modal-close>Cancel</button>" in page
    )
    assert re.search(
        r'<textarea class="bk-textarea" rows="4" data-input="plain_text_input" '
        r'data-block-id="reason" data-action-id="value" name="reason" '
        r'maxlength="\d+">typed &lt;b&gt;</textarea>',
        page,
    )
    assert '<div class="bk-input has-error" data-block-id="reason">' in page
    assert '<div class="bk-error">Say why</div>' in page

    inputs = render_blocks(
        [
            _input("p", {"type": "plain_text_input", "action_id": "v", "initial_value": 'a"b'}),
            _input(
                "n",
                {
                    "type": "number_input",
                    "action_id": "v",
                    "is_decimal_allowed": False,
                    "initial_value": "2",
                },
                optional=True,
            ),
            _input(
                "s",
                {
                    "type": "static_select",
                    "action_id": "v",
                    "options": [_option("file"), _option("tree")],
                    "initial_option": _option("tree"),
                },
            ),
        ],
        CTX,
    )
    assert 'type="text" data-input="plain_text_input" data-block-id="p"' in inputs
    assert 'value="a&quot;b"' in inputs
    assert 'type="number" step="1" data-input="number_input" data-block-id="n"' in inputs
    assert '<span class="bk-optional">(optional)</span>' in inputs
    assert '<option value="&quot;tree&quot;" selected>tree</option>' in inputs
    assert "Select an option" not in inputs  # a select with a choice has no empty option


def test_a_home_view_and_a_modal_without_submit():
    home = render_view({"type": "home", "id": "V9", "blocks": [{"type": "divider"}]}, CTX)
    assert home == '<div class="bk-home" data-view-id="V9"><hr class="bk-divider"></div>'
    notice = render_view(modals.build_notice_modal("Gone."), CTX)
    assert "data-modal-submit" not in notice and "data-modal-close>Close</button>" in notice


@pytest.mark.parametrize(
    ("thing", "why"),
    [
        ({"type": "rich_text", "elements": []}, "unsupported block type 'rich_text'"),
        ({"type": "section"}, "could not render this section block (ValueError)"),
        ({"type": "header", "text": "not an object"}, "could not render this header block"),
        ({"no": "type"}, "unsupported block type None"),
        ("just a string", "unsupported block type None"),
        (
            {"type": "actions", "elements": [{"type": "datepicker", "action_id": "d"}]},
            "unsupported element type 'datepicker'",
        ),
        (
            {
                "type": "input",
                "label": {"type": "plain_text", "text": "When"},
                "element": {"type": "datepicker"},
            },
            "unsupported input element 'datepicker'",
        ),
    ],
)
def test_what_it_cannot_render_is_shown_as_raw_json(thing, why):
    """Unknown types and malformed blocks are shown, with their JSON, instead of crashing."""
    page = render_blocks([thing, {"type": "divider"}], CTX)
    assert f"{why}" in page.replace("&#x27;", "'")
    assert '<div class="bk-unknown">' in page and "<pre>" in page
    assert page.endswith('<hr class="bk-divider">')  # the blocks after it still render


def test_raw_json_is_escaped_and_non_lists_and_bad_views_are_raw():
    page = raw_json({"type": "x", "text": "</pre><script>alert(1)</script>"}, "why")
    assert "<script>" not in page and "&lt;/pre&gt;&lt;script&gt;" in page
    assert "blocks must be a list" in render_blocks({"type": "section"}, CTX)
    assert "unsupported view" in render_view({"type": "workflow_step"}, CTX)


def test_model_supplied_text_cannot_inject_markup():
    """Arguments come from a model: any HTML in them is shown as text, in code and out of it."""
    evil = '<img src=x onerror=alert(1)> "quoted" & <script>'
    approval = make_approval(arguments={"path": evil}, summary=f"Delete {evil}")
    page = render_blocks(cards.build_card(approval), CTX)
    assert "<img src=x" not in page and "<script>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    attrs = render_blocks(
        [
            {
                "type": "actions",
                "block_id": 'b"><x',
                "elements": [
                    {
                        "type": "button",
                        "action_id": "a",
                        "value": '"><script>',
                        "text": {"type": "plain_text", "text": "t"},
                    }
                ],
            }
        ],
        CTX,
    )
    assert (
        'data-value="&quot;&gt;&lt;script&gt;"' in attrs
        and 'data-block-id="b&quot;&gt;&lt;x"' in attrs
    )


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("*bold* _it_ ~gone~", "<strong>bold</strong> <em>it</em> <del>gone</del>"),
        ("snake_case_name 2*3*4", "snake_case_name 2*3*4"),
        (
            '`a <b>` and ```\n{"k": 1}\n```',
            '<code class="mk-code">a &lt;b&gt;</code> and <pre class="mk-pre">{"k": 1}</pre>',
        ),
        ("```unclosed", "```unclosed"),
        ("line\nnext", "line<br>next"),
        (
            "<@UALICE> <@UNKNOWN> <!here> <#C0APPROVALS>",
            '<span class="mk-mention">@alice</span> <span class="mk-mention">@UNKNOWN</span> '
            '<span class="mk-mention">@here</span> <span class="mk-mention">#approvals</span>',
        ),
        (
            "<https://x.test/?a=1&amp;b=2|the docs>",
            '<a href="https://x.test/?a=1&amp;amp;b=2" target="_blank" rel="noopener noreferrer">'
            "the docs</a>",
        ),
        (
            "a &lt;b&gt; &amp; <javascript:alert(1)|x>",
            "a &lt;b&gt; &amp; &lt;javascript:alert(1)|x&gt;",
        ),
        (":white_check_mark: :no_such_emoji:", "✅ :no_such_emoji:"),
    ],
)
def test_mrkdwn(text, html):
    assert render_mrkdwn(text, CTX) == html


def test_dates_use_slack_tokens_in_local_time():
    now = time.mktime((2026, 3, 10, 12, 0, 0, 0, 0, -1))
    ctx = TextContext(now=lambda: now)
    today = f"<!date^{int(now)}^{{date_short_pretty}} {{time}}|fallback>"
    earlier = f"<!date^{int(now - 3 * 86400)}^{{date_num}} {{time_secs}}|fallback>"
    assert render_mrkdwn(today, ctx) == "<time>Today 12:00</time>"
    assert render_mrkdwn(earlier, ctx) == "<time>2026-03-07 12:00:00</time>"
    assert render_mrkdwn("<!date^oops^{time}|when>", ctx) == "<time>when</time>"


def test_plain_text_keeps_asterisks_and_can_skip_emoji():
    assert render_plain("*a* :x:\n<b>") == "*a* ❌<br>&lt;b&gt;"
    assert render_plain(":x:", emoji=False) == ":x:"


def _input(block_id, element, optional=False):
    label = {"type": "plain_text", "text": block_id}
    return {
        "type": "input",
        "block_id": block_id,
        "label": label,
        "optional": optional,
        "element": element,
    }


def _option(value):
    return {"text": {"type": "plain_text", "text": value}, "value": json.dumps(value)}
