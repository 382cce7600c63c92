"""``approvals mcp``: one blocking MCP tool for agents inside MCP clients, on the official SDK.

``request_approval`` asks through ``approvals api`` like any other caller, then waits (one long
poll after another, with a progress notification after each) until people decide, and returns
the same JSON as ``GET /v1/approvals/{id}``. ``list_pending`` lists the agent's waiting ones.

Who asks depends on the way in, and each way has one rule:

- stdio (``approvals mcp``): the API at ``APPROVALS_API_URL``, as ``APPROVALS_API_TOKEN``'s
  agent (the process serves one client, whoever started it).
- streamable HTTP, mounted on the API at ``/mcp``: every HTTP request carries an API bearer
  token, checked by the SDK's bearer middleware before MCP reads the request (401 with
  ``WWW-Authenticate: Bearer`` otherwise); the tools then call the API in process as that
  token's agent. The mount never uses the environment's token: anyone can reach it.

Whatever the API answers short of an answer (a refusal, a failure, no connection, no answer in
time) reaches the client as a tool error that says the status and the API's reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import anyio.to_thread
import httpx
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import AnyHttpUrl, Field
from starlette.routing import Route

from approvals.config import Settings
from approvals.proof.tokens import verify_token

if TYPE_CHECKING:
    from fastapi import FastAPI

#: Seconds of each long poll: a progress notification follows each one that ends undecided.
POLL_SECONDS = 10.0
#: Seconds the API has to answer, on top of a long poll's own wait.
ANSWER_SECONDS = 10.0

#: Opens a client of the API as the caller's agent.
Connect = Callable[[], httpx.AsyncClient]

INSTRUCTIONS = (
    "Before an action that needs a person's approval, call request_approval with the tool "
    "name and its arguments; act only if the answer's status is approved or edited, and then "
    "with decision.arguments. Give each action an idempotency_key of your own and send the "
    "same key when you retry it, so that people are asked once."
)


def build_server(settings: Settings, mounted_on: FastAPI | None = None) -> MCPServer:
    """The MCP server: for stdio, or (``mounted_on`` the API) for the API's ``/mcp``."""
    if mounted_on is None:
        return _server(_by_environment(settings))
    # The SDK's auth settings require an OAuth issuer; it is advertised only by OAuth routes,
    # which a server without ``resource_server_url`` or an OAuth provider never serves, so a
    # placeholder (not APPROVALS_API_URL: a malformed one would stop the API from starting).
    auth = AuthSettings(issuer_url=AnyHttpUrl("http://localhost"), resource_server_url=None)
    return _server(_in_process(mounted_on), AgentTokens(mounted_on), auth)


def http_route(server: MCPServer) -> Route:
    """The server's streamable HTTP endpoint at ``/mcp`` inside the SDK's bearer middleware,
    as one route of the API. Not the SDK's whole app: its own error middleware would turn the
    API's refusal of an oversized body (raised while the SDK reads it) into a 500."""
    app = server.streamable_http_app(streamable_http_path="/mcp")
    (route,) = app.routes
    assert isinstance(route, Route)
    return Route("/mcp", route.endpoint, middleware=app.user_middleware)


class AgentTokens:
    """The API's bearer tokens, as the SDK's ``TokenVerifier``: an unknown, revoked or
    malformed token is None, and the SDK answers 401 before MCP sees the request.

    The token's id is the SDK's client id, so an MCP session opened with one token is not
    usable with another (the SDK answers it as an unknown session).
    """

    def __init__(self, app: FastAPI) -> None:
        self._app = app

    async def verify_token(self, token: str) -> AccessToken | None:
        secret = token.strip()
        found = await anyio.to_thread.run_sync(verify_token, self._app.state.conn, secret)
        if found is None:
            return None
        return AccessToken(token=secret, client_id=found.id, scopes=[], subject=found.agent)


def _server(
    connect: Connect, verifier: AgentTokens | None = None, auth: AuthSettings | None = None
) -> MCPServer:
    server = MCPServer("approvals", instructions=INSTRUCTIONS, token_verifier=verifier, auth=auth)

    @server.tool()
    async def request_approval(
        tool: Annotated[str, Field(description="The name of the action to approve.")],
        arguments: Annotated[dict[str, Any], Field(description="The action's arguments.")],
        ctx: Context,
        summary: Annotated[
            str | None, Field(description="One line for the people deciding.")
        ] = None,
        idempotency_key: Annotated[
            str | None,
            Field(
                description="Your own key for this action: a retry with the same key gets "
                "the same approval (and its decision) instead of a second card."
            ),
        ] = None,
        fingerprint: Annotated[
            str | None,
            Field(
                description="A short string naming the state the decision depends on (a "
                "file's hash, a row's version): it comes back in the decision and receipt."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Ask people in Slack whether to call `tool` with `arguments`; returns their decision."""
        body: dict[str, Any] = {"tool": tool, "arguments": arguments}
        if summary is not None:
            body["summary"] = summary
        if fingerprint is not None:
            body["fingerprint"] = fingerprint
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        async with connect() as http:
            made = await _call(http, "POST", "/v1/approvals", json=body)
            return await _wait(http, made["id"], ctx)

    @server.tool()
    async def list_pending() -> list[dict[str, Any]]:
        """The approvals this agent is still waiting for."""
        async with connect() as http:
            found = await _call(http, "GET", "/v1/approvals", params={"status": "pending"})
            return list(found["approvals"])

    return server


def _by_environment(settings: Settings) -> Connect:
    """Over stdio: the API at ``APPROVALS_API_URL``, as ``APPROVALS_API_TOKEN``'s agent."""

    def connect() -> httpx.AsyncClient:
        return _client(settings.api_url, settings.api_token or "", None)

    return connect


def _in_process(app: FastAPI) -> Connect:
    """Mounted on the API: the API itself, in process (no request leaves it, so no header of
    the client's picks where one goes), as the token the HTTP request was let in with."""

    def connect() -> httpx.AsyncClient:
        token = get_access_token()
        if token is None:  # the bearer middleware lets no such request in; never fall back
            raise ToolError("a valid bearer token is required")
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        return _client("http://approvals-api", token.token, transport)

    return connect


def _client(url: str, token: str, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url.rstrip("/"),
        headers={"Authorization": f"Bearer {token}"},
        timeout=ANSWER_SECONDS,
        transport=transport,
    )


async def _wait(http: httpx.AsyncClient, approval_id: str, ctx: Context) -> dict[str, Any]:
    """Long polls until decided; the client hears first that the card is asked for, then
    after each poll that ended undecided, so it knows the call is alive."""
    started = time.monotonic()
    await ctx.report_progress(0, None, f"asked in Slack ({approval_id}); waiting for a decision")
    while True:
        answer = await _call(
            http,
            "GET",
            f"/v1/approvals/{approval_id}",
            params={"wait": POLL_SECONDS},
            timeout=POLL_SECONDS + ANSWER_SECONDS,
        )
        if answer["status"] != "pending":
            return answer
        waited = time.monotonic() - started
        await ctx.report_progress(waited, None, f"waiting for a decision in Slack ({approval_id})")


async def _call(http: httpx.AsyncClient, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    """The API's JSON answer.

    Raises:
        ToolError: the API refused or failed (its status and reason), or could not be
            reached or did not answer in time; the client reads it as the tool's error.
    """
    try:
        response = await http.request(method, path, **kwargs)
    except httpx.TimeoutException:
        raise ToolError(f"approvals api at {http.base_url} did not answer in time") from None
    except httpx.TransportError as exc:
        raise ToolError(f"cannot reach the approvals api at {http.base_url}: {exc}") from None
    if response.status_code >= 400:
        raise ToolError(_refusal(response))
    data: dict[str, Any] = response.json()
    return data


def _refusal(response: httpx.Response) -> str:
    """What the API said, for a person or a model to read: the status, then its ``detail``
    (each invalid field as ``where: what``), then when to retry if it said so."""
    verb = "refused" if response.status_code < 500 else "failed"
    text = f"approvals api {verb} (HTTP {response.status_code}): {_reason(response)}"
    retry = response.headers.get("retry-after")
    return f"{text} (retry after {retry} s)" if retry else text


def _reason(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return response.text[:500] or response.reason_phrase
    if isinstance(detail, list):
        return "; ".join(_field_error(error) for error in detail)
    return str(detail)


def _field_error(error: Any) -> str:
    """One entry of a 422's ``detail`` as ``arguments.path: message``."""
    if not isinstance(error, dict):
        return str(error)
    where = [str(part) for part in error.get("loc", [])]
    if where[:1] == ["body"]:
        where = where[1:]
    message = str(error.get("msg", ""))
    return f"{'.'.join(where)}: {message}" if where else message
