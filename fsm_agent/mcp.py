"""Tools from Model Context Protocol servers, as ordinary fsm_agent tools.

:class:`MCPServerStdio` starts a server as a subprocess and talks to it over its stdin and
stdout; :class:`MCPServerHTTP` talks to one over streamable HTTP. Either is an async context
manager: entering it connects and lists the server's tools, leaving it closes the connection
(and ends the subprocess). Inside, ``server.tools`` are :class:`~fsm_agent.Tool` objects built
from the server's listing, so everything the kernel does with a tool applies to them: the
schema and description the model sees, the timeout, approval, output limits, the journal.

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

import asyncio
import contextlib
import contextvars
import importlib
import json
import re
import sys
from collections.abc import AsyncIterator, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TextIO, TypeVar

from pydantic import ValidationError

from .errors import ConfigurationError, MCPServerError, MissingExtraError
from .messages import ToolDefinition
from .tools import Tool

try:
    import httpx2
    import mcp_types
    from mcp import Client, MCPError, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    # The SDK imports jsonschema inside the first call whose result has structured content, to
    # validate it; that import blocks the event loop for tens of milliseconds (hundreds on a
    # busy machine), long enough for parallel calls to time out with their answers unread.
    # Imported here, it costs once, while nothing waits on the loop.
    importlib.import_module("jsonschema")
except ImportError as exc:
    raise MissingExtraError("fsm_agent.mcp", extra="mcp", module="mcp") from exc

__all__ = ["MCPServer", "MCPServerHTTP", "MCPServerStdio"]

_T = TypeVar("_T")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_SESSION_HEADER = "mcp-session-id"
_CLOSE_TIMEOUT_S = 5.0
_PING_TIMEOUT_S = 3.0


class MCPServer:
    """What the two transports share: the connection, the tools, and how a call is made.

    ``name`` labels the server in error messages (it defaults to the command or the URL).
    ``prefix`` is put before every tool name (``prefix_toolname``), to keep the tools of two
    servers apart; characters a tool name may not hold become ``_``. ``include`` keeps only the
    tools named (by their name on the server). ``timeout_s`` is each tool's timeout (the
    policy's ``tool_timeout_s`` when ``None``). ``needs_approval`` and ``idempotent`` are
    ``True``/``False`` for all tools or the collection of server tool names they apply to: the
    server's own hints are not trusted for either. ``connect_timeout_s`` bounds connecting and
    listing the tools.
    """

    def __init__(
        self,
        *,
        name: str,
        prefix: str | None = None,
        include: Collection[str] | None = None,
        timeout_s: float | None = None,
        needs_approval: bool | Collection[str] = False,
        idempotent: bool | Collection[str] = False,
        connect_timeout_s: float = 30.0,
    ) -> None:
        if timeout_s is not None and not timeout_s > 0:
            raise ConfigurationError(f"MCP server {name!r}: timeout_s must be > 0")
        if not connect_timeout_s > 0:
            raise ConfigurationError(f"MCP server {name!r}: connect_timeout_s must be > 0")
        self.name = name
        self.prefix = prefix
        self.include = None if include is None else frozenset(include)
        self.timeout_s = timeout_s
        self.needs_approval = needs_approval
        self.idempotent = idempotent
        self.connect_timeout_s = connect_timeout_s
        self._link: _Link | None = None
        self._lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tools: tuple[Tool, ...] | None = None
        self.reconnects = 0
        """How many times a connection was opened again after the first (for monitoring)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The server's tools as fsm_agent tools (listed when the server was entered)."""
        if self._tools is None:
            raise MCPServerError(
                f"MCP server {self.name!r} is not connected: use its tools inside "
                "'async with server:'",
                server=self.name,
            )
        return self._tools

    async def __aenter__(self) -> Self:
        if self._loop is not None:
            raise MCPServerError(
                f"MCP server {self.name!r} is already entered; enter it once", server=self.name
            )
        self._loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()
        try:
            link = await self._open()
            listed = await _bounded(self._list(link.client), self)
            self._check_names({t.name for t in listed})
            self._tools = tuple(self._tool(t) for t in listed if self._included(t.name))
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call the server's tool ``name`` (its name on the server) and return its text; raise
        :class:`~fsm_agent.errors.MCPServerError` when the server reports an error or fails."""
        if self._loop is None:
            raise MCPServerError(
                f"MCP server {self.name!r} is not connected: run the agent inside "
                "'async with server:'",
                server=self.name,
                tool=name,
            )
        if asyncio.get_running_loop() is not self._loop:
            raise MCPServerError(
                f"MCP server {self.name!r} was entered on another event loop: run the agent "
                "with 'await agent.run(...)' inside 'async with server:', not run_sync",
                server=self.name,
                tool=name,
            )
        link = await self._live()
        refusal = _Refusal()
        try:
            result = await _watched(link.client.call_tool(name, arguments), refusal)
        except MCPError as exc:
            if not await _session_lost(link, exc, refusal):
                raise await self._failure(name, link, exc) from exc
            link = await self._reconnect(link)  # the server never ran it: send it again
            try:
                result = await link.client.call_tool(name, arguments)
            except MCPError as again:
                raise await self._failure(name, link, again) from again
        text = _text(result)
        if result.is_error:
            raise MCPServerError(
                f"tool {name!r} on MCP server {self.name!r} reported an error: {text}",
                server=self.name,
                tool=name,
            )
        return text

    def _client(self) -> Client:
        """A new, unentered SDK client for one connection."""
        raise NotImplementedError

    def _redact(self, text: str) -> str:
        """``text`` without what this server's address may hold of a credential."""
        return text

    def _check_names(self, listed: set[str]) -> None:
        """Refuse a tool name in ``include``, ``needs_approval`` or ``idempotent`` that the
        server does not list: a misspelt name would otherwise leave a tool unguarded."""
        for option, names in (
            ("include", self.include),
            ("needs_approval", self.needs_approval),
            ("idempotent", self.idempotent),
        ):
            if names is None or isinstance(names, bool):
                continue
            unknown = sorted(set(names) - listed)
            if unknown:
                raise MCPServerError(
                    f"MCP server {self.name!r} has no tool named {', '.join(map(repr, unknown))} "
                    f"(given in {option}); it lists {', '.join(map(repr, sorted(listed)))}",
                    server=self.name,
                )

    def _included(self, name: str) -> bool:
        return self.include is None or name in self.include

    def _tool(self, listed: mcp_types.Tool) -> Tool:
        local = _UNSAFE.sub("_", listed.name)
        if self.prefix:
            local = f"{self.prefix}_{local}"
        return MCPTool(
            self,
            listed,
            name=local,
            timeout_s=self.timeout_s,
            needs_approval=_applies(self.needs_approval, listed.name),
            idempotent=_applies(self.idempotent, listed.name),
        )

    async def _list(self, client: Client) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools

    async def _open(self) -> _Link:
        link = _Link(self._client())
        link.start()
        self._link = link
        try:
            await _bounded(link.wait_ready(), self)
        except BaseException:
            await link.close()
            raise
        return link

    async def _live(self) -> _Link:
        link = self._link
        if link is not None and link.alive:
            return link
        return await self._reconnect(link)

    async def _reconnect(self, broken: _Link | None) -> _Link:
        async with self._lock:
            current = self._link
            if current is not None and current is not broken and current.alive:
                return current  # another call reconnected meanwhile
            if current is not None:
                await current.close()
            self.reconnects += 1
            return await self._open()

    async def _close(self) -> None:
        link, self._link = self._link, None
        self._tools = None
        self._loop = None
        if link is not None:
            await link.close()

    async def _failure(self, tool: str, link: _Link, exc: MCPError) -> MCPServerError:
        # The SDK reports a lost connection with the code servers also use for their own
        # errors (-32000), so a request to the server tells the two apart.
        if exc.code == mcp_types.CONNECTION_CLOSED and not await link.answers():
            link.broken = True
            return MCPServerError(
                f"MCP server {self.name!r} went away during the call to {tool!r} "
                f"({exc.message}); the call may or may not have taken effect",
                server=self.name,
                tool=tool,
            )
        return MCPServerError(
            f"MCP server {self.name!r} answered the call to {tool!r} with error "
            f"{exc.code}: {exc.message}",
            server=self.name,
            tool=tool,
        )


class MCPServerStdio(MCPServer):
    """An MCP server run as a subprocess (``command`` with ``args``), spoken to over stdio.

    ``env`` adds to the safe default environment the SDK gives the subprocess (it does not
    inherit the whole environment); ``cwd`` is its working directory; its stderr goes to
    ``errlog``. The other options are :class:`MCPServer`'s.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        errlog: TextIO | None = None,
        name: str | None = None,
        prefix: str | None = None,
        include: Collection[str] | None = None,
        timeout_s: float | None = None,
        needs_approval: bool | Collection[str] = False,
        idempotent: bool | Collection[str] = False,
        connect_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(
            name=name or Path(command).name,
            prefix=prefix,
            include=include,
            timeout_s=timeout_s,
            needs_approval=needs_approval,
            idempotent=idempotent,
            connect_timeout_s=connect_timeout_s,
        )
        self.parameters = StdioServerParameters(
            command=command, args=list(args), env=dict(env) if env else None, cwd=cwd
        )
        self.errlog = errlog

    def _client(self) -> Client:
        transport = stdio_client(self.parameters, errlog=self.errlog or sys.stderr)
        return Client(transport)


class MCPServerHTTP(MCPServer):
    """An MCP server at ``url``, spoken to over streamable HTTP.

    ``headers`` go with every request (an ``Authorization`` header, say; they are never logged
    or recorded). ``mode`` is the SDK's protocol negotiation: ``"auto"`` (the default) uses the
    newest protocol the server speaks, ``"legacy"`` the session-based handshake that servers
    from before 2026 expect. The other options are :class:`MCPServer`'s.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        mode: Literal["auto", "legacy"] = "auto",
        name: str | None = None,
        prefix: str | None = None,
        include: Collection[str] | None = None,
        timeout_s: float | None = None,
        needs_approval: bool | Collection[str] = False,
        idempotent: bool | Collection[str] = False,
        connect_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(
            name=name or _without_secrets(url),
            prefix=prefix,
            include=include,
            timeout_s=timeout_s,
            needs_approval=needs_approval,
            idempotent=idempotent,
            connect_timeout_s=connect_timeout_s,
        )
        self.url = url
        self.mode = mode
        self._headers = dict(headers or {})

    def __repr__(self) -> str:
        return f"MCPServerHTTP({self.name!r})"  # not the URL: it may carry credentials

    def _redact(self, text: str) -> str:
        return text.replace(self.url, _without_secrets(self.url))

    def _client(self) -> Client:
        return Client(self._transport(), mode=self.mode)

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        """The SDK's transport over an HTTP client of this connection's own, closed with it
        (the SDK's default timeouts: a response stream may stay open for minutes)."""
        timeout = httpx2.Timeout(30.0, read=300.0)
        hooks = {"response": [_note_refusal]}
        async with (
            httpx2.AsyncClient(headers=self._headers, timeout=timeout, event_hooks=hooks) as http,
            streamable_http_client(self.url, http_client=http) as streams,
        ):
            yield streams


class MCPTool(Tool):
    """A tool of an MCP server: its schema and description are the server's, and a call goes
    to the server through ``server`` (see :meth:`MCPServer.call`)."""

    def __init__(
        self,
        server: MCPServer,
        listed: mcp_types.Tool,
        *,
        name: str,
        timeout_s: float | None,
        needs_approval: bool,
        idempotent: bool,
    ) -> None:
        remote = listed.name

        async def call(arguments: str) -> str:
            return await server.call(remote, _arguments(remote, arguments))

        super().__init__(
            call,
            name=name,
            description=listed.description or listed.title or "",
            timeout_s=timeout_s,
            raw_arguments=True,
            needs_approval=needs_approval,
            idempotent=idempotent,
        )
        self.server = server
        self.remote_name = remote
        schema = {k: v for k, v in listed.input_schema.items() if k != "title"}
        try:
            self.definition = ToolDefinition(
                name=name, description=self.description, parameters=schema
            )
        except ValidationError as exc:
            raise MCPServerError(
                f"MCP server {server.name!r} lists tool {remote!r} with an input schema that is "
                f"not JSON: {exc}",
                server=server.name,
                tool=remote,
            ) from exc

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r} on {self.server.name!r})"


class _Link:
    """One connection: an entered SDK client, held open by a task of its own.

    The SDK's client must be entered and left in the same task; a tool call runs in whichever
    task the kernel gives it, and a reconnect happens in the middle of one. So a task of its
    own enters the client, waits until it is told to close, and leaves it. When the transport
    fails the task ends early and the link is no longer ``alive``."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.broken = False
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        """Connected, and no call has seen the connection break."""
        return (
            not self.broken
            and self._task is not None
            and not self._task.done()
            and self._ready.done()
            and not self._ready.cancelled()
            and self._ready.exception() is None
        )

    def start(self) -> None:
        self._task = asyncio.create_task(self._hold(), name="fsm_agent mcp connection")

    async def answers(self) -> bool:
        """Whether the server still answers a request, within a few seconds (a listing of its
        tools: the protocol's ping is gone from its newer versions)."""
        if not self.alive:
            return False
        try:
            async with asyncio.timeout(_PING_TIMEOUT_S):
                await self.client.list_tools(cache_mode="refresh")
        except Exception:  # any failure to answer means the connection is gone
            return False
        return True

    async def wait_ready(self) -> None:
        await asyncio.shield(self._ready)

    async def close(self) -> None:
        """Leave the client (bounded: a server that does not answer is abandoned)."""
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            if not self._ready.done():  # still connecting: nothing to leave in order
                task.cancel()
            # asyncio.wait raises neither the task's outcome nor its cancellation, only ours.
            done, _ = await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT_S)
            if not done:
                task.cancel()
                await asyncio.wait({task})
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # seen: a failed connection is reported where it is used

    async def _hold(self) -> None:
        try:
            async with self.client:
                self._ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:  # the transport failed: this connection is over
            if not self._ready.done():
                self._ready.set_exception(_unwrapped(exc))
            else:
                self.broken = True
        finally:
            if not self._ready.done():
                self._ready.set_exception(ConnectionError("the MCP connection closed"))


async def _bounded(awaitable: Any, server: MCPServer) -> Any:
    """Await ``awaitable`` within the server's connect timeout; a failure to connect is an
    MCPServerError (whose text may reach the model, so the URL's secrets are left out)."""
    name = server.name
    try:
        async with asyncio.timeout(server.connect_timeout_s):
            return await awaitable
    except TimeoutError as exc:
        raise MCPServerError(
            f"MCP server {name!r} did not connect and list its tools within "
            f"{server.connect_timeout_s:g} s",
            server=name,
        ) from exc
    except MCPServerError:
        raise
    except Exception as exc:
        why = server._redact(f"{type(exc).__name__}: {exc}")
        raise MCPServerError(f"cannot connect to MCP server {name!r}: {why}", server=name) from exc


def _unwrapped(exc: Exception) -> Exception:
    """The first leaf of an exception group (the SDK's task groups wrap transport errors)."""
    while isinstance(exc, ExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _session_dropped(exc: MCPError) -> bool:
    """The HTTP server no longer knows the session (it restarted, or expired it): it refused
    the request without running it."""
    return exc.code == mcp_types.INVALID_REQUEST and "session" in exc.message.lower()


@dataclass(slots=True)
class _Refusal:
    """Whether the HTTP server refused a request of one call that carried a session id, with
    status 400 or 404: a client error, answered before anything ran."""

    seen: bool = False


# The SDK sends each request from a task started in the caller's context, so the HTTP client's
# response hook finds here the record of the call that sent it.
_REFUSAL: contextvars.ContextVar[_Refusal | None] = contextvars.ContextVar(
    "fsm_agent_mcp_refusal", default=None
)


async def _watched(call: Coroutine[Any, Any, _T], refusal: _Refusal) -> _T:
    """Await ``call`` with ``refusal`` as the record of its requests' refusals (only there: a
    connection opened afterwards must not start its tasks in a context that holds it)."""
    token = _REFUSAL.set(refusal)
    try:
        return await call
    finally:
        _REFUSAL.reset(token)


async def _note_refusal(response: httpx2.Response) -> None:
    """The HTTP client's response hook: record a 400 or 404 to a request within a session."""
    refusal, request = _REFUSAL.get(), response.request
    if (
        refusal is not None
        and response.status_code in (400, 404)
        and request.method == "POST"
        and _SESSION_HEADER in request.headers
    ):
        refusal.seen = True


async def _session_lost(link: _Link, exc: MCPError, refusal: _Refusal) -> bool:
    """Whether the server refused the call without running it because it no longer knows the
    session: it says so, or it refused the call's request with 400 or 404 and refuses a listing
    on the session too (the SDK reports a 400 without a JSON body as -32603, and a server's own
    JSON-RPC error as it came, so the status tells a refusal from a failure)."""
    if _session_dropped(exc):
        return True
    return refusal.seen and not await link.answers()


def _arguments(tool: str, raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError) as exc:
        raise ValueError(
            f"the arguments for tool {tool!r} are not valid JSON ({exc}); send a JSON object"
        ) from exc
    if not isinstance(value, dict):
        raise ValueError(
            f"the arguments for tool {tool!r} must be a JSON object, not {type(value).__name__}"
        )
    return value


def _text(result: mcp_types.CallToolResult) -> str:
    """A call's result as the text the model reads: the text blocks in order, other blocks
    described in a line each; structured content alone is shown as JSON."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}, {len(block.data)} base64 characters]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            inner = block.resource
            if isinstance(inner, mcp_types.TextResourceContents):
                parts.append(inner.text)
            else:
                parts.append(f"[resource: {inner.uri}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)


def _applies(setting: bool | Collection[str], name: str) -> bool:
    return setting if isinstance(setting, bool) else name in setting


def _without_secrets(url: str) -> str:
    """``url`` without what may carry a credential: user info, query and fragment."""
    url = re.split(r"[?#]", url, maxsplit=1)[0]
    return re.sub(r"//[^/@]*@", "//", url, count=1)
