"""Tools from Model Context Protocol servers, as ordinary fsm_agent tools.

:class:`MCPServerStdio` starts a server as a subprocess and talks to it over its stdin and
stdout; :class:`MCPServerHTTP` talks to one over streamable HTTP. Either is an async context
manager: entering it connects and lists the server's tools, leaving it closes the connection
(and ends the subprocess). Inside, ``server.tools`` are :class:`~fsm_agent.Tool` objects built
from the server's listing, so everything the kernel does with a tool applies to them: the
schema and description the model sees, the timeout, approval, output limits, the journal. A
call's result keeps what is not text (images, resource links, structured content, annotations:
see :mod:`fsm_agent.tools.mcp.content`), and the server's progress notifications during a call
are ``tool_progress`` events of a streamed run.

What can go wrong with a server becomes an error result the model reads, never a hang or a
crash: a result the server marks ``isError``, a JSON-RPC error, a server that is gone or dies
during the call (bounded by the tool's timeout in any case). A call is sent again only when the
server refused it without running it because it no longer knows the HTTP session: it says so
(the SDK's "session terminated", for a 404), or it refused the call's request with HTTP 400 or
404 and then refuses a listing of its tools on the same session too (what servers built with
the TypeScript SDK answer after a restart). Then the connection is opened afresh and the call
resent once. After a call that broke the connection, the next call reconnects first.

Needs the ``[mcp]`` extra (the official ``mcp`` SDK); importing this module without it raises
:class:`~fsm_agent.errors.MissingExtraError`.
"""

from __future__ import annotations

import importlib

try:
    import mcp as _sdk  # noqa: F401  (the SDK must be there before the modules that use it load)

    # The SDK imports jsonschema inside the first call whose result has structured content, to
    # validate it; that import blocks the event loop for tens of milliseconds (hundreds on a
    # busy machine), long enough for parallel calls to time out with their answers unread.
    # Imported here, it costs once, while nothing waits on the loop (the SDK depends on it).
    importlib.import_module("jsonschema")
except ImportError as exc:
    from ...errors import MissingExtraError

    raise MissingExtraError("fsm_agent.tools.mcp", extra="mcp", module="mcp") from exc

from .server import MCPServer, MCPServerHTTP, MCPServerStdio
from .tool import MCPTool

__all__ = ["MCPServer", "MCPServerHTTP", "MCPServerStdio", "MCPTool"]
