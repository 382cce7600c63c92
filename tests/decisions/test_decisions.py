"""Every decision end to end: reject with a reason, edit, races, refusals, CLI, re-pauses."""

from __future__ import annotations

import json
import threading

import llm
import pytest
from click.testing import CliRunner

from approvals import run_agent, store
from approvals.cli.main import cli
from approvals.models import DecisionKind, Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import charge_card, delete_path, list_files, send_email
from tests.conftest import CHANNEL, wait_until
from tests.e2e import (
    action_blocks,
    block_text,
    card_of,
    click,
    model_calls,
    reply_containing,
    select,
    submit_edit,
    submit_reject,
    tool_results_seen,
    tool_runs,
    wait_status,
)

DELETE = script(calls(("delete_path", {"path": "build"})), say("Finished: {results}"))


def _pause(prompt: str = DELETE, **kw):
    outcome = run_agent("scripted", prompt, tools=[list_files, delete_path, send_email], **kw)
    assert outcome.status == "paused"
    return outcome.pause_id


def test_reject_with_reason_tells_the_model_and_never_runs_the_tool(services, slack, env, conn):
    """Reject: the modal's reason reaches the model as the tool result; the tool never runs."""
    pause_id = _pause()
    card = card_of(slack, pause_id)
    status, _ = click(slack, services.bot_url, "reject", pause_id, card_ts=card.ts)
    assert status == 200
    modal = slack.wait_for(lambda: slack.views())[0]["view"]
    assert modal["private_metadata"] == pause_id
    assert (
        store.records.load(conn, pause_id).status is Status.PENDING
    )  # opening the modal decides nothing

    status, _ = submit_reject(services.bot_url, pause_id, "wrong folder, use dist")
    assert status == 200
    approval = wait_status(conn, pause_id, Status.COMPLETED)
    assert approval.decision.kind is DecisionKind.REJECT
    assert approval.decision.reason == "wrong folder, use dist"
    assert tool_runs(env, "delete_path") == []
    seen = tool_results_seen(model_calls(env)[-1])
    assert seen == [("delete_path", "Cancelled: rejected by ualice: wrong folder, use dist")]
    thread = slack.wait_for(lambda: slack.thread(CHANNEL, card.ts))
    assert "Rejected by <@UALICE>" in block_text(thread[0])


def test_edit_runs_the_edited_arguments_and_tells_the_model(services, slack, env, conn):
    """Edit: the tool runs once with the edited arguments; the record keeps both versions."""
    pause_id = _pause()
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "edit", pause_id, card_ts=card.ts)
    modal = slack.wait_for(lambda: slack.views())[0]["view"]
    inputs = {b["block_id"]: b for b in modal["blocks"] if b["type"] == "input"}
    assert inputs["arg-path"]["element"]["initial_value"] == "build"
    assert inputs["arg-recursive"]["element"]["type"] == "static_select"
    assert inputs["arg-recursive"]["element"]["initial_option"]["value"] == "false"

    status, body = submit_edit(
        services.bot_url, pause_id, {"path": "build/tmp", "recursive": select("true")}
    )
    assert status == 200 and body == ""  # an empty 200 closes the modal
    approval = wait_status(conn, pause_id, Status.COMPLETED)
    assert approval.arguments == {"path": "build"}  # what the model proposed
    assert approval.decision.arguments == {"path": "build/tmp", "recursive": True}
    runs = tool_runs(env, "delete_path")
    assert [r["arguments"] for r in runs] == [{"path": "build/tmp", "recursive": True}]
    ((_, output),) = tool_results_seen(model_calls(env)[-1])
    assert "edited the arguments" in output and output.endswith("deleted build/tmp recursively")
    thread = slack.wait_for(lambda: slack.thread(CHANNEL, card.ts))
    assert '+ path: "build/tmp"' in block_text(thread[0])


def test_invalid_edit_is_shown_in_the_modal_and_changes_nothing(services, slack, env, conn):
    """An edit that breaks the tool's schema comes back as inline errors; nothing runs."""
    pause_id = _pause()
    card_of(slack, pause_id)
    # The worker records the card's ts just after Slack answered its post.
    wait_until(lambda: store.records.load(conn, pause_id).card_ts, 10, "the card's ts recorded")
    before = conn.hgetall(store.keys.approval_key(pause_id))
    status, body = submit_edit(
        services.bot_url, pause_id, {"path": "x", "recursive": select('"maybe"')}
    )
    assert status == 200
    answer = json.loads(body)
    assert answer["response_action"] == "errors"
    assert "arg-recursive" in answer["errors"]
    status, body = submit_edit(
        services.bot_url, pause_id, {"path": "x", "recursive": select("{not json")}
    )
    assert "Not valid JSON" in json.loads(body)["errors"]["arg-recursive"]
    assert conn.hgetall(store.keys.approval_key(pause_id)) == before
    assert tool_runs(env, "delete_path") == []


def test_an_edit_json_cannot_hold_exactly_is_shown_in_the_modal_and_changes_nothing(
    services, slack, env, conn
):
    """A 64-bit integer typed in the Edit modal comes back as the input's error, naming the
    field and saying to send such a value as a string; nothing changes."""
    prompt = script(calls(("charge_card", {"amount": 5})), say("{results}"))
    pause_id = run_agent("scripted", prompt, tools=[charge_card]).pause_id
    card_of(slack, pause_id)
    # The worker records the card's ts, then its audit entry: wait for both.
    wait_until(lambda: _events(conn, pause_id)[-1:] == ["card_posted"], 10, "the card recorded")
    before = (
        conn.hgetall(store.keys.approval_key(pause_id)),
        store.audit.audit_lines(conn, pause_id),
    )
    number = {"type": "number_input", "value": "18446744073709551616"}
    status, body = submit_edit(services.bot_url, pause_id, {"amount": number})
    assert status == 200
    error = json.loads(body)["errors"]["arg-amount"]
    assert error.startswith("arguments.amount: 18446744073709551616 is beyond"), error
    assert "as strings" in error
    assert (
        conn.hgetall(store.keys.approval_key(pause_id)),
        store.audit.audit_lines(conn, pause_id),
    ) == before
    assert tool_runs(env, "charge_card") == []


def _events(conn, approval_id: str) -> list[str]:
    return [e["event"] for e in store.audit.audit_trail(conn, approval_id)]


def test_simultaneous_clicks_have_one_winner(services, slack, env, conn):
    """Twelve approvers click at once: one decision, one run, eleven told who won."""
    pause_id = _pause()
    card = card_of(slack, pause_id)
    users = [f"U{i:03d}" for i in range(12)]
    statuses: list[int] = []
    barrier = threading.Barrier(len(users))

    def press(user: str) -> None:
        barrier.wait()
        statuses.append(click(slack, services.bot_url, "approve", pause_id, user, card.ts)[0])

    threads = [threading.Thread(target=press, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * len(users)
    approval = wait_status(conn, pause_id, Status.COMPLETED)
    winner = approval.decision.actor
    slack.wait_for(lambda: len(slack.responses()) >= len(users) - 1)
    refusals = [r for r in slack.responses() if "already" in r.get("text", "")]
    assert len(refusals) == len(users) - 1
    assert all(f"<@{winner}>" in r["text"] and r["response_type"] == "ephemeral" for r in refusals)
    assert len(tool_runs(env, "delete_path")) == 1
    assert len(model_calls(env)) == 2
    trail = store.audit.audit_trail(conn, pause_id)
    assert [e["event"] for e in trail].count("approved") == 1
    assert [e["event"] for e in trail].count("resume_started") == 1


@pytest.mark.service_env(APPROVERS="UBOSS")
def test_a_non_approver_is_refused_and_recorded(services, slack, env, conn):
    """Someone not in APPROVERS gets an ephemeral refusal; the approval stays pending."""
    pause_id = _pause()
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "approve", pause_id, "UINTRUDER", card.ts)
    refusal = slack.wait_for(lambda: slack.responses())
    assert "not one of the approvers" in refusal[0]["text"]
    assert store.records.load(conn, pause_id).status is Status.PENDING
    assert any(
        e["event"] == "refused" and e["actor"] == "UINTRUDER"
        for e in store.audit.audit_trail(conn, pause_id)
    )
    click(slack, services.bot_url, "edit", pause_id, "UINTRUDER", card.ts)
    slack.wait_for(lambda: len(slack.responses()) == 2)
    assert slack.views() == []  # no modal for someone who may not decide

    click(slack, services.bot_url, "approve", pause_id, "UBOSS", card.ts)
    wait_status(conn, pause_id, Status.COMPLETED)
    assert len(tool_runs(env, "delete_path")) == 1


def test_the_cli_decides_like_a_click(services, slack, env, conn):
    """`approvals reject ID --reason` and `approvals approve ID` have a click's effects."""
    first, second = _pause(), _pause()
    card = card_of(slack, first)
    runner = CliRunner()
    result = runner.invoke(cli, ["reject", first, "--reason", "not today"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["approve", second])
    assert result.exit_code == 0, result.output
    rejected = wait_status(conn, first, Status.COMPLETED)
    assert rejected.decision.actor.startswith("cli:")
    wait_status(conn, second, Status.COMPLETED)
    assert len(tool_runs(env, "delete_path")) == 1
    again = runner.invoke(cli, ["approve", first])
    assert again.exit_code == 1 and "already" in again.output
    assert "not today" in block_text(reply_containing(slack, card.ts, "(CLI)"))
    assert action_blocks(slack.message(CHANNEL, card.ts)) == []


def test_a_resumed_agent_that_pauses_again_posts_the_next_card_in_the_thread(
    services, slack, env, conn
):
    """Two gated calls in one turn share one card; the next turn's pause gets its card in
    that card's thread."""
    prompt = script(
        calls(("delete_path", {"path": "a"}), ("delete_path", {"path": "b"})),
        calls(("send_email", {"to": "ops@example.com", "subject": "cleaned"})),
        say("All done: {results}"),
    )
    first = _pause(prompt)
    card = card_of(slack, first)
    first_id, second = store.records.load(conn, first).turn
    assert first_id == first and store.records.load(conn, second).arguments == {"path": "b"}
    click(slack, services.bot_url, "approve", first, card_ts=card.ts)
    wait_status(conn, first, Status.APPROVED)
    click(slack, services.bot_url, "approve", second, card_ts=card.ts)
    third = wait_status(conn, first, Status.PAUSED).result.next_approval_id
    assert store.records.load(conn, third).tool_name == "send_email"
    assert card_of(slack, third).thread_ts == card.ts
    click(slack, services.bot_url, "approve", third)
    done = wait_status(conn, third, Status.COMPLETED)
    assert "sent to ops@example.com" in done.result.text
    assert [r["arguments"]["path"] for r in tool_runs(env, "delete_path")] == ["a", "b"]
    assert len(tool_runs(env, "send_email")) == 1
    assert len(model_calls(env)) == 3  # the same as a run with no gate at all


class _LocalModel(llm.Model):
    """A model only this process knows: the worker cannot resolve it."""

    model_id = "only-in-the-test-process"
    supports_tools = True

    def execute(self, prompt, stream, response, conversation=None):
        response.add_tool_call(llm.ToolCall(name="delete_path", arguments={"path": "x"}))
        yield ""


def test_a_resume_that_cannot_find_its_model_fails_visibly_and_keeps_the_record(
    services, slack, env, conn
):
    """Unknown model in the worker: the approval is failed, the thread says why, nothing is lost."""
    outcome = run_agent(_LocalModel(), "go", tools=[delete_path])
    card = card_of(slack, outcome.pause_id)
    click(slack, services.bot_url, "approve", outcome.pause_id, card_ts=card.ts)
    failed = wait_status(conn, outcome.pause_id, Status.FAILED)
    assert "unknown model 'only-in-the-test-process'" in failed.result.error
    assert "unknown model" in block_text(reply_containing(slack, card.ts, "failed"))
    assert store.records.load_history(conn, outcome.pause_id)  # the history is still there
    assert tool_runs(env, "delete_path") == []
