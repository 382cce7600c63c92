"""``approvals mcp`` driven by the official SDK's own client, over stdio and over the API's
streamable HTTP mount: the blocking tool returns the decision made in Slack, with progress
notifications while it waits; /mcp lets in only the API's own bearer tokens; every refusal of
the API reaches the client as a tool error that says why; a retry with the same key asks once."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from approvals import store
from approvals.api import mcp_server
from approvals.api.mcp_server import build_server
from approvals.calls import external
from approvals.config import Settings
from approvals.proof.tokens import revoke_token, verify_token
from tests.api.conftest import Stack
from tests.e2e import card_of, click, submit_reject
from tests.processes import ROOT, approvals_command, free_port, wait_until

#: The opening message of every MCP session.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "tests", "version": "1"},
    },
}
#: What a streamable HTTP client sends with each message.
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
REFUSED = "Error executing tool {tool}: approvals api refused (HTTP {status}): {reason}"


def _params(stack: Stack, token: str, api_url: str | None = None) -> StdioServerParameters:
    command, *args = approvals_command("mcp")
    env = {
        **stack.env,
        "APPROVALS_API_URL": api_url or stack.api_url,
        "APPROVALS_API_TOKEN": token,
        "PYTHONPATH": str(ROOT),
    }
    return StdioServerParameters(command=command, args=args, env=env, cwd=str(ROOT))


@asynccontextmanager
async def _session(stack: Stack, token: str, way: str) -> AsyncIterator[Client]:
    """An MCP client as ``token``'s agent: ``approvals mcp`` over stdio, or the API's /mcp."""
    if way == "stdio":
        async with Client(_params(stack, token)) as client:
            yield client
        return
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(stack.api_url + "/mcp", http_client=http)
        async with Client(transport) as client:
            yield client


def _json(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content)
    return json.loads(result.content[0].text)


def _error(result: Any) -> str:
    """The text of a tool error (the call must have been one)."""
    assert result.is_error, result
    return str(result.content[0].text)


def _cards(stack: Stack, approval_id: str) -> list[dict[str, Any]]:
    """The chat.postMessage calls that posted a card for ``approval_id``."""
    return [
        call
        for call in stack.slack.calls("chat.postMessage")
        if approval_id in json.dumps(call["args"].get("blocks", "")) and call["status"] == 200
    ]


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
        async with _session(stack, token, "http") as client:
            deciding = asyncio.create_task(asyncio.to_thread(approve_when_posted))
            result = await client.call_tool(
                "request_approval", {"tool": "restart", "arguments": {"service": "web"}}
            )
            await deciding
            return result

    answer = _json(asyncio.run(run()))
    assert answer["status"] == "approved" and answer["agent"] == "mcp-http-agent"
    assert answer["decision"]["arguments"] == {"service": "web"}


def test_mcp_over_http_without_a_valid_token_is_refused_and_reads_nothing(stack: Stack) -> None:
    """/mcp answers 401 (WWW-Authenticate: Bearer) to a request without a valid bearer token,
    before MCP itself: never as the token in the API's own environment. An MCP client without
    a token neither lists nor creates that agent's approvals."""
    ambient = stack.client(stack.ambient_token)
    waiting = ambient.request("deploy", {"service": "web"})
    revoked = stack.token("mcp-revoked-agent")
    revoke_token(stack.conn, verify_token(stack.conn, revoked).id)  # type: ignore[union-attr]
    for authorization in [
        None,
        "",
        "Bearer",
        "Basic " + base64.b64encode(b"user:pass").decode(),
        "Bearer apv_not-a-token",
        f"Bearer {revoked}",
        stack.ambient_token,
        f"Token {stack.ambient_token}",
    ]:
        headers = dict(MCP_HEADERS)
        if authorization is not None:
            headers["Authorization"] = authorization
        answer = httpx.post(stack.api_url + "/mcp", json=INITIALIZE, headers=headers, timeout=10)
        assert answer.status_code == 401, (authorization, answer.text)
        assert answer.headers["www-authenticate"].startswith("Bearer"), authorization

    async def without_token() -> list[Any]:
        seen: list[Any] = []
        for call in [
            ("list_pending", {}),
            ("request_approval", {"tool": "deploy", "arguments": {"service": "db"}}),
        ]:
            try:
                async with httpx2.AsyncClient(timeout=30) as http:
                    transport = streamable_http_client(stack.api_url + "/mcp", http_client=http)
                    async with Client(transport) as client:
                        seen.append(await client.call_tool(*call, read_timeout_seconds=5))
            except Exception as exc:  # the SDK's client wraps the 401 in task groups
                seen.append(exc)
        return seen

    seen = asyncio.run(without_token())
    assert all(isinstance(outcome, Exception) for outcome in seen), seen
    assert [a["id"] for a in ambient.pending()] == [waiting["id"]]


def test_an_mcp_session_is_bound_to_the_token_that_opened_it(stack: Stack) -> None:
    """A request in another token's MCP session is answered as if there were no such
    session (404), and the session's own token, once revoked, gets 401."""
    first, second = stack.token("mcp-session-a"), stack.token("mcp-session-b")
    opened = httpx.post(
        stack.api_url + "/mcp",
        json=INITIALIZE,
        headers={**MCP_HEADERS, "Authorization": f"Bearer {first}"},
        timeout=10,
    )
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}

    def in_session(token: str) -> httpx.Response:
        headers = {
            **MCP_HEADERS,
            "Authorization": f"Bearer {token}",
            "Mcp-Session-Id": session,
            "Mcp-Protocol-Version": "2025-06-18",
        }
        return httpx.post(stack.api_url + "/mcp", json=listing, headers=headers, timeout=10)

    assert in_session(first).status_code == 200
    assert in_session(second).status_code == 404
    revoke_token(stack.conn, verify_token(stack.conn, first).id)  # type: ignore[union-attr]
    assert in_session(first).status_code == 401


def _over_the_limit(stack: Stack, token: str) -> None:
    """Spend ``token``'s requests of this minute and the next (the API counts per minute)."""
    found = verify_token(stack.conn, token)
    assert found is not None
    minute = int(time.time() // 60)
    for spent in (minute, minute + 1):
        stack.conn.set(store.keys.rate_key(found.id, spent), 1_000_000, ex=180)


@pytest.mark.parametrize("way", ["stdio", "http"])
def test_api_refusals_reach_the_client_as_tool_errors_that_say_why(stack: Stack, way: str) -> None:
    """A 403, a 422 and a 429 of the API come back as tool errors (is_error) with the status
    and the API's reason, not a bare "Error executing tool"; nothing is asked."""
    agent = f"mcp-refused-{way}"
    token = stack.token(agent, ("deploy",))

    async def run() -> list[Any]:
        async with _session(stack, token, way) as client:
            forbidden = await client.call_tool(
                "request_approval", {"tool": "upload", "arguments": {"bucket": "prod"}}
            )
            invalid = await client.call_tool(
                "request_approval", {"tool": "deploy web", "arguments": {}}
            )
            too_long = await client.call_tool(
                "request_approval", {"tool": "deploy", "arguments": {}, "summary": "x" * 501}
            )
            _over_the_limit(stack, token)
            limited = await client.call_tool("list_pending", {})
            return [forbidden, invalid, too_long, limited]

    forbidden, invalid, too_long, limited = [_error(r) for r in asyncio.run(run())]
    ask = "request_approval"
    assert forbidden == REFUSED.format(
        tool=ask, status=403, reason="this token may not ask for tool 'upload'"
    )
    assert invalid == REFUSED.format(
        tool=ask, status=422, reason="tool: String should match pattern '^[A-Za-z0-9_.:/-]+$'"
    )
    assert too_long == REFUSED.format(
        tool=ask, status=422, reason="summary: String should have at most 500 characters"
    )
    over = REFUSED.format(
        tool="list_pending", status=429, reason="over 600 requests a minute for this token"
    )
    assert limited.startswith(over + " (retry after ") and limited.endswith(" s)")
    assert external.pending_of(stack.conn, agent, 10) == []


def test_an_unknown_token_or_no_api_reach_the_stdio_client_as_tool_errors(stack: Stack) -> None:
    """Over stdio, a token the API does not know is its 401 with the reason, and an API that
    is not listening says so with its address; both as tool errors, the session still open."""
    nowhere = f"http://127.0.0.1:{free_port()}"

    async def call(params: StdioServerParameters) -> Any:
        async with Client(params) as client:
            return await client.call_tool("list_pending", {})

    async def run() -> list[Any]:
        return list(
            await asyncio.gather(
                call(_params(stack, "apv_unknown")),
                call(_params(stack, stack.token("mcp-nowhere"), api_url=nowhere)),
            )
        )

    unknown, unreachable = [_error(r) for r in asyncio.run(run())]
    assert unknown == REFUSED.format(
        tool="list_pending", status=401, reason="a valid bearer token is required"
    )
    assert unreachable.startswith(
        f"Error executing tool list_pending: cannot reach the approvals api at {nowhere}"
    )


def test_an_api_that_does_not_answer_in_time_is_a_tool_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An API that accepts the connection but never answers is a tool error saying so once
    the answer's deadline passes, not a call that hangs."""
    monkeypatch.setattr(mcp_server, "ANSWER_SECONDS", 0.5)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        server = build_server(Settings(api_url=url, api_token="apv_x"))

        async def run() -> Any:
            async with Client(server) as client:
                return await asyncio.wait_for(client.call_tool("list_pending", {}), 30)

        text = _error(asyncio.run(run()))
    assert text == (
        f"Error executing tool list_pending: approvals api at {url} did not answer in time"
    )


def test_a_retry_with_the_same_idempotency_key_asks_once(stack: Stack) -> None:
    """A call that the client gives up on (it times out and cancels) leaves its approval
    pending; a retry with the same idempotency_key waits for that same approval, and one
    after the decision gets it at once: one approval, one card."""
    token = stack.token("mcp-retry-agent")
    lister = stack.client(token)
    ask = {"tool": "rotate", "arguments": {"key": "db"}, "idempotency_key": "rotate-db-1"}

    def approve_when_asked_again(approval_id: str, progress: list[float]) -> None:
        wait_until(lambda: progress, 30, "the retry's first progress notification")
        card = card_of(stack.slack, approval_id)
        click(stack.slack, stack.bot_url, "approve", approval_id, card_ts=card.ts)

    async def run() -> tuple[str, Any, Any]:
        async with _session(stack, token, "http") as client:
            with pytest.raises(MCPError):
                await client.call_tool("request_approval", ask, read_timeout_seconds=2)
            (waiting,) = lister.pending()
            card_of(stack.slack, waiting["id"])
            progress: list[float] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(value)

            deciding = asyncio.create_task(
                asyncio.to_thread(approve_when_asked_again, waiting["id"], progress)
            )
            retried = await client.call_tool(
                "request_approval", ask, read_timeout_seconds=60, progress_callback=on_progress
            )
            await deciding
            again = await client.call_tool("request_approval", ask, read_timeout_seconds=30)
            return waiting["id"], retried, again

    approval_id, retried, again = asyncio.run(run())
    assert _json(retried)["id"] == _json(again)["id"] == approval_id
    assert _json(retried)["status"] == _json(again)["status"] == "approved"
    assert lister.pending() == [] and lister.find("rotate-db-1")["id"] == approval_id  # type: ignore[index]
    assert len(_cards(stack, approval_id)) == 1
