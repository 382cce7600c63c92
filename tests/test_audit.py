"""The audit trail: every event of a full run, with time and actor, shown by `approvals show`."""

from __future__ import annotations

from click.testing import CliRunner

from approvals import run_agent, store
from approvals.cli import cli
from approvals.models import Status
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, list_files
from tests.e2e import card_of, click, submit_edit, wait_status


def test_a_full_run_leaves_a_complete_audit_trail(services, slack, env, conn):
    """Paused, card, refused click, edit with old/new arguments, resume, tool result, end."""
    prompt = script(calls(("list_files", {"path": "."}), ("delete_path", {"path": "a"})), say("ok"))
    pause_id = run_agent(
        "scripted", prompt, tools=[list_files, delete_path], agent="auditor", requested_by="UREQ"
    ).pause_id
    card = card_of(slack, pause_id)
    click(slack, services.bot_url, "approve", pause_id, "UREQ", card.ts)  # self-approval: refused
    slack.wait_for(lambda: slack.responses())
    submit_edit(services.bot_url, pause_id, {"path": "b"}, user="UALICE")
    wait_status(conn, pause_id, Status.COMPLETED)
    wait_until_published = slack.wait_for(
        lambda: any(e["event"] == "resume_finished" for e in store.audit_trail(conn, pause_id))
    )
    assert wait_until_published

    trail = store.audit_trail(conn, pause_id)
    events = [e["event"] for e in trail]
    assert events == [
        "paused",
        "card_posted",
        "refused",
        "edited",
        "resume_started",
        "resume_finished",
    ]
    by_event = {e["event"]: e for e in trail}
    assert by_event["paused"]["actor"] == "auditor"
    assert by_event["refused"]["actor"] == "UREQ"
    assert "someone else" in by_event["refused"]["reason"]
    assert by_event["edited"]["actor"] == "UALICE"
    assert by_event["edited"]["proposed"] == '{"path": "a"}'
    assert by_event["edited"]["approved"] == '{"path": "b"}'
    assert by_event["resume_finished"]["status"] == "completed"
    assert by_event["resume_finished"]["executed_arguments"] == '{"path": "b"}'
    assert by_event["resume_finished"]["tool_output"].endswith("deleted b")
    assert all(float(e["at"]) > 0 for e in trail)
    times = [float(e["at"]) for e in trail]
    assert times == sorted(times)

    shown = CliRunner().invoke(cli, ["show", pause_id])
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert '"status": "completed"' in shown.output
    for event in events:
        assert any(f" {event} " in line for line in lines), event
