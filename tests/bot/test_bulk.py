"""Decisions in bulk from /agent-pending: pick several, each decided atomically on its own,
and what was refused is said; ``/agent-pending all`` lists the recent decisions."""

from __future__ import annotations

from approvals import store
from approvals.bot.pending import (
    BULK_APPROVE_ACTION,
    BULK_PICK_ACTION,
    build_bulk_block,
    build_pending_list,
    selected_ids,
)
from approvals.models import Status
from approvals.store.pending import Page
from tests.agents import tools
from tests.conftest import CHANNEL, SIGNING_SECRET
from tests.e2e import pause, pending_command, tool_runs, wait_status
from tests.factories import make_approval, make_decided
from tests.slack_requests import block_actions_payload, send_interaction


def _page(approvals):
    return Page(approvals, 0, exact=True)


def test_the_bulk_block_ticks_ten_per_element_and_has_two_buttons():
    """Fifteen approvals: two checkboxes (10 + 5) and Approve/Reject selected."""
    approvals = [make_approval(id=f"{i:016x}") for i in range(15)]
    block = build_bulk_block(approvals, 0)
    boxes = [e for e in block["elements"] if e["type"] == "checkboxes"]
    assert [len(b["options"]) for b in boxes] == [10, 5]
    assert [o["value"] for b in boxes for o in b["options"]] == [a.id for a in approvals]
    labels = [e["text"]["text"] for e in block["elements"] if e["type"] == "button"]
    assert labels == ["Approve selected", "Reject selected"]
    blocks = build_pending_list(_page(approvals), 0, "all", [make_decided(Status.APPROVED)] * 8)
    assert len(blocks) <= 50
    assert blocks[-1]["text"]["text"].startswith("*Recent decisions*")


def test_selected_ids_reads_every_checkboxes_element():
    """The ticked ids come from each bulk element of the state; anything else is ignored."""
    state = {
        "values": {
            "pending-bulk-0": {
                f"{BULK_PICK_ACTION}-0": {"selected_options": [{"value": "a"}, {"value": "b"}]},
                f"{BULK_PICK_ACTION}-10": {"selected_options": [{"value": "c"}]},
                "other": {"selected_options": [{"value": "x"}]},
            },
            "junk": None,
        }
    }
    assert selected_ids(state) == ["a", "b", "c"]
    assert selected_ids(None) == []


def _pause(tool, args) -> str:
    return pause(tool.__name__, args, tools=[tool])


def test_bulk_approve_decides_each_and_says_what_was_refused(services, slack, env, conn):
    """Three picked: two approved (each resumed), one refused (not an approver of its gate),
    and the answer names the refused one with its reason."""
    first = _pause(tools.delete_path, {"path": "/srv/1"})
    second = _pause(tools.delete_path, {"path": "/srv/2"})
    guarded = _pause(tools.restart_service, {"name": "db"})  # only SOPS members may decide
    status, _, _ = pending_command(slack, services.bot_url, text="all")
    assert status == 200
    listed = slack.wait_for(lambda: slack.responses())[0]
    assert any(b.get("block_id") == "pending-bulk-0" for b in listed["blocks"])

    payload = block_actions_payload(
        user_id="UALICE",
        action_id=BULK_APPROVE_ACTION,
        value="selected",
        channel_id=CHANNEL,
        response_url=slack.new_response_url(),
    )
    ticked = [{"value": i} for i in (first, second, guarded)]
    payload["state"] = {
        "values": {"pending-bulk-0": {f"{BULK_PICK_ACTION}-0": {"selected_options": ticked}}}
    }
    status, _ = send_interaction(services.bot_url, SIGNING_SECRET, payload)
    assert status == 200
    for approval_id in (first, second):
        wait_status(conn, approval_id, Status.COMPLETED)
    assert store.records.load(conn, guarded).status is Status.PENDING
    answer = slack.wait_for(
        lambda: [r for r in slack.responses() if "Refused" in r.get("text", "")]
    )[0]["text"]
    assert f"Approved 2: `{first}`, `{second}`" in answer
    assert f"`{guarded}`: you are not one of the approvers" in answer
    paths = sorted(r["arguments"]["path"] for r in tool_runs(env, "delete_path"))
    assert paths == ["/srv/1", "/srv/2"]
    assert tool_runs(env, "restart_service") == []
