"""Previews end to end: computed where the call pauses, shown on the card and in a paged
modal, bounded in time, computed again after an Edit, and named by the receipt."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from approvals import previews, store
from approvals.config import Settings
from approvals.models import Status
from approvals.models.preview import HEAD_CHARS, PreviewKind
from approvals.proof import keys, receipts, webhooks
from approvals.slack.previews import PREVIEW_PAGE_ACTION, VIEW_PREVIEW_ACTION
from tests.agents import previewed
from tests.conftest import CHANNEL, SIGNING_SECRET
from tests.e2e import (
    approve_on_card,
    block_text,
    card_of,
    click,
    pause,
    pending_command,
    reply_containing,
    submit_edit,
    tool_runs,
    wait_status,
)
from tests.processes import bot_url, start_bot, start_worker, wait_for_workers
from tests.slack_requests import block_actions_payload, send_interaction


def _texts(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def test_a_file_diff_is_on_the_card_and_the_tool_runs_once_approved(
    env, services, slack, conn, tmp_path: Path
):
    """The gate's preview runs in the agent's process at the pause: the card shows the real
    unified diff of the file as a code block, the record holds its sha256, and after the
    approval the tool runs once, writing what the diff showed."""
    target = tmp_path / "app.cfg"
    target.write_text("port = 80\nhost = a\n", encoding="utf-8")
    pause_id = pause("write_file", {"path": str(target), "content": "port = 8080\nhost = a\n"},
                     tools=[previewed.write_file])  # fmt: skip
    card = card_of(slack, pause_id)
    text = block_text(card)
    assert "-port = 80" in text and "+port = 8080" in text and "```" in text
    approval = store.records.load(conn, pause_id)
    assert approval.preview_kind is PreviewKind.DIFF and approval.preview_sha256
    previews = tool_runs(env, "preview:write_file")
    assert len(previews) == 1  # in the agent's process, at the pause (this test's process)
    approve_on_card(slack, services.bot_url, pause_id)
    wait_status(conn, pause_id, Status.COMPLETED)
    assert len(tool_runs(env, "write_file")) == 1
    assert target.read_text(encoding="utf-8") == "port = 8080\nhost = a\n"


def _click_view(slack, bot_url: str, approval_id: str, card_ts: str) -> int:
    payload = block_actions_payload(
        user_id="UALICE", action_id=VIEW_PREVIEW_ACTION, value=approval_id,
        channel_id=CHANNEL, message_ts=card_ts,
    )  # fmt: skip
    status, _ = send_interaction(bot_url, SIGNING_SECRET, payload)
    return status


def test_a_long_preview_opens_whole_in_a_modal_in_pages(env, services, slack, conn):
    """A preview longer than a card holds: the card shows its head and View preview; the
    modal shows the first page, and Next page replaces it with the next (views.update),
    until the last line; Slack accepts every view (within its limits)."""
    lines = 6000  # about 130,000 characters: several pages
    pause_id = pause("apply_plan", {"lines": lines}, tools=[previewed.apply_plan])
    card = card_of(slack, pause_id)
    assert "line 1 of the plan" in block_text(card)
    assert f"line {lines} of the plan" not in block_text(card)
    approval = store.records.load(conn, pause_id)
    assert approval.preview_cut and len(approval.preview or "") == HEAD_CHARS
    assert conn.exists(f"approvals:preview:{pause_id}")
    assert _click_view(slack, services.bot_url, pause_id, card.ts) == 200
    opened = slack.wait_for(lambda: [v for v in slack.views() if v["method"] == "views.open"])
    shown = [opened[0]["view"]]
    while True:
        buttons = [e for b in shown[-1]["blocks"] if b["type"] == "actions"
                   for e in b["elements"] if e["text"]["text"] == "Next page"]  # fmt: skip
        if not buttons:
            break
        payload = block_actions_payload(
            user_id="UALICE", action_id=buttons[0]["action_id"], value=buttons[0]["value"],
            container_type="view", view_id=opened[0]["view_id"],
        )  # fmt: skip
        before = len(slack.views())
        assert send_interaction(services.bot_url, SIGNING_SECRET, payload)[0] == 200
        updated = slack.wait_for(lambda seen=before: slack.views()[seen:], timeout=20)
        assert updated[0]["method"] == "views.update"
        shown.append(updated[0]["view"])
        assert len(shown) < 20, "the pages never end"
    whole = "".join(_texts(v["blocks"]) for v in shown)
    assert len(shown) >= 2
    assert "line 1 of the plan" in whole and f"line {lines} of the plan" in whole
    assert all(len(v["blocks"]) <= 100 for v in shown)
    assert PREVIEW_PAGE_ACTION in _texts(shown[0]["blocks"])


def test_a_failing_preview_is_said_on_the_card_and_the_pause_goes_on(env, services, slack, conn):
    """A preview that raises: the card says "preview failed" with the error, the approval is
    pending as any other, and approving it runs the tool."""
    pause_id = pause("drop_index", {"name": "idx_users"}, tools=[previewed.drop_index])
    card = card_of(slack, pause_id)
    assert "preview failed: RuntimeError: cannot reach the catalogue for idx_users" in block_text(
        card
    )
    assert store.records.load(conn, pause_id).status is Status.PENDING
    approve_on_card(slack, services.bot_url, pause_id)
    wait_status(conn, pause_id, Status.COMPLETED)
    assert len(tool_runs(env, "drop_index")) == 1


def test_a_slow_preview_times_out_and_never_holds_the_pause(
    env, services, slack, conn, monkeypatch
):
    """A preview that hangs: the pause returns within the time limit (plus a margin), and the
    card says it timed out."""
    monkeypatch.setenv("APPROVALS_PREVIEW_TIMEOUT", "0.5")
    started = time.monotonic()
    pause_id = pause("vacuum", {"name": "events"}, tools=[previewed.vacuum])
    assert time.monotonic() - started < 5
    card = card_of(slack, pause_id)
    assert "preview timed out after 0.5 s" in block_text(card)
    assert store.records.load(conn, pause_id).status is Status.PENDING


def test_an_edited_call_shows_the_preview_of_what_then_ran(env, services, slack, conn, tmp_path):
    """After an Edit, the worker computes the preview again for the edited arguments just
    before the tool runs, and the thread's result reply shows it: the diff of what was
    written, not of what the model proposed."""
    target = tmp_path / "motd"
    target.write_text("hello\n", encoding="utf-8")
    pause_id = pause("write_file", {"path": str(target), "content": "hello world\n"},
                     tools=[previewed.write_file])  # fmt: skip
    card = card_of(slack, pause_id)
    assert "+hello world" in block_text(card)
    status, _ = submit_edit(services.bot_url, pause_id, {"content": "goodbye\n"})
    assert status == 200
    wait_status(conn, pause_id, Status.COMPLETED)
    reply = reply_containing(slack, card.ts, "Preview of the edited call")
    assert "+goodbye" in block_text(reply) and "+hello world" not in block_text(reply)
    previews = tool_runs(env, "preview:write_file")
    assert [p["arguments"]["content"] for p in previews] == ["hello world\n", "goodbye\n"]
    assert previews[0]["pid"] != previews[1]["pid"]  # the second in the worker
    assert target.read_text(encoding="utf-8") == "goodbye\n"
    trail = [json.loads(line) for line in store.audit.audit_lines(conn, pause_id)]
    recomputed = [e for e in trail if e["event"] == "preview_recomputed"]
    assert len(recomputed) == 1 and "+goodbye" in recomputed[0]["preview_head"]
    assert recomputed[0]["preview_sha256"] != trail[0]["preview_sha256"]


def test_the_receipt_audit_and_webhook_name_the_preview_that_was_shown(
    env, slack, conn, tmp_path: Path
):
    """The receipt the bot signs for an approval carries ``preview_sha256``: the SHA-256 of
    the very diff the card showed (computed here again from the file). The audit trail's
    ``paused`` entry and the webhook body record the same digest and the preview's head."""
    key = str(tmp_path / "signing.pem")
    keys.generate_key(key)
    bot = start_bot(env, tmp_path / "bot.log", {"APPROVALS_SIGNING_KEY": key})
    worker = start_worker(env, tmp_path / "worker.log", f"w-preview-{time.monotonic_ns()}")
    try:
        wait_for_workers(env, [worker], 1)
        target = tmp_path / "limits.conf"
        target.write_text("max = 1\n", encoding="utf-8")
        pause_id = pause("write_file", {"path": str(target), "content": "max = 9\n"},
                         tools=[previewed.write_file])  # fmt: skip
        card = card_of(slack, pause_id)
        click(slack, bot_url(bot), "approve", pause_id, "UALICE", card.ts)
        approval = wait_status(conn, pause_id, Status.COMPLETED)
    finally:
        bot.stop()
        worker.stop()
    diff = previews.text_diff(str(target), "max = 1\n", "max = 9\n").text  # as it was
    digest = hashlib.sha256(diff.encode()).hexdigest()
    assert approval.receipt is not None
    claims = receipts.read_receipt(approval.receipt, keys.jwks(Settings(signing_key=key)))
    assert claims.preview_sha256 == digest == approval.preview_sha256
    paused = json.loads(store.audit.audit_lines(conn, pause_id)[0])
    assert paused["event"] == "paused" and paused["preview_sha256"] == digest
    assert "+max = 9" in paused["preview_head"]
    event = {"id": "msg_1", "approval_id": pause_id, "event": "approved", "at": "1700000000"}
    body = webhooks.body_of(conn, event)
    assert body["data"]["preview"]["sha256"] == digest
    assert "+max = 9" in body["data"]["preview"]["head"]


def test_agent_pending_shows_the_first_line_and_opens_the_preview(env, services, slack, conn):
    """/agent-pending lists the call with its preview's first line and a View preview button,
    which opens the whole preview in a modal from the list."""
    pause_id = pause("apply_plan", {"lines": 3}, tools=[previewed.apply_plan])
    card_of(slack, pause_id)
    status, _, response_url = pending_command(slack, services.bot_url)
    assert status == 200
    listed = slack.wait_for(lambda: slack.responses())[-1]
    assert ":mag: Preview: line 1 of the plan" in _texts(listed["blocks"])
    view = next(e for b in listed["blocks"] if b["type"] == "actions" for e in b["elements"]
                if e["action_id"] == VIEW_PREVIEW_ACTION)  # fmt: skip
    assert view["value"] == pause_id
    payload = block_actions_payload(
        user_id="UALICE", action_id=VIEW_PREVIEW_ACTION, value=pause_id, is_ephemeral=True,
        response_url=response_url,
    )  # fmt: skip
    assert send_interaction(services.bot_url, SIGNING_SECRET, payload)[0] == 200
    opened = slack.wait_for(lambda: [v for v in slack.views() if v["method"] == "views.open"])
    assert "line 3 of the plan" in _texts(opened[0]["view"]["blocks"])
