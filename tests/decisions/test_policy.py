"""Policy rules: parsing, first match wins, CEL over the arguments, shadow mode, failing
closed, and their decisions made in the agent's process, atomic and audited."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from approvals import run_agent, store
from approvals.bot.pending import build_home
from approvals.cli.main import cli
from approvals.config import Settings
from approvals.decisions import policy, recovery
from approvals.errors import ConfigError
from approvals.models import DecidedBy, DecisionKind, GateOptions, Status
from approvals.store.pending import Page
from tests.agents.scripted import calls, say, script
from tests.agents.tools import delete_path, deploy, list_files
from tests.conftest import CHANNEL
from tests.e2e import model_calls, tool_results_seen, tool_runs

POLICY = """
[[rule]]
id = "shadow-all-deletes"
tool = "delete_*"
action = "reject"
mode = "shadow"

[[rule]]
id = "tmp-is-fine"
tool = "delete_path"
when = 'args.path.startsWith("/tmp/")'
action = "approve"

[[rule]]
id = "never-etc"
tool = "delete_path"
when = 'args.path.startsWith("/etc")'
action = "reject"
reason = "system files are off limits"

[[rule]]
id = "prod-needs-two"
agent = "ops-*"
tool = "deploy"
when = 'args.service == "billing"'
action = "require"
[rule.require]
approvers = ["UALICE", "UBOB"]
approvals_required = 2
expires_in = 120
channel = "C0PROD"

[[rule]]
id = "broken"
tool = "delete_path"
when = 'args.recursive == true'
action = "approve"
"""


def _rules(text: str = POLICY) -> list[policy.Rule]:
    import tomllib

    return policy.parse(tomllib.loads(text))


def _call(tool: str = "delete_path", agent: str = "janitor", **args: object) -> policy.Call:
    return policy.Call(agent=agent, tool=tool, args=args, requester="UREQ", channel=CHANNEL)


def test_first_matching_rule_decides_and_shadow_rules_are_only_reported():
    """Rules are tried in order; a shadow rule that matches is reported and changes nothing."""
    verdict = policy.evaluate(_rules(), _call(path="/tmp/x"))
    assert verdict.action is policy.Action.APPROVE and verdict.rule_id == "tmp-is-fine"
    assert [r.id for r in verdict.shadows] == ["shadow-all-deletes"]
    rejected = policy.evaluate(_rules(), _call(path="/etc/passwd"))
    assert rejected.action is policy.Action.REJECT and rejected.rule is not None
    assert rejected.rule.reason == "system files are off limits"


def test_require_matches_agent_globs_and_no_match_asks_a_person():
    """Globs select the agent; a call no rule decides goes to a person."""
    verdict = policy.evaluate(_rules(), _call("deploy", "ops-bot", service="billing"))
    assert verdict.action is policy.Action.REQUIRE and verdict.rule is not None
    assert verdict.rule.require == policy.Requirement(
        approvers=("UALICE", "UBOB"), approvals_required=2, expires_in=120.0, channel="C0PROD"
    )
    other = policy.evaluate(_rules(), _call("deploy", "dev-bot", service="billing"))
    assert other.action is policy.Action.ASK and other.rule is None
    assert "agent 'dev-bot' is not 'ops-*'" in " ".join(other.trace)


def test_a_rule_that_fails_to_evaluate_asks_a_person_and_says_why():
    """A missing argument fails the expression: no later rule decides; a person is asked."""
    rules = _rules(POLICY.replace('id = "tmp-is-fine"', 'id = "tmp-is-fine"\nagent = "x"'))
    rules.append(_rules('[[rule]]\nid = "anything"\naction = "approve"')[0])
    verdict = policy.evaluate(rules, _call(path="/srv/data"))
    assert verdict.action is policy.Action.ASK
    assert verdict.error is not None and verdict.error.startswith("broken: ")
    non_boolean = _rules('[[rule]]\nid = "n"\nwhen = "1 + 1"\naction = "approve"')
    assert policy.evaluate(non_boolean, _call()).error == "n: 'when' gave int, not a boolean"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[rule]]\nid = "a"\nwhen = "args.("\naction = "approve"', "not valid CEL"),
        ('[[rule]]\nid = "a"\naction = "allow"', "'allow' is not a valid Action"),
        ('[[rule]]\nid = "a"\naction = "approve"\n[rule.require]\napprovers = []', "require"),
        ('[[rule]]\nid = "a"\naction = "approve"\n[[rule]]\nid = "a"\naction = "reject"', "two"),
        ('[[rule]]\nid = "a"\naction = "approve"\nmatch = "x"', "unknown keys"),
        ("rule = [", "not valid TOML"),
    ],
)
def test_a_malformed_policy_file_stops_start_up(tmp_path: Path, text: str, message: str):
    """A policy that does not load is a ConfigError naming the problem (never "no rules")."""
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        policy.load(str(path))


@pytest.mark.parametrize(
    ("require", "message"),
    [
        ("remind_after = 60", "takes only"),
        ("webhook = 'https://x'", "takes only"),
        ("approvals_required = 0", "approvals_required must be at least 1"),
        ("approvals_required = true", "approvals_required must be a whole number"),
        ("expires_in = -1", "expires_in must be more than 0"),
        ("channel = ''", "channel"),
        ("approvers = 'UALICE'", "approvers must be a list of names"),
        ("approver_groups = [1]", "approver_groups"),
    ],
)
def test_a_require_table_takes_the_options_rules_may_set_checked_as_a_gate_checks_them(
    tmp_path: Path, require: str, message: str
):
    """[rule.require] takes only the gate options a rule may set, each refused (naming it)
    where the gate would refuse it: the file does not load."""
    path = tmp_path / "policy.toml"
    path.write_text(f'[[rule]]\nid = "r"\naction = "require"\n[rule.require]\n{require}\n')
    with pytest.raises(ConfigError, match=message):
        policy.load(str(path))


def test_a_requirement_replaces_only_the_options_it_names():
    """What a rule leaves out stays the asker's; what it names, even a default, replaces it."""
    asked = GateOptions(approvers=["UCAROL"], approvals_required=3, reason_required=True)
    required = policy.Requirement(approvals_required=1, channel="C0PROD")
    assert required.apply(asked) == GateOptions(
        approvers=["UCAROL"], approvals_required=1, reason_required=True, channel="C0PROD"
    )


@pytest.fixture
def policy_env(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    monkeypatch.setenv("APPROVALS_POLICY", str(path))
    return {**env, "APPROVALS_POLICY": str(path)}


def _run(prompt: str, agent: str = "janitor"):
    return run_agent(
        "scripted", prompt, tools=[list_files, delete_path, deploy], agent=agent,
        requested_by="UREQ",
    )  # fmt: skip


def _auto(conn, tool: str):
    decided = [a for a in store.pending.recent_decisions(conn, 50) if a.tool_name == tool]
    assert len(decided) == 1
    return decided[0]


def test_a_rule_approves_where_the_call_would_pause(policy_env, conn):
    """Approve: the tool runs at once in the agent's process; no card, one audited decision."""
    prompt = script(calls(("delete_path", {"path": "/tmp/cache"})), say("done: {results}"))
    outcome = _run(prompt)
    assert outcome.status == "completed"
    runs = tool_runs(policy_env, "delete_path")
    assert [(r["arguments"]["path"], r["pid"]) for r in runs] == [("/tmp/cache", os.getpid())]
    assert store.pending.pending_count(conn) == 0
    approval = _auto(conn, "delete_path")
    assert approval.status is Status.APPROVED and approval.rule_id == "tmp-is-fine"
    decision = approval.decision
    assert decision is not None and decision.kind is DecisionKind.APPROVE
    assert (decision.decided_by, decision.rule_id) == (DecidedBy.RULE, "tmp-is-fine")
    trail = store.audit.audit_trail(conn, approval.id)
    assert [e["event"] for e in trail] == ["paused", "rule_shadow", "approved"]
    assert trail[1]["rule"] == "shadow-all-deletes" and trail[1]["would"] == "reject"
    assert trail[2]["rule"] == "tmp-is-fine" and trail[2]["actor"] == "rule:tmp-is-fine"
    assert not conn.zrange(store.keys.DEADLINES_KEY, 0, -1)  # nothing left to expire
    # Its trail is chained like any other, its state changes reach the webhooks' outbox, and
    # retention knows it is finished (nothing follows a rule's decision here).
    from approvals.proof import audit

    check = audit.check_trail(conn, approval.id, {"keys": []})
    assert check.ok and check.entries == 3, check.problems
    assert conn.llen(store.keys.EVENTS_KEY) >= 2  # paused, approved
    assert conn.zscore(store.keys.FINISHED_KEY, approval.id) is not None


def test_a_rule_rejects_and_the_model_reads_its_reason(policy_env, conn):
    """Reject: the tool never runs; the model is told which rule refused and why."""
    prompt = script(calls(("delete_path", {"path": "/etc/passwd"})), say("done: {results}"))
    assert _run(prompt).status == "completed"
    assert tool_runs(policy_env, "delete_path") == []
    seen = tool_results_seen(model_calls(policy_env)[-1])
    refusal = "Cancelled: rejected by rule never-etc: system files are off limits"
    assert seen == [("delete_path", refusal)]
    approval = _auto(conn, "delete_path")
    assert approval.status is Status.REJECTED
    assert approval.decision is not None and approval.decision.rule_id == "never-etc"


def test_a_require_rule_sets_who_decides_where_and_how_long(policy_env, conn):
    """Require: the call pauses with the rule's approvers, quorum, channel and expiry."""
    prompt = script(calls(("deploy", {"service": "billing"})), say("done"))
    outcome = _run(prompt, agent="ops-bot")
    assert outcome.status == "paused" and outcome.pause_id is not None
    approval = store.records.load(conn, outcome.pause_id)
    assert approval.status is Status.PENDING and approval.rule_id == "prod-needs-two"
    assert approval.policy.approvers == ("UALICE", "UBOB")
    assert approval.policy.approvals_required == 2
    assert approval.channel == "C0PROD"
    assert approval.expires_at - approval.created_at == pytest.approx(120)
    events = [e["event"] for e in store.audit.audit_trail(conn, approval.id)]
    assert events == ["paused", "rule_required"]
    from approvals.proof import audit

    check = audit.check_trail(conn, approval.id, {"keys": []})  # one chain, rule entry included
    assert check.ok and check.entries == 2, check.problems


def test_a_broken_expression_fails_closed_to_a_person(policy_env, conn, caplog):
    """The rule that cannot be evaluated is logged and audited; the call waits for a person."""
    prompt = script(calls(("delete_path", {"path": "/srv/data"})), say("done"))
    with caplog.at_level("WARNING", logger="approvals.calls.agent"):
        outcome = _run(prompt)
    assert outcome.status == "paused" and outcome.pause_id is not None
    assert tool_runs(policy_env, "delete_path") == []
    assert "broken: KeyError" in caplog.text
    trail = store.audit.audit_trail(conn, outcome.pause_id)
    assert [e["event"] for e in trail] == ["paused", "rule_shadow", "rule_failed"]
    assert trail[2]["error"].startswith("broken: ")


def test_no_policy_asks_a_person_as_before(env, conn):
    """Without APPROVALS_POLICY every gated call pauses."""
    prompt = script(calls(("delete_path", {"path": "/tmp/cache"})), say("done"))
    assert _run(prompt).status == "paused"


def test_automatic_decisions_are_shown_and_never_requeued(policy_env, conn):
    """The recent list names the rule; recovery never queues a resume for a rule's decision."""
    _run(script(calls(("delete_path", {"path": "/tmp/a"})), say("done")))
    approval = _auto(conn, "delete_path")
    conn.zadd(store.keys.DECIDED_KEY, {approval.id: time.time() - 120})
    assert recovery.requeue_stranded(conn, Settings.from_env()) == []
    home = build_home(Page([], 0, exact=True), [approval])
    assert "approved by policy rule `tmp-is-fine`" in json.dumps(home)


def test_policy_test_prints_the_deciding_rule_and_why(policy_env):
    """``approvals policy test`` names the rule that decides and why the others did not."""
    args = ["policy", "test", "--agent", "janitor", "--tool", "delete_path"]
    found = CliRunner().invoke(cli, [*args, "--args", '{"path": "/etc/hosts"}'])
    assert found.exit_code == 0, found.output
    assert found.output.splitlines() == [
        "shadow-all-deletes: matches in shadow mode (would reject)",
        "tmp-is-fine: no match (when is false)",
        "never-etc: matches, reject",
        "=> reject (rule never-etc)",
    ]
    bad = CliRunner().invoke(cli, [*args, "--args", "[1]"])
    assert bad.exit_code == 2 and "must be a JSON object" in bad.output


def test_a_policy_that_does_not_load_fails_the_resume(env, conn, tmp_path, monkeypatch):
    """In the worker, a broken policy file is a ResumeError (the run fails visibly), never
    a resume without the rules."""
    from approvals.calls.agent import resume
    from approvals.decisions.review import decide
    from approvals.errors import ResumeError

    pause_id = _run(script(calls(("delete_path", {"path": "/srv/x"})), say("done"))).pause_id
    assert pause_id is not None
    decide(conn, Settings.from_env(), pause_id, DecisionKind.APPROVE, "UALICE")
    broken = tmp_path / "broken.toml"
    broken.write_text("[[rule]]\nid = 'x'\naction = 'maybe'\n")
    monkeypatch.setenv("APPROVALS_POLICY", str(broken))
    with pytest.raises(ResumeError, match="not a valid Action"):
        resume(conn, Settings.from_env(), store.records.load(conn, pause_id))
    assert tool_runs(env, "delete_path") == []
