"""The LangGraph example in examples/, run with the real ``langgraph`` package against the real
API, bot, worker and Slack stand-in: it acts only on a go, and on the edited arguments."""

from __future__ import annotations

import threading
from typing import Any

from examples.langgraph_approval import build_graph
from tests.api.conftest import Stack
from tests.e2e import card_of, click, reply_containing, submit_edit, submit_reject
from tests.processes import wait_until


def _run(graph: Any, version: str) -> tuple[threading.Thread, dict[str, Any]]:
    final: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: final.update(graph.invoke({"version": version})))
    thread.start()
    return thread, final


def test_the_node_acts_on_the_edited_arguments_and_stops_on_a_rejection(stack: Stack) -> None:
    """Edited to 1.4.3: the graph releases 1.4.3 and reports it; a rejection releases nothing."""
    client = stack.client(stack.token("release-bot"))
    released: list[str] = []
    graph = build_graph(client, lambda v: released.append(v) or f"released {v}", timeout=30)

    thread, final = _run(graph, "1.4.2")
    (waiting,) = wait_until(lambda: client.pending(), 20, "the graph's approval")
    card = card_of(stack.slack, waiting["id"])
    click(stack.slack, stack.bot_url, "edit", waiting["id"], card_ts=card.ts)
    assert submit_edit(stack.bot_url, waiting["id"], {"version": "1.4.3"}) == (200, "")
    thread.join(30)
    assert final["outcome"] == "released 1.4.3" and released == ["1.4.3"]
    reply_containing(stack.slack, card.ts, "released 1.4.3")

    thread, final = _run(graph, "2.0.0")
    (waiting,) = wait_until(lambda: client.pending(), 20, "the second approval")
    card_of(stack.slack, waiting["id"])
    submit_reject(stack.bot_url, waiting["id"], "freeze until Monday")
    thread.join(30)
    assert final["outcome"] == "not released: freeze until Monday" and released == ["1.4.3"]
