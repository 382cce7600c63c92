"""``approvals mcp`` driven by the official SDK's own client over stdio: the blocking tool
returns the decision made in Slack, with progress notifications while it waits."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.api.conftest import Stack
from tests.e2e import card_of, submit_reject
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
