"""A small MCP server built with the official SDK, for the MCP tests (and nothing else).

Run ``python mcp_server.py stdio`` to serve over stdin/stdout, or
``python mcp_server.py http PORT`` to serve streamable HTTP on 127.0.0.1:PORT at ``/mcp``.
``http PORT 400`` (or ``400-json``) answers a session id it did not issue as the TypeScript SDK's
servers do, instead of the Python SDK's 404: HTTP 400 with a JSON-RPC error whose ``id`` is null,
without a content type (or as ``application/json``); it also lists a tool ``gateway_refused``,
whose calls it refuses with the same 400 on a session it knows.

Its tools: ``add`` answers, ``fail`` returns an error result, ``reject`` answers with a
JSON-RPC error, ``hang`` never answers, ``die`` ends the server's process in the middle of the
call, ``repeat`` returns long texts, and ``whoami`` returns the process id (to tell a
restarted server from the first one). Content beyond text: ``picture`` returns an image (with
annotations), ``logo`` an image between two texts and a text for the user only, ``forecast``
structured content with no text, ``linked`` a resource link, and ``slow`` reports its progress
before it answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import mcp_types
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("fsm-agent-test", log_level="WARNING")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Always fails, with the reason it was given.")
def fail(reason: str) -> str:
    raise ToolError(reason)


@server.tool(description="Answers with a JSON-RPC error instead of a result.")
def reject() -> str:
    raise MCPError(-32000, "the server refused the request")


@server.tool(description="Never answers.")
async def hang() -> str:
    await asyncio.sleep(3600)
    return "unreachable"


@server.tool(description="Ends the server's process while the call is running.")
def die() -> str:
    os._exit(3)


@server.tool(name="site.lookup", description="A tool whose name needs sanitising.")
def lookup(key: str) -> str:
    return f"value of {key}"


@server.tool(description="Repeat a text.")
def repeat(text: str, times: int) -> str:
    return text * times


@server.tool(description="The server's process id.")
def whoami() -> int:
    return os.getpid()


PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4"
    "2mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""A 1×1 PNG, base64."""


@server.tool(description="A picture, with a caption.")
def picture() -> mcp_types.CallToolResult:
    audience = mcp_types.Annotations(audience=["user", "assistant"], priority=0.9)
    return mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="a red pixel"),
            mcp_types.ImageContent(
                type="image", data=PIXEL, mime_type="image/png", annotations=audience
            ),
        ]
    )


@server.tool(description="A logo between two texts, and a note for the user only.")
def logo() -> mcp_types.CallToolResult:
    for_user = mcp_types.Annotations(audience=["user"])
    return mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="Here is the logo."),
            mcp_types.ImageContent(type="image", data=PIXEL, mime_type="image/png"),
            mcp_types.TextContent(type="text", text="The image above is the MCP logo."),
            mcp_types.TextContent(type="text", text="Shown in the app.", annotations=for_user),
        ]
    )


@server.tool(description="Tomorrow's forecast, as structured content only.")
def forecast() -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[], structured_content={"city": "Oslo", "celsius": -3, "sky": "snow"}
    )


@server.tool(description="A link to the report.")
def linked() -> mcp_types.CallToolResult:
    link = mcp_types.ResourceLink(
        type="resource_link",
        uri="file:///reports/q3.pdf",
        name="q3.pdf",
        description="The third quarter's report",
        mime_type="application/pdf",
    )
    return mcp_types.CallToolResult(content=[link])


@server.tool(description="A long operation that reports its progress.")
async def slow(steps: int, ctx: Context) -> str:
    for done in range(1, steps + 1):
        await ctx.report_progress(done, steps, f"step {done} of {steps}")
    return f"{steps} steps done"


def gateway_refused() -> str:
    """Refused by the HTTP front with a 400 (never runs)."""
    return "unreachable"


_REFUSAL = json.dumps(
    {
        "jsonrpc": "2.0",
        "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"},
        "id": None,
    }
).encode()


class RefuseLikeTypeScript:
    """An ASGI front for the SDK's app that answers a session id this process did not issue
    (a client of the process before a restart) with HTTP 400, as TypeScript SDK servers do."""

    def __init__(self, app: Any, *, typed: bool) -> None:
        self.app = app
        self.typed = typed
        self.issued: set[bytes] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session = dict(scope["headers"]).get(b"mcp-session-id")
        if session is not None and session not in self.issued:
            await self._refuse(send)
            return
        if session is not None and scope["method"] == "POST":
            body = b""
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            if b'"gateway_refused"' in body:
                await self._refuse(send)
                return
            receive = _replay(body, receive)

        async def watch(message: Any) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", []):
                    if name.lower() == b"mcp-session-id":
                        self.issued.add(value)
            await send(message)

        await self.app(scope, receive, watch)

    async def _refuse(self, send: Any) -> None:
        headers = [(b"content-length", str(len(_REFUSAL)).encode())]
        if self.typed:
            headers.append((b"content-type", b"application/json"))
        await send({"type": "http.response.start", "status": 400, "headers": headers})
        await send({"type": "http.response.body", "body": _REFUSAL})


def _replay(body: bytes, receive: Any) -> Any:
    """A ``receive`` that gives the already-read ``body`` first, then what ``receive`` gives."""
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    elif len(sys.argv) > 3:
        import uvicorn

        server.tool()(gateway_refused)
        front = RefuseLikeTypeScript(server.streamable_http_app(), typed=sys.argv[3] == "400-json")
        uvicorn.run(front, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
