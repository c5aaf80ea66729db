"""A small MCP server built with the official SDK, for the MCP tests (and nothing else).

Run ``python mcp_server.py stdio`` to serve over stdin/stdout, or
``python mcp_server.py http PORT`` to serve streamable HTTP on 127.0.0.1:PORT at ``/mcp``.

Its tools: ``add`` answers, ``fail`` returns an error result, ``reject`` answers with a
JSON-RPC error, ``hang`` never answers, ``die`` ends the server's process in the middle of the
call, ``repeat`` returns long texts, and ``whoami`` returns the process id (to tell a
restarted server from the first one).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp import MCPError
from mcp.server.mcpserver import MCPServer
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


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
