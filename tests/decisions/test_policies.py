"""Who may decide, and how: quorum, self-approval, user groups, reasons, editable arguments,
Respond, and on_reject="stop" — end to end with real processes."""

from __future__ import annotations

import json

import pytest

from approvals import store
from approvals.models import DecisionKind, Status
from tests.agents import tools
from tests.e2e import (
    action_blocks,
    approve_values,
    block_text,
    card_of,
    card_showing,
    click,
    model_calls,
    pause,
    reply_containing,
    submit_edit,
    submit_reject,
    submit_respond,
    tool_results_seen,
    tool_runs,
    wait_status,
)

ALL = [
    tools.delete_path,
    tools.deploy,
    tools.rotate_key,
    tools.drop_table,
    tools.move_file,
    tools.restart_service,
]


def _pause(tool: str, arguments: dict, **kw) -> str:
    return pause(tool, arguments, tools=ALL, answer="finished: {results}", **kw)


def test_a_quorum_of_two_needs_two_different_approvers(services, slack, env, conn):
    """approvals_required=2: one approval is counted and shown, the second runs the tool."""
    pause_id = _pause("deploy", {"service": "api"})
    card = card_of(slack, pause_id)
    labels = [e["text"]["text"] for e in action_blocks(card)[0]["elements"]]
    assert labels == ["Approve", "Reject"]  # no single person edits or answers for a quorum
    assert "0 of 2" in block_text(card)

    click(slack, services.bot_url, "approve", pause_id, "UALICE", card.ts)
    counted = card_showing(slack, card.ts, "1 of 2")
    assert action_blocks(counted)  # still waiting, buttons stay
    assert store.records.load(conn, pause_id).status is Status.PENDING
    click(slack, services.bot_url, "approve", pause_id, "UALICE", card.ts)
    again = slack.wait_for(
        lambda: [r for r in slack.responses() if "already approved" in r["text"]]
    )
    assert "1 of 2" in again[0]["text"]
    assert tool_runs(env, "deploy") == []

    click(slack, services.bot_url, "approve", pause_id, "UBOB", card.ts)
    done = wait_status(conn, pause_id, Status.COMPLETED)
    assert done.votes == ("UALICE", "UBOB")
    assert len(tool_runs(env, "deploy")) == 1
    assert "<@UALICE>, <@UBOB>" in block_text(card_showing(slack, card.ts, "Completed"))


def test_one_rejection_ends_a_quorum(services, slack, env, conn):
    """After one approval of two, a single rejection decides: the tool never runs."""
    pause_id = _pause("deploy", {"service": "api"})
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "approve", pause_id, "UALICE", card.ts)
    card_showing(slack, card.ts, "1 of 2")
    submit_reject(services.bot_url, pause_id, "not during the freeze", user="UBOB")
    wait_status(conn, pause_id, Status.COMPLETED)
    assert tool_runs(env, "deploy") == []
    (result,) = tool_results_seen(model_calls(env)[-1])
    assert result == ("deploy", "Cancelled: rejected by ubob: not during the freeze")


def test_the_requester_cannot_approve_their_own_request(services, slack, env, conn):
    """requested_by may not decide unless the gate allows it; someone else may."""
    pause_id = _pause("delete_path", {"path": "x"}, requested_by="UREQ")
    card = card_of(slack, pause_id)
    assert "<@UREQ>" in block_text(card)  # the card shows for whom the agent acts
    click(slack, services.bot_url, "approve", pause_id, "UREQ", card.ts)
    refusal = slack.wait_for(lambda: slack.responses())[0]
    assert "someone else has to decide" in refusal["text"]
    assert store.records.load(conn, pause_id).status is Status.PENDING
    trail = store.audit.audit_trail(conn, pause_id)
    assert any(e["event"] == "refused" and e["actor"] == "UREQ" for e in trail)
    click(slack, services.bot_url, "approve", pause_id, "UOTHER", card.ts)
    wait_status(conn, pause_id, Status.COMPLETED)


def test_only_members_of_the_gates_user_group_may_decide(services, slack, env, conn):
    """approver_groups is resolved with usergroups.users.list (once, then cached)."""
    slack.usergroups = {"SOPS": ["UOPS"]}
    pause_id = _pause("restart_service", {"name": "db"})
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "approve", pause_id, "UDEV", card.ts)
    slack.wait_for(lambda: slack.responses())
    assert "not one of the approvers" in slack.responses()[0]["text"]
    click(slack, services.bot_url, "approve", pause_id, "UOPS", card.ts)
    wait_status(conn, pause_id, Status.COMPLETED)
    assert len(slack.calls("usergroups.users.list")) == 1
    assert len(tool_runs(env, "restart_service")) == 1


def test_a_required_reason_is_asked_for_inline(services, slack, env, conn):
    """reason_required=True: an empty reason is an inline error; a reason rejects."""
    pause_id = _pause("move_file", {"path": "a.txt", "dest": "/tmp"})
    card_of(slack, pause_id)
    status, body = submit_reject(services.bot_url, pause_id, None)
    assert status == 200 and json.loads(body)["response_action"] == "errors"
    assert store.records.load(conn, pause_id).status is Status.PENDING
    submit_reject(services.bot_url, pause_id, "keep it")
    rejected = wait_status(conn, pause_id, Status.COMPLETED)
    assert rejected.decision.reason == "keep it"


def test_only_editable_arguments_can_be_edited(services, slack, env, conn):
    """editable=["dest"]: path is shown read-only and kept; dest is edited and runs."""
    pause_id = _pause("move_file", {"path": "a.txt", "dest": "/tmp"})
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "edit", pause_id, card_ts=card.ts)
    modal = slack.wait_for(lambda: slack.views())[0]["view"]
    inputs = [b["block_id"] for b in modal["blocks"] if b["type"] == "input"]
    assert inputs == ["arg-dest"]
    assert "a.txt" in json.dumps(modal["blocks"])  # shown, not editable

    status, body = submit_edit(services.bot_url, pause_id, {"dest": "/srv", "path": "/etc/passwd"})
    assert status == 200 and body == ""
    edited = wait_status(conn, pause_id, Status.COMPLETED)
    assert edited.decision.arguments == {"path": "a.txt", "dest": "/srv"}
    assert [r["arguments"] for r in tool_runs(env, "move_file")] == [
        {"path": "a.txt", "dest": "/srv"}
    ]
    assert edited.result.executed_arguments == {"path": "a.txt", "dest": "/srv"}
    assert "- dest" in block_text(card_showing(slack, card.ts, "Completed"))


def test_respond_gives_the_model_the_reviewers_text_and_runs_nothing(services, slack, env, conn):
    """Respond: the tool does not run; the model receives exactly the reviewer's text."""
    pause_id = _pause("delete_path", {"path": "build"})
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "respond", pause_id, card_ts=card.ts)
    modal = slack.wait_for(lambda: slack.views())[0]["view"]
    assert modal["callback_id"] == "approval_respond_submit"
    submit_respond(services.bot_url, pause_id, "build/ is already empty")
    done = wait_status(conn, pause_id, Status.COMPLETED)
    assert done.decision.kind is DecisionKind.RESPOND
    assert tool_runs(env, "delete_path") == []
    assert tool_results_seen(model_calls(env)[-1]) == [("delete_path", "build/ is already empty")]
    assert "already empty" in block_text(reply_containing(slack, card.ts, "receives"))


def test_on_reject_stop_ends_the_run_without_resuming(services, slack, env, conn):
    """on_reject="stop": after a rejection no model call is made and nothing runs."""
    pause_id = _pause("drop_table", {"name": "users"})
    card = card_of(slack, pause_id)
    submit_reject(services.bot_url, pause_id, "never")
    stopped = wait_status(conn, pause_id, Status.REJECTED)
    assert "stopped" in block_text(card_showing(slack, card.ts, "stopped"))
    assert any(e["event"] == "run_stopped" for e in store.audit.audit_trail(conn, pause_id))
    assert stopped.result is None
    assert len(model_calls(env)) == 1  # only the call that paused
    assert tool_runs(env, "drop_table") == []


@pytest.mark.service_env(APPROVERS="UBOSS")
def test_agent_pending_lists_only_what_the_caller_may_decide_and_pages(services, slack, env, conn):
    """/agent-pending: default = what I may decide; `mine`, `all`, agent filters; Next pages."""
    from tests.e2e import click_next, pending_command

    ids = [_pause("delete_path", {"path": f"p{i}"}, agent=f"bot-{i % 2}") for i in range(17)]
    mine = _pause("delete_path", {"path": "mine"}, requested_by="UBOSS", agent="bot-0")

    def listed(answer):
        return approve_values(answer["blocks"])

    pending_command(slack, services.bot_url, user="UBOSS")
    first = slack.wait_for(lambda: slack.responses())[-1]
    assert listed(first) == list(reversed(ids))[:15]  # newest first; own request excluded
    pending_command(slack, services.bot_url, user="UNOBODY")
    nothing = slack.wait_for(lambda: len(slack.responses()) == 2 and slack.responses())[-1]
    assert listed(nothing) == [] and "Nothing is waiting" in json.dumps(nothing["blocks"])

    click_next(slack, services.bot_url, first, user="UBOSS")
    second = slack.wait_for(lambda: len(slack.responses()) == 3 and slack.responses())[-1]
    assert second["replace_original"] is True
    assert listed(second) == list(reversed(ids))[15:]

    pending_command(slack, services.bot_url, user="UBOSS", text="mine")
    assert listed(
        slack.wait_for(lambda: len(slack.responses()) == 4 and slack.responses())[-1]
    ) == [mine]
    pending_command(slack, services.bot_url, user="UNOBODY", text="all")
    everything = slack.wait_for(lambda: len(slack.responses()) == 5 and slack.responses())[-1]
    assert len(listed(everything)) == 15 and listed(everything)[0] == mine
    pending_command(slack, services.bot_url, user="UBOSS", text="bot-1")
    only_one = slack.wait_for(lambda: len(slack.responses()) == 6 and slack.responses())[-1]
    assert listed(only_one) == [i for i in reversed(ids) if ids.index(i) % 2 == 1]
