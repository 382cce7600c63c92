"""``approvals mcp`` driven by the official SDK's own client over stdio: the blocking tool
returns the decision made in Slack, with progress notifications while it waits."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.api.conftest import Stack
from tests.e2e import card_of, click, submit_reject
from tests.processes import ROOT, approvals_command, wait_until


def _params(stack: Stack, token: str) -> StdioServerParameters:
    command, *args = approvals_command("mcp")
    env = {**stack.env, "APPROVALS_API_URL": stack.api_url, "APPROVALS_API_TOKEN": token}
    return StdioServerParameters(
        command=command, args=args, env={**env, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT)
    )


def _json(result: Any) -> Any:
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content)
    return json.loads(result.content[0].text)


def test_request_approval_over_stdio_returns_the_slack_decision(stack: Stack) -> None:
    """The tool blocks until a person rejects in Slack and returns GET's JSON."""
    token = stack.token("mcp-agent")
    lister = stack.client(token)
    progress: list[float] = []

    def reject_when_posted() -> None:
        (waiting,) = wait_until(lambda: lister.pending(), 30, "the MCP request")
        card_of(stack.slack, waiting["id"])
        wait_until(lambda: progress, 30, "a progress notification")
        submit_reject(stack.bot_url, waiting["id"], "use the staging bucket")

    async def run() -> tuple[Any, Any]:
        async with Client(_params(stack, token)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"request_approval", "list_pending"} <= tools

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            deciding = asyncio.create_task(asyncio.to_thread(reject_when_posted))
            result = await client.call_tool(
                "request_approval",
                {"tool": "upload", "arguments": {"bucket": "prod"}, "summary": "Upload"},
                progress_callback=on_progress,
            )
            await deciding
            pending = await client.call_tool("list_pending", {})
            return result, pending

    result, pending = asyncio.run(run())
    answer = _json(result)
    assert answer["status"] == "rejected" and answer["receipt"] is None
    assert answer["decision"]["reason"] == "use the staging bucket"
    assert _json(pending) == []


def test_request_approval_over_streamable_http_on_the_api(stack: Stack) -> None:
    """The same tool mounted on the API at /mcp, as the bearer token's agent."""
    token = stack.token("mcp-http-agent")
    lister = stack.client(token)

    def approve_when_posted() -> None:
        (waiting,) = wait_until(lambda: lister.pending(), 30, "the MCP request")
        card = card_of(stack.slack, waiting["id"])
        click(stack.slack, stack.bot_url, "approve", waiting["id"], card_ts=card.ts)

    async def run() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(stack.api_url + "/mcp", http_client=http)
            async with Client(transport) as client:
                deciding = asyncio.create_task(asyncio.to_thread(approve_when_posted))
                result = await client.call_tool(
                    "request_approval", {"tool": "restart", "arguments": {"service": "web"}}
                )
                await deciding
                return result

    answer = _json(asyncio.run(run()))
    assert answer["status"] == "approved" and answer["agent"] == "mcp-http-agent"
    assert answer["decision"]["arguments"] == {"service": "web"}
