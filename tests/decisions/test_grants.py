"""Grants from the card: each scope used, expired and revoked; refused to those who may not
decide, to quorum gates and to gates with grantable=False; listed and revoked by the CLI."""

from __future__ import annotations

import json
import os
import time

import pytest
from click.testing import CliRunner

from approvals import run_agent, store
from approvals.bot.pending import build_home
from approvals.calls.agent import resume
from approvals.cli.main import cli
from approvals.config import Settings
from approvals.decisions import grants
from approvals.errors import NotAllowed
from approvals.models import DecidedBy, Policy, Status
from approvals.models.grant import Scope
from approvals.slack.cards import APPROVE_SCOPE_ACTION, REVOKE_GRANT_ACTION, build_buttons
from approvals.store.pending import Page
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, deploy, list_files, wipe_disk
from tests.conftest import CHANNEL, wait_until
from tests.e2e import action_blocks, card_of, choose_scope, tool_runs, wait_status
from tests.factories import make_approval

TOOLS = [list_files, delete_path, deploy, wipe_disk]


def _run(tool: str = "delete_path", agent: str = "janitor", **args: object):
    prompt = script(calls((tool, args or {"path": "/srv/a"})), say("done"))
    return run_agent("scripted", prompt, tools=TOOLS, agent=agent, requested_by="UREQ")


def _paused(**kw: object) -> str:
    outcome = _run(**kw)  # type: ignore[arg-type]
    assert outcome.status == "paused" and outcome.pause_id is not None
    return outcome.pause_id


def _grant(conn, approval_id: str, scope: Scope, actor: str = "UALICE") -> grants.Grant:
    approval, grant = grants.approve_with_scope(
        conn, Settings.from_env(), approval_id, scope, actor, actor_name=actor.lower()
    )
    assert approval.status is Status.APPROVED and grant is not None
    return grant


def test_card_offers_the_scopes_with_their_exact_texts():
    """The menu beside Approve reads exactly as documented; none on quorum or grantable=False."""
    (menu,) = [
        e
        for e in build_buttons(make_approval(run_id="r1"))["elements"]
        if e.get("action_id") == APPROVE_SCOPE_ACTION
    ]
    assert [o["text"]["text"] for o in menu["options"]] == [
        "Just this call",
        "This tool, this run",
        "This tool for 1 hour",
        "This tool for 8 hours",
        "This tool for 24 hours",
        "These exact arguments",
    ]
    assert menu["options"][2]["value"] == "a1b2c3d4e5f60718:1h"
    for policy in (Policy(approvals_required=2), Policy(grantable=False)):
        elements = build_buttons(make_approval(policy=policy))["elements"]
        assert APPROVE_SCOPE_ACTION not in [e.get("action_id") for e in elements]


def test_an_hours_grant_lets_later_calls_run_at_once_until_it_expires(env, conn):
    """This tool for 1 hour: the next call of that agent and requester runs without a card,
    takes one use and is recorded as approved by the grant of its creator."""
    grant = _grant(conn, _paused(), Scope.HOURS_1)
    assert grant.expires_at == pytest.approx(time.time() + 3600, abs=5)
    outcome = _run(path="/srv/b")
    assert outcome.status == "completed"
    runs = tool_runs(env, "delete_path")
    assert [(r["arguments"]["path"], r["pid"]) for r in runs] == [("/srv/b", os.getpid())]
    (used,) = [
        a for a in store.pending.recent_decisions(conn) if a.decision and a.decision.automatic
    ]
    decision = used.decision
    assert decision is not None and decision.decided_by is DecidedBy.GRANT
    assert (decision.grant_id, decision.grant_creator) == (grant.id, "UALICE")
    trail = store.audit.audit_trail(conn, used.id)
    assert trail[-1]["grant"] == grant.id and trail[-1]["grant_creator"] == "UALICE"
    assert grants.list_grants(conn)[0].uses == 1
    assert _run(agent="other-agent").status == "paused"  # another agent is not covered
    later = grants.Call("delete_path", "janitor", "UREQ", {"path": "/x"})
    assert grants.take(conn, later, now=time.time() + 3601) is None  # expired
    assert grants.take(conn, later) is not None


def test_an_arguments_grant_covers_only_those_exact_arguments(env, conn):
    """These exact arguments: the same values run at once, any other value pauses."""
    _grant(conn, _paused(path="/srv/same"), Scope.ARGUMENTS)
    assert _run(path="/srv/same").status == "completed"
    assert _run(path="/srv/other").status == "paused"


def test_a_run_grant_covers_the_tool_for_the_rest_of_that_run_only(env, conn):
    """This tool, this run: the resumed run's next call runs; a new run asks again."""
    prompt = script(
        calls(("delete_path", {"path": "/srv/1"})),
        calls(("delete_path", {"path": "/srv/2"})),
        say("done"),
    )
    first = run_agent("scripted", prompt, tools=TOOLS, agent="janitor", requested_by="UREQ")
    assert first.pause_id is not None
    _grant(conn, first.pause_id, Scope.RUN)
    resumed = resume(conn, Settings.from_env(), store.records.load(conn, first.pause_id))
    assert resumed.outcome.status == "completed"
    assert [r["arguments"]["path"] for r in tool_runs(env, "delete_path")] == ["/srv/1", "/srv/2"]
    assert _run().status == "paused"


def test_a_revoked_grant_lets_nothing_through(env, conn):
    """Revoke (once, by its creator or an operator): the call waits for a person again."""
    grant = _grant(conn, _paused(), Scope.HOURS_8)
    settings = Settings.from_env()
    with pytest.raises(NotAllowed, match="creator or an approver"):
        grants.revoke(conn, settings, grant.id, "UMALLORY")
    revoked = grants.revoke(conn, settings, grant.id, "UALICE")
    assert revoked.revoked_by == "UALICE" and not revoked.live(time.time())
    with pytest.raises(NotAllowed, match="revoked already"):
        grants.revoke(conn, settings, grant.id, "UALICE")
    assert _run().status == "paused"
    assert tool_runs(env, "delete_path") == []


def test_a_grant_is_refused_to_someone_who_may_not_decide(env, conn, monkeypatch):
    """Only an approver may grant: the refusal changes nothing and is audited."""
    monkeypatch.setenv("APPROVERS", "UALICE")
    pause_id = _paused()
    with pytest.raises(NotAllowed, match="not one of the approvers"):
        grants.approve_with_scope(conn, Settings.from_env(), pause_id, Scope.HOURS_24, "UBOB")
    assert store.records.load(conn, pause_id).status is Status.PENDING
    assert grants.list_grants(conn) == []
    assert store.audit.audit_trail(conn, pause_id)[-1]["event"] == "refused"


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("deploy", {"service": "api"}, "several approvals"),
        ("wipe_disk", {"device": "sda"}, "only one call at a time"),
    ],
)
def test_quorum_gates_and_grantable_false_never_allow_grants(env, conn, tool, args, message):
    """A quorum gate and a gate with grantable=False refuse every scope but the call."""
    pause_id = _paused(tool=tool, **args)
    with pytest.raises(NotAllowed, match=message):
        grants.approve_with_scope(conn, Settings.from_env(), pause_id, Scope.HOURS_1, "UALICE")
    assert store.records.load(conn, pause_id).status is Status.PENDING


def test_grants_cli_lists_and_revokes(env, conn):
    """``approvals grants list --json`` shows every grant; ``revoke ID`` ends one."""
    grant = _grant(conn, _paused(), Scope.HOURS_1)
    listed = CliRunner().invoke(cli, ["grants", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = [json.loads(line) for line in listed.output.splitlines()]
    assert (row["id"], row["scope"], row["tool"], row["created_by"]) == (
        grant.id, "1h", "delete_path", "UALICE",
    )  # fmt: skip
    assert CliRunner().invoke(cli, ["grants", "revoke", grant.id]).exit_code == 0
    text = CliRunner().invoke(cli, ["grants", "list"]).output
    assert f"{grant.id}  revoked" in text
    again = CliRunner().invoke(cli, ["grants", "revoke", grant.id])
    assert again.exit_code == 1 and "revoked already" in again.output


def test_home_lists_live_grants_with_revoke(env, conn):
    """App Home shows each grant; a live one has a Revoke button carrying its id."""
    grant = _grant(conn, _paused(), Scope.HOURS_1)
    home = build_home(Page([], 0, exact=True), [], grants.list_grants(conn))
    (button,) = [
        b["accessory"] for b in home["blocks"] if b.get("accessory", {}).get("value") == grant.id
    ]
    assert button["action_id"] == REVOKE_GRANT_ACTION


def test_choosing_a_scope_on_the_card_approves_and_grants(services, slack, env, conn):
    """End to end: the card's menu approves the call (the worker runs it) and the grant lets
    the agent's next call run at once, with no new card."""
    pause_id = _paused()
    card = card_of(slack, pause_id)
    assert choose_scope(services.bot_url, pause_id, Scope.HOURS_1, card.ts) == 200
    wait_status(conn, pause_id, Status.COMPLETED)
    (grant,) = grants.list_grants(conn)
    assert (grant.created_by, grant.approval_id) == ("UALICE", pause_id)
    assert _run(path="/srv/next").status == "completed"
    assert [r["arguments"]["path"] for r in tool_runs(env, "delete_path")] == [
        "/srv/a", "/srv/next",
    ]  # fmt: skip
    assert store.pending.pending_count(conn) == 0
    line = wait_until(
        lambda: [m for m in slack.messages(CHANNEL) if "approved by grant" in m.text], 20, "line"
    )
    assert f"approved by grant `{grant.id}` of <@UALICE>" in line[0].text
    assert not [m for m in slack.messages() if m.ts != card.ts and action_blocks(m)]
