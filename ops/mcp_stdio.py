"""`engram mcp`: engram's MCP server over stdio, for desktop clients (Claude Desktop, Cursor, ...).

It forwards every request to the gateway's `/mcp` endpoint with the given key (and user), so the
tools, their rules and isolation are exactly those of the HTTP server, and a desktop machine needs
no database access: only the gateway's URL and an API key (ideally one bound to the user).
"""

from __future__ import annotations

from typing import Any

import httpx2
from mcp import Client, stdio_server
from mcp import types as mcp_types
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.shared._httpx_utils import create_mcp_http_client


class GatewayRefused(RuntimeError):
    """The gateway did not accept the connection (bad key, missing user, unreachable)."""


def _headers(api_key: str, user: str | None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {api_key}"}
    if user:
        headers["X-Engram-User"] = user
    return headers


async def check_gateway(url: str, api_key: str, user: str | None) -> None:
    """Fail early with the gateway's own reason (a desktop client shows only that the server exited)."""
    body = {"jsonrpc": "2.0", "id": 0, "method": "ping"}
    headers = {**_headers(api_key, user), "Accept": "application/json, text/event-stream"}
    try:
        async with httpx2.AsyncClient(timeout=30) as http:
            response = await http.post(url, json=body, headers=headers)
    except httpx2.HTTPError as exc:
        raise GatewayRefused(f"cannot reach engram at {url}: {exc}") from exc
    if response.status_code == 404:
        raise GatewayRefused(f"no MCP endpoint at {url} (404): is it an engram gateway?")
    try:
        body = response.json()
    except ValueError:
        return
    # The gateway's own refusals (auth, user, rate limit) have engram's error shape; anything else is the
    # MCP server answering a bare ping, which is fine.
    if response.status_code >= 400 and isinstance(body, dict) and "detail" in body:
        raise GatewayRefused(f"engram refused the connection ({response.status_code}): {body['detail']}")


async def serve(url: str, api_key: str, user: str | None) -> None:
    await check_gateway(url, api_key, user)
    http = create_mcp_http_client(headers=_headers(api_key, user))
    async with http, Client(streamable_http_client(url, http_client=http)) as remote:

        async def list_tools(_ctx: Any, params: mcp_types.PaginatedRequestParams | None) -> mcp_types.ListToolsResult:
            return await remote.list_tools(cursor=params.cursor if params else None, cache_mode="refresh")

        async def call_tool(_ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
            result = await remote.call_tool(params.name, params.arguments or {})
            assert isinstance(result, mcp_types.CallToolResult)
            return result

        async def list_resources(
            _ctx: Any, params: mcp_types.PaginatedRequestParams | None
        ) -> mcp_types.ListResourcesResult:
            return await remote.list_resources(cursor=params.cursor if params else None, cache_mode="refresh")

        async def read_resource(_ctx: Any, params: mcp_types.ReadResourceRequestParams) -> mcp_types.ReadResourceResult:
            return await remote.read_resource(str(params.uri), cache_mode="refresh")

        info = remote.server_info
        server: Server[Any] = Server(
            "engram",
            version=info.version if info is not None else "",
            instructions=remote.instructions,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_resources=list_resources,
            on_read_resource=read_resource,
        )
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
