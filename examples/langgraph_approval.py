"""A LangGraph node that asks people in Slack before acting, through ``approvals api``.

The seed pattern: ``propose`` the action, ``wait`` for the decision (a person may edit the
arguments), ``act`` on the final arguments only if approved, then report what happened so the
card's thread shows it. Run ``approvals api``, the bot and a worker, create a token with
``approvals tokens create --agent release-bot``, and set APPROVALS_API_URL / APPROVALS_API_TOKEN.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from approvals.client import Client


class ReleaseState(TypedDict, total=False):
    """What flows through the graph."""

    version: str
    approval: dict[str, Any]
    outcome: str


def build_graph(client: Client, release: Callable[[str], str], timeout: float = 3600) -> Any:
    """propose -> ask -> (act | stop): ``release`` runs only on an approved (or edited) decision."""

    def ask(state: ReleaseState) -> ReleaseState:
        made = client.request(
            "release",
            {"version": state["version"]},
            summary=f"Release {state['version']}",
            preview=f"Tag *{state['version']}* and publish it.",
            schema={"type": "object", "properties": {"version": {"type": "string"}}},
            editable=["version"],
        )
        return {"approval": client.wait(made["id"], timeout=timeout)}

    def act(state: ReleaseState) -> ReleaseState:
        approval = state["approval"]
        version = approval["decision"]["arguments"]["version"]  # possibly edited
        try:
            output = release(version)
        except Exception as exc:
            client.report(approval["id"], ok=False, output=str(exc))
            raise
        client.report(approval["id"], ok=True, output=output)
        return {"outcome": output}

    def stop(state: ReleaseState) -> ReleaseState:
        decision = state["approval"].get("decision") or {}
        why = decision.get("reason") or decision.get("response") or state["approval"]["status"]
        return {"outcome": f"not released: {why}"}

    def route(state: ReleaseState) -> str:
        return "act" if state["approval"]["status"] in ("approved", "edited") else "stop"

    graph = StateGraph(ReleaseState)
    graph.add_node("ask", ask)
    graph.add_node("act", act)
    graph.add_node("stop", stop)
    graph.add_edge(START, "ask")
    graph.add_conditional_edges("ask", route, {"act": "act", "stop": "stop"})
    graph.add_edge("act", END)
    graph.add_edge("stop", END)
    return graph.compile()


if __name__ == "__main__":  # pragma: no cover - a demo
    with Client(os.environ["APPROVALS_API_URL"], os.environ["APPROVALS_API_TOKEN"]) as api:
        app = build_graph(api, lambda version: f"released {version}")
        print(app.invoke({"version": "1.4.2"})["outcome"])
