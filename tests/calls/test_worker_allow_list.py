"""An agent hears that the workers would refuse its tools before the first model call, with
the command that fixes it, never from a failed run after someone clicked Approve."""

from __future__ import annotations

import pytest

from approvals import run_agent, store
from approvals.config import Settings
from approvals.errors import GateError
from approvals.worker.main import advertise_tool_modules
from tests.agents import tools as agent_tools
from tests.agents.scripted import calls, say, script
from tests.conftest import wait_until
from tests.e2e import model_calls, pause

PROMPT = script(calls(("delete_path", {"path": "build"})), say("done"))


def test_a_worker_advertises_what_it_imports_tools_from(conn, services):
    """The running ``approvals worker`` (APPROVALS_TOOL_MODULES=tests.agents) says so."""
    lists = wait_until(lambda: store.workers.allow_lists(conn, "approvals"), 30, "an advert")
    assert lists == [("tests.agents",)]


def test_tools_no_live_worker_allows_are_refused_before_the_first_model_call(env, conn):
    store.workers.advertise(conn, "approvals", ["shop.tools", "shop.more"], ttl=30)
    with pytest.raises(GateError) as refused:
        run_agent("scripted", PROMPT, tools=[agent_tools.delete_path])
    message = str(refused.value)
    assert "import tools only from shop.more, shop.tools, not from tests.agents.tools" in message
    assert "(delete_path)" in message
    fix = "APPROVALS_TOOL_MODULES=shop.more,shop.tools,tests.agents.tools approvals worker"
    assert message.endswith(f"restart them:\n  {fix}")
    assert model_calls(env) == []  # no model call, no card
    assert conn.zcard(store.keys.PENDING_KEY) == 0


def test_under_approvals_dev_the_refusal_names_the_dev_command_that_fixes_it(env, conn):
    store.workers.advertise(conn, "approvals", ["approvals.dev.demo"], ttl=30)
    store.workers.announce_dev(conn, "approvals dev --port 3001", ttl=30)
    with pytest.raises(GateError) as refused:
        run_agent("scripted", PROMPT, tools=[agent_tools.delete_path])
    fix = "approvals dev --port 3001 --tools tests.agents.tools"
    assert str(refused.value).endswith(f"restart approvals dev with it allowed:\n  {fix}")
    assert model_calls(env) == []


def test_one_live_worker_that_allows_them_is_enough(env, conn):
    store.workers.advertise(conn, "approvals", ["approvals.dev.demo"], ttl=30)
    advertise_tool_modules(conn, Settings.from_env())  # APPROVALS_TOOL_MODULES=tests.agents
    assert pause()


def test_lapsed_adverts_and_other_queues_refuse_nothing(env, conn):
    """A worker that stopped advertising (its TTL passed) no longer counts; nor do workers of
    another queue; with no advert at all, nothing is refused (older workers say nothing)."""
    store.workers.advertise(conn, "approvals", ["shop.tools"], ttl=-1)
    store.workers.advertise(conn, "other-queue", ["shop.tools"], ttl=30)
    assert store.workers.allow_lists(conn, "approvals") == []
    assert pause()


def test_an_on_finish_no_live_worker_could_call_is_refused_too(env, conn):
    store.workers.advertise(conn, "approvals", ["tests.agents.tools"], ttl=30)
    with pytest.raises(GateError, match=r"not from tests\.agents\.continuations \(on_finish\)"):
        run_agent(
            "scripted",
            PROMPT,
            tools=[agent_tools.delete_path],
            on_finish="tests.agents.continuations:note_outcome",
        )
    assert model_calls(env) == []
