"""The gate: a gated tool pauses llm's chain unless its own call id was released."""

from __future__ import annotations

import inspect
import json

import llm
import pytest

from approvals import run_agent, store
from approvals.calls.gate import (
    Gate,
    gate,
    gate_from_dict,
    gate_of,
    gate_to_dict,
    released,
    requires_approval,
)
from approvals.calls.tools import describe_tool
from approvals.errors import CorruptRecord
from approvals.models import GateOptions, OnReject, Policy
from approvals.models.options import ABOUT, OPTIONS
from tests.agents import tools
from tests.agents.scripted import calls, say, script
from tests.e2e import model_calls, tool_results_seen

#: What ``counted`` really ran, so a test can tell a returned response from a run.
RAN: list[str] = []


@requires_approval(channel="C0OPS", summary="Remove {path}")
def remove(path: str, force: bool = False) -> str:
    """Remove a file."""
    return f"removed {path}" + (" (forced)" if force else "")


@requires_approval
def traced(note: str, llm_tool_call: llm.ToolCall | None = None) -> str:
    """Return the id of the call that ran it."""
    assert llm_tool_call is not None
    return f"{note}:{llm_tool_call.tool_call_id}"


@requires_approval(
    channel="C0PAY",
    summary="Pay {amount}",
    editable=["amount", "memo"],
    reason_required=True,
    on_reject="stop",
    expires_in=600,
    approvers=["UALICE", "UBOB"],
    approver_groups=("S0FINANCE",),
    allow_self_approval=True,
    approvals_required=2,
)
def pay(to: str, amount: int, memo: str = "") -> str:
    """Pay someone (every gate option set)."""
    return f"paid {amount} to {to}"


@requires_approval
def counted(path: str) -> str:
    """Record that it really ran."""
    RAN.append(path)
    return f"ran on {path}"


def look(path: str) -> str:
    """Look at a file (not gated)."""
    return f"looked at {path}"


def _call(call_id: str | None, name: str = "remove", **arguments) -> llm.ToolCall:
    return llm.ToolCall(name=name, arguments=arguments, tool_call_id=call_id)


def test_gated_tool_keeps_its_name_and_docstring():
    """Decorating does not change what the model sees the tool called or described as."""
    assert remove.__name__ == "remove"
    assert remove.__doc__ == "Remove a file."
    tool = describe_tool(remove)
    assert tool.name == "remove"
    assert tool.description == "Remove a file."


def test_gated_tool_schema_has_exactly_the_original_parameters():
    """The model is offered the tool's own arguments, never llm_tool_call."""
    schema = describe_tool(remove).input_schema
    assert schema == describe_tool(remove.__wrapped__).input_schema
    assert set(schema["properties"]) == {"path", "force"}
    assert schema["required"] == ["path"]


def test_a_tool_declaring_llm_tool_call_keeps_it_out_of_its_schema():
    """A tool that asks for the ToolCall itself still shows only its own arguments."""
    assert set(describe_tool(traced).input_schema["properties"]) == {"note"}


def test_calling_without_a_tool_call_pauses():
    """A direct call with no ToolCall never runs the tool."""
    with pytest.raises(llm.PauseChain, match="remove needs approval"):
        remove("build/app.o")


def test_calling_with_an_unreleased_id_pauses():
    """A call whose id nobody released pauses the chain."""
    with pytest.raises(llm.PauseChain):
        remove(path="build/app.o", llm_tool_call=_call("tc_1", path="build/app.o"))


def test_calling_with_a_released_id_runs():
    """Inside released({id: None}) the call with that id runs, with its arguments."""
    with released({"tc_1": None}):
        result = remove(path="build/app.o", force=True, llm_tool_call=_call("tc_1"))
    assert result == "removed build/app.o (forced)"


def test_released_lets_through_only_its_own_ids():
    """Another call id, or a call without an id, still pauses inside released()."""
    with released({"tc_1": None}):
        with pytest.raises(llm.PauseChain):
            remove(path="build", llm_tool_call=_call("tc_2"))
        with pytest.raises(llm.PauseChain):
            remove(path="build", llm_tool_call=_call(None))


def test_release_ends_with_the_block():
    """After the released() block, the same id pauses again."""
    with released({"tc_1": None}):
        remove(path="build", llm_tool_call=_call("tc_1"))
    with pytest.raises(llm.PauseChain):
        remove(path="build", llm_tool_call=_call("tc_1"))


def test_released_blocks_nest_and_restore():
    """An inner released() replaces the mapping, and leaving it restores the outer one."""
    with released({"tc_1": None}):
        with released({"tc_2": None}), pytest.raises(llm.PauseChain):
            remove(path="build", llm_tool_call=_call("tc_1"))
        assert remove(path="build", llm_tool_call=_call("tc_1")) == "removed build"


def test_a_tool_that_declares_llm_tool_call_receives_it():
    """A gated tool asking for llm_tool_call gets the very ToolCall that was released."""
    with released({"tc_9": None}):
        assert traced(note="hi", llm_tool_call=_call("tc_9", name="traced")) == "hi:tc_9"


def test_released_with_a_response_returns_it_without_running():
    """A call released with a reviewer's response gets that text back; the tool never runs."""
    RAN.clear()
    with released({"tc_1": "the file is already gone"}):
        result = counted(path="build", llm_tool_call=_call("tc_1", name="counted"))
    assert result == "the file is already gone"
    assert RAN == []


def test_an_empty_response_is_still_a_response():
    """An empty response string is returned as is; only None means "run the tool"."""
    RAN.clear()
    with released({"tc_1": ""}):
        assert counted(path="build", llm_tool_call=_call("tc_1", name="counted")) == ""
    assert RAN == []


def test_released_mixes_runs_and_responses_by_id():
    """In one block, each id gets what its own decision said: run, or the response."""
    RAN.clear()
    with released({"tc_run": None, "tc_answer": "answered"}):
        assert counted(path="a", llm_tool_call=_call("tc_run", name="counted")) == "ran on a"
        assert counted(path="b", llm_tool_call=_call("tc_answer", name="counted")) == "answered"
    assert RAN == ["a"]


def test_a_response_reaches_a_tool_declaring_llm_tool_call_without_running_it():
    """A tool that asks for llm_tool_call is also answered by the response, not run."""
    with released({"tc_9": "reviewer says hi"}):
        assert traced(note="hi", llm_tool_call=_call("tc_9", name="traced")) == "reviewer says hi"


def test_describe_fills_the_summary_with_the_arguments():
    """The card's one-liner names the real arguments."""
    assert Gate(summary="Delete {path}").describe({"path": "build/app.o"}) == "Delete build/app.o"


@pytest.mark.parametrize(
    ("summary", "arguments"),
    [
        ("Delete {path}", {}),
        ("Delete {0}", {"path": "x"}),
        ("Delete {path", {"path": "x"}),
        ("Delete {path.name}", {"path": "x"}),
        ("Delete {paths[3]}", {"paths": ["a"]}),
        ("Pay {amount:.2f}", {"amount": "twelve"}),
    ],
)
def test_describe_falls_back_to_the_template(summary, arguments):
    """When the arguments do not fit the template, the template is shown as is."""
    assert Gate(summary=summary).describe(arguments) == summary


@pytest.mark.parametrize(
    ("summary", "arguments"),
    [
        ("Pay {amount:.2f}", {"amount": None}),
        ("Email {to[address]}", {"to": "bob@example.com"}),
    ],
)
def test_describe_falls_back_when_an_argument_has_an_unexpected_type(summary, arguments):
    """A model-chosen argument type that the template cannot format still gives the template."""
    assert Gate(summary=summary).describe(arguments) == summary


def test_describe_without_a_summary_is_none():
    """A gate with no summary describes nothing."""
    assert Gate().describe({"path": "x"}) is None


def test_gate_of_reads_the_options():
    """gate_of returns the options given to the decorator, and defaults for the bare form."""
    assert gate_of(remove) == Gate(channel="C0OPS", summary="Remove {path}")
    assert gate_of(traced) == Gate()


def test_every_option_lands_in_the_gate_and_its_policy():
    """Each requires_approval option is kept; the policy's lists become tuples."""
    assert gate_of(pay) == Gate(
        channel="C0PAY",
        summary="Pay {amount}",
        expires_in=600,
        policy=Policy(
            approvers=("UALICE", "UBOB"),
            approver_groups=("S0FINANCE",),
            allow_self_approval=True,
            approvals_required=2,
            editable=("amount", "memo"),
            reason_required=True,
            on_reject=OnReject.STOP,
        ),
    )


def test_the_bare_gate_has_the_default_policy():
    """Without options: deployment approvers, one approval, everything editable, resume."""
    policy = gate_of(counted).policy
    assert policy == Policy()
    assert policy.approvers is None
    assert policy.approver_groups is None
    assert policy.editable is None
    assert policy.approvals_required == 1
    assert policy.on_reject is OnReject.RESUME
    assert gate_of(counted).expires_in is None


def test_empty_option_lists_are_kept_apart_from_defaults():
    """editable=[] means nothing is editable and approvers=[] overrides, unlike None."""

    @requires_approval(editable=[], approvers=[], approver_groups=[])
    def locked(path: str) -> str:
        return path

    policy = gate_of(locked).policy
    assert (policy.editable, policy.approvers, policy.approver_groups) == ((), (), ())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"approvals_required": 0}, "approvals_required"),
        ({"approvals_required": -1}, "approvals_required"),
        ({"expires_in": 0}, "expires_in"),
        ({"expires_in": -5}, "expires_in"),
        ({"on_reject": "ignore"}, "ignore"),
        ({"on_reject": "STOP"}, "STOP"),
    ],
)
def test_impossible_options_are_refused_at_decoration(options, message):
    """A quorum below one, a non-positive expiry or an unknown on_reject raise ValueError."""
    with pytest.raises(ValueError, match=message):
        requires_approval(**options)


@pytest.mark.parametrize("option", ["approvers", "approver_groups", "editable"])
@pytest.mark.parametrize("value", ["U1", "UALICE,UBOB", ""])
def test_a_bare_string_for_a_list_option_is_a_type_error(option, value):
    """A string where a list of names belongs is refused (it would be read letter by letter)."""
    with pytest.raises(TypeError, match=option) as raised:
        requires_approval(**{option: value})
    assert repr(value) in str(raised.value)


def test_a_bare_approvers_string_is_refused_at_decoration_not_later():
    """The TypeError comes from requires_approval itself, before any function is decorated."""
    with pytest.raises(TypeError, match="approvers"):

        @requires_approval(approvers="U1")
        def pay_once(to: str) -> str:
            return to


@pytest.mark.parametrize("kind", [list, tuple, set, iter])
def test_any_iterable_of_names_is_accepted(kind):
    """Lists, tuples, sets and one-shot iterators of names all become a tuple."""
    gate = gate_of(
        requires_approval(
            approvers=kind(["U1"]), approver_groups=kind(["S1"]), editable=kind(["path"])
        )(look)
    )
    assert gate is not None
    assert (gate.policy.approvers, gate.policy.approver_groups, gate.policy.editable) == (
        ("U1",),
        ("S1",),
        ("path",),
    )


def test_requires_approval_takes_every_gate_option_by_name_and_documents_it():
    """Its keywords are GateOptions' fields, in order, and its help lists each with its doc;
    gate() takes the same, and an option neither knows is a TypeError."""
    parameters = inspect.signature(requires_approval).parameters
    assert list(parameters) == ["fn", *OPTIONS]
    doc = requires_approval.__doc__ or ""
    for name, about in ABOUT.items():
        assert f"    {name}: {about.doc.split()[0]}" in doc
    assert gate_of(gate(look, remind_after=5)) == Gate(remind_after=5)
    with pytest.raises(TypeError, match="reviewers"):
        gate(look, reviewers=["U1"])


@pytest.mark.parametrize(
    ("recorded", "options"),
    [
        (
            {"channel": None, "summary": "Delete {path}", "expires_in": None, "policy": {
                "approvers": ["UALICE"], "approver_groups": None, "allow_self_approval": False,
                "approvals_required": 1, "editable": None, "reason_required": False,
                "on_reject": "stop", "webhook": None, "grantable": True},
             "waits_forever": True, "remind_after": 60, "escalate_after": None,
             "escalate_to": ["S0SRE"]},
            GateOptions(summary="Delete {path}", expires_in=None, approvers=["UALICE"],
                        on_reject="stop", remind_after=60, escalate_to=["S0SRE"]),
        ),
        (
            {"channel": "C0OPS", "summary": None, "expires_in": 600.0, "policy": {
                "approvers": None, "approver_groups": None, "allow_self_approval": False,
                "approvals_required": 2, "editable": None, "reason_required": False,
                "on_reject": "resume", "webhook": "https://hooks.example/a", "grantable": False},
             "waits_forever": False, "remind_after": None, "escalate_after": None,
             "escalate_to": None},
            GateOptions(channel="C0OPS", expires_in=600, approvals_required=2,
                        webhook="https://hooks.example/a", grantable=False),
        ),
        (
            {"channel": None, "summary": None, "expires_in": None, "policy": {},
             "waits_forever": False},
            GateOptions(),
        ),
    ],
)  # fmt: skip
def test_a_gate_recorded_by_the_previous_version_is_put_back_the_same(recorded, options):
    """A pause stored before the upgrade (options read at a decision nested in ``policy``,
    ``expires_in`` null with ``waits_forever`` telling never from the setting) gates as it did."""
    gate = gate_from_dict(recorded)
    assert gate.options == options
    assert gate_from_dict(gate_to_dict(gate)) == gate


@pytest.mark.parametrize(
    "recorded",
    [
        {"channel": None, "expires_in": None, "waits_forever": True},
        {"policy": {"approvals_required": 0}, "waits_forever": False},
        {"approvers": "UALICE"},
        {"expires_in": "never"},
    ],
)
def test_a_recorded_gate_that_is_no_gate_is_corrupt(recorded):
    """A gate read back from Redis with a missing policy or a wrong value is CorruptRecord."""
    with pytest.raises(CorruptRecord):
        gate_from_dict(recorded)


def test_gate_of_a_plain_function_is_none():
    """Plain functions, and objects with a look-alike attribute, are not gated."""
    assert gate_of(look) is None

    def fake():
        pass

    fake.__approval_gate__ = "not a gate"
    assert gate_of(fake) is None


def test_an_echo_chain_pauses_at_the_gated_call():
    """A real llm chain stops at the gated tool: the sibling before it ran, the gated one not."""
    model = llm.get_model("echo")
    prompt = json.dumps(
        {
            "prompt": "tidy up",
            "tool_calls": [
                {"name": "look", "arguments": {"path": "build/app.o"}},
                {"name": "remove", "arguments": {"path": "build/app.o"}},
            ],
        }
    )
    chain = model.chain(prompt, tools=[look, remove])

    with pytest.raises(llm.PauseChain) as info:
        chain.text()

    pause = info.value
    assert pause.tool_call is not None
    assert pause.tool_call.name == "remove"
    assert pause.tool_call.arguments == {"path": "build/app.o"}
    assert pause.tool_call.tool_call_id
    assert [(r.name, r.output) for r in pause.tool_results] == [("look", "looked at build/app.o")]


def test_gate_refuses_what_it_cannot_gate():
    from approvals import gate
    from tests.agents.toolboxes import Notes

    with pytest.raises(TypeError, match="needs methods"):
        gate(Notes("/tmp"))
    with pytest.raises(TypeError, match="no tool method"):
        gate(Notes("/tmp"), methods=["no_such"])
    with pytest.raises(TypeError, match="methods= is for toolboxes"):
        gate(remove.__wrapped__, methods=["x"])
    with pytest.raises(TypeError, match="cannot gate"):
        gate("rm -rf /")
    with pytest.raises(TypeError, match="list of names"):
        gate(Notes("/tmp"), methods="write_note")


def test_gate_on_a_toolbox_gates_only_the_chosen_methods_of_that_instance():
    from approvals import gate
    from tests.agents.toolboxes import Notes

    gated, free = gate(Notes("/tmp"), methods=["write_note"]), Notes("/tmp")
    tools = {t.name: t for t in gated.tools()}
    assert gate_of(tools["Notes_write_note"].implementation) is not None
    assert gate_of(tools["Notes_list_notes"].implementation) is None
    assert gate_of(tools["Notes_delete_note"].implementation) is not None  # its own decorator
    assert gate_of({t.name: t for t in free.tools()}["Notes_write_note"].implementation) is None
    # llm still sees the method's own schema, without self or llm_tool_call.
    assert set(tools["Notes_write_note"].input_schema["properties"]) == {"name", "text"}


def test_a_gated_coroutine_stays_a_coroutine_function():
    import inspect

    from tests.agents.tools import publish_post

    assert inspect.iscoroutinefunction(publish_post)


# --- arguments that are not I-JSON (``approvals.decisions.ijson``) ----------------------------


def test_a_call_whose_arguments_are_not_i_json_asks_nobody_and_the_model_reads_why(env, conn):
    """A model proposing a 64-bit amount as a number: no approval, no card job, nothing in
    Redis; llm hands the model the refusal, naming the field, and the run goes on."""
    prompt = script(calls(("charge_card", {"amount": 2**64})), say("gave up: {results}"))
    outcome = run_agent("scripted", prompt, tools=[tools.charge_card])

    assert outcome.status == "completed"
    [(name, output)] = tool_results_seen(model_calls(env)[-1])
    assert name == "charge_card"
    assert output.startswith("Error: amount: arguments.amount: 18446744073709551616 is beyond")
    assert "as strings" in output
    assert conn.keys("approvals:approval:*") == [] and conn.keys("rq:job:*") == []


def test_a_later_call_of_a_turn_that_is_not_i_json_gets_no_place_on_the_card(env, conn):
    """Two gated calls in one turn, the second with NaN: the card asks about the first alone;
    the second meets the gate when the turn resumes, and is refused to the model there."""
    turn = calls(("charge_card", {"amount": 5}), ("charge_card", {"amount": float("nan")}))
    outcome = run_agent("scripted", script(turn, say("{results}")), tools=[tools.charge_card])

    assert outcome.status == "paused" and outcome.pause_id is not None
    assert store.records.load(conn, outcome.pause_id).turn == ()
    assert conn.keys("approvals:approval:*") == [store.keys.approval_key(outcome.pause_id).encode()]
