"""The server side of the connection: what the two transports share, and each transport."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TextIO

import httpx2
import mcp_types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from ...errors import ConfigurationError, MCPServerError
from .. import Tool, ToolReturn
from .connection import Link, Refusal, bounded, note_refusal, session_lost, watched
from .content import tool_return
from .tool import MCPTool, Progress

__all__ = ["MCPServer", "MCPServerHTTP", "MCPServerStdio"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


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
        self._link: Link | None = None
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
            listed = await bounded(self._list(link.client), self)
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

    async def call(
        self, name: str, arguments: dict[str, Any], *, progress: Progress | None = None
    ) -> ToolReturn:
        """Call the server's tool ``name`` (its name on the server) and return its result (see
        :mod:`fsm_agent.tools.mcp.content`); raise :class:`~fsm_agent.errors.MCPServerError` when
        the server reports an error or fails. ``progress`` is called with each progress
        notification the server sends during the call (progress, total, message)."""
        notify = None if progress is None else _notifier(progress)
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
        refusal = Refusal()
        try:
            result = await watched(
                link.client.call_tool(name, arguments, progress_callback=notify), refusal
            )
        except MCPError as exc:
            if not await session_lost(link, exc, refusal):
                raise await self._failure(name, link, exc) from exc
            link = await self._reconnect(link)  # the server never ran it: send it again
            try:
                result = await link.client.call_tool(name, arguments, progress_callback=notify)
            except MCPError as again:
                raise await self._failure(name, link, again) from again
        answer = tool_return(result)
        if result.is_error:
            raise MCPServerError(
                f"tool {name!r} on MCP server {self.name!r} reported an error: {answer.text}",
                server=self.name,
                tool=name,
            )
        return answer

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

    async def _open(self) -> Link:
        link = Link(self._client())
        link.start()
        self._link = link
        try:
            await bounded(link.wait_ready(), self)
        except BaseException:
            await link.close()
            raise
        return link

    async def _live(self) -> Link:
        link = self._link
        if link is not None and link.alive:
            return link
        return await self._reconnect(link)

    async def _reconnect(self, broken: Link | None) -> Link:
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

    async def _failure(self, tool: str, link: Link, exc: MCPError) -> MCPServerError:
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
        hooks = {"response": [note_refusal]}
        async with (
            httpx2.AsyncClient(headers=self._headers, timeout=timeout, event_hooks=hooks) as http,
            streamable_http_client(self.url, http_client=http) as streams,
        ):
            yield streams


def _applies(setting: bool | Collection[str], name: str) -> bool:
    return setting if isinstance(setting, bool) else name in setting


def _notifier(progress: Progress) -> Any:
    """The SDK's progress callback (a coroutine function) that tells ``progress``."""

    async def notify(done: float, total: float | None, message: str | None) -> None:
        progress(done, total, message)

    return notify


def _without_secrets(url: str) -> str:
    """``url`` without what may carry a credential: user info, query and fragment."""
    url = re.split(r"[?#]", url, maxsplit=1)[0]
    return re.sub(r"//[^/@]*@", "//", url, count=1)
