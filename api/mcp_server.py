"""``approvals mcp``: one blocking MCP tool for agents inside MCP clients, on the official SDK.

``request_approval`` asks through ``approvals api`` like any other caller, then waits (one long
poll after another, with a progress notification after each) until people decide, and returns
the same JSON as ``GET /v1/approvals/{id}``. ``list_pending`` lists the agent's waiting ones.
Over stdio the token is ``APPROVALS_API_TOKEN``; over streamable HTTP (mounted on the API at
``/mcp``) it is the request's own bearer token, so each MCP client asks as its own agent.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from mcp.server.mcpserver import Context, MCPServer

from approvals.config import Settings

#: Seconds of each long poll: a progress notification follows each one that ends undecided.
POLL_SECONDS = 10.0


def build_server(settings: Settings) -> MCPServer:
    """The MCP server; callers reach the API at ``settings.api_url`` unless mounted on it."""
    server = MCPServer(
        "approvals",
        instructions=(
            "Before an action that needs a person's approval, call request_approval with the "
            "tool name and its arguments; act only if the answer's status is approved or "
            "edited, and then with decision.arguments."
        ),
    )

    @server.tool()
    async def request_approval(
        tool: str, arguments: dict[str, Any], ctx: Context, summary: str | None = None
    ) -> dict[str, Any]:
        """Ask people in Slack whether to call `tool` with `arguments`; waits for the decision
        and returns it (status, decision with the final arguments, receipt)."""
        async with _api(settings, ctx) as http:
            body: dict[str, Any] = {"tool": tool, "arguments": arguments}
            if summary is not None:
                body["summary"] = summary
            made = _checked(await http.post("/v1/approvals", json=body))
            return await _wait(http, made["id"], ctx)

    @server.tool()
    async def list_pending(ctx: Context) -> list[dict[str, Any]]:
        """The approvals this agent is still waiting for."""
        async with _api(settings, ctx) as http:
            found = _checked(await http.get("/v1/approvals", params={"status": "pending"}))
            return list(found["approvals"])

    return server


def _api(settings: Settings, ctx: Context) -> httpx.AsyncClient:
    """An HTTP client for the API, as the caller's agent."""
    headers = ctx.headers or {}
    incoming = headers.get("authorization")
    request = getattr(ctx.request_context, "request", None)
    base = str(getattr(request, "base_url", "")) if incoming else settings.api_url
    token = incoming or f"Bearer {settings.api_token or ''}"
    return httpx.AsyncClient(
        base_url=base.rstrip("/"),
        headers={"Authorization": token},
        timeout=POLL_SECONDS + 15,
    )


async def _wait(http: httpx.AsyncClient, approval_id: str, ctx: Context) -> dict[str, Any]:
    """Long polls until decided; the client hears first that the card is asked for, then
    after each poll that ended undecided, so it knows the call is alive."""
    started = time.monotonic()
    await ctx.report_progress(0, None, f"asked in Slack ({approval_id}); waiting for a decision")
    while True:
        params = {"wait": POLL_SECONDS}
        answer = _checked(await http.get(f"/v1/approvals/{approval_id}", params=params))
        if answer["status"] != "pending":
            return answer
        waited = time.monotonic() - started
        await ctx.report_progress(waited, None, f"waiting for a decision in Slack ({approval_id})")


def _checked(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON; a refusal becomes an error the MCP client sees with its reason."""
    if response.status_code >= 400:
        raise ValueError(f"approvals api refused: HTTP {response.status_code} {response.text}")
    data: dict[str, Any] = response.json()
    return data
