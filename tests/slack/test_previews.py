"""The preview's builders: plain dict assertions on what Slack is asked to show."""

from __future__ import annotations

import json

from approvals.models.preview import HEAD_CHARS, Preview, PreviewKind
from approvals.slack.cards import build_card
from approvals.slack.limits import MODAL_BLOCKS, SECTION_TEXT
from approvals.slack.previews import (
    PREVIEW_PAGE_ACTION,
    VIEW_PREVIEW_ACTION,
    build_preview_blocks,
    build_preview_modal,
    first_line,
    parse_page_value,
    preview_pages,
    preview_text,
)
from tests.factories import make_approval

DIFF = "--- a/app.cfg\n+++ b/app.cfg\n@@ -1,2 +1,2 @@\n-port = 80\n+port = 8080\n host = a\n"


def _with(preview: Preview, **fields):
    approval = make_approval(**fields)
    approval.set_preview(preview)
    return approval


def _texts(blocks) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def test_a_diff_is_a_code_block_with_its_lines_and_no_button_when_it_fits():
    """A short diff is shown whole, fenced, its +/- lines as they are; nothing more to open."""
    blocks = build_preview_blocks(_with(Preview(DIFF, PreviewKind.DIFF)))
    assert len(blocks) == 1
    text = blocks[0]["text"]["text"]
    assert text.startswith("```\n--- a/app.cfg") and text.endswith("```")
    assert "-port = 80\n+port = 8080" in text


def test_a_long_preview_shows_its_head_and_view_preview():
    """A preview longer than the card's room: whole lines of its head, how many lines are
    left, within a section's limit, and the View preview button carrying the id."""
    text = "\n".join(f"row {n}" for n in range(5000))
    approval = _with(Preview(text))
    blocks = build_preview_blocks(approval)
    shown = blocks[0]["text"]["text"]
    assert len(shown) <= SECTION_TEXT and "row 0\n" in shown and "more lines" in shown
    assert approval.preview_cut and len(approval.preview or "") == HEAD_CHARS
    button = blocks[1]["elements"][0]
    assert (button["action_id"], button["value"]) == (VIEW_PREVIEW_ACTION, approval.id)


def test_plain_text_is_escaped_and_cannot_end_its_code_block():
    """Slack's three characters are escaped, and a fence inside the text is broken."""
    text, cut = preview_text(Preview("a <@U1> & b\n```\nrm -rf /"))
    assert not cut
    assert "&lt;@U1&gt; &amp; b" in text and text.count("```") == 2


def test_a_failed_preview_is_one_line_saying_so():
    """No code block, no button: the reason, as a warning."""
    blocks = build_preview_blocks(_with(Preview("preview timed out after 5 s", "failed")))
    assert blocks == [{"type": "context", "elements": [
        {"type": "mrkdwn", "text": ":warning: preview timed out after 5 s"}]}]  # fmt: skip


def test_secrets_of_the_arguments_are_masked_in_the_preview():
    """A preview that repeats a secret argument's value shows the mask, as the arguments do."""
    approval = _with(Preview("curl -H 'token: s3cr3t-value-123'"),
                     arguments={"api_token": "s3cr3t-value-123"},
                     secret_arguments=("api_token",))  # fmt: skip
    assert "s3cr3t-value-123" not in _texts(build_card(approval))


def test_the_modal_pages_the_whole_preview_within_slacks_limits():
    """Every line is on some page, each page within the modal's blocks and each section
    within its text limit; the first page has Next, the last Previous, a middle one both."""
    text = "\n".join(f"line {n}" for n in range(20_000))
    preview = Preview(text)
    pages = preview_pages(preview)
    assert len(pages) >= 3
    joined = "\n".join(chunk.strip("`\n") for page in pages for chunk in page)
    assert joined.splitlines() == text.splitlines()
    approval = _with(preview)
    labels = []
    for number in range(len(pages)):
        view = build_preview_modal(approval, preview, number)
        assert len(view["blocks"]) <= MODAL_BLOCKS
        assert all(len(b["text"]["text"]) <= SECTION_TEXT for b in view["blocks"]
                   if b["type"] == "section")  # fmt: skip
        buttons = [e for b in view["blocks"] if b["type"] == "actions" for e in b["elements"]]
        labels.append([b["text"]["text"] for b in buttons])
        for button in buttons:
            assert button["action_id"].startswith(PREVIEW_PAGE_ACTION)
            assert parse_page_value(button["value"]) is not None
    assert labels[0] == ["Next page"] and labels[-1] == ["Previous page"]
    assert labels[1] == ["Previous page", "Next page"]


def test_a_page_value_that_is_not_one_is_refused():
    """Anything but {"id": text, "page": whole number} is None."""
    assert parse_page_value(json.dumps({"id": "a1", "page": 2})) == ("a1", 2)
    for bad in ("", "[]", '{"id": 1, "page": 2}', '{"id": "a", "page": true}', "{" * 5000):
        assert parse_page_value(bad) is None


def test_lists_show_the_first_line_that_says_something():
    """A diff's first changed line (not its file header); text's first non-empty line."""
    assert first_line(_with(Preview(DIFF, PreviewKind.DIFF))) == "-port = 80"
    assert first_line(_with(Preview("\n\n  12 files, 3.1 MB\n  a.txt"))) == "12 files, 3.1 MB"
    assert first_line(make_approval()) is None
