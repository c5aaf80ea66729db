"""One connection to a server, held open by a task of its own, and how a call tells a server
that lost the session (and never ran the call) from one that failed it."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx2
import mcp_types
from mcp import Client, MCPError

from ...errors import MCPServerError

__all__ = ["Link", "Refusal", "bounded", "note_refusal", "session_lost", "watched"]

_T = TypeVar("_T")
_SESSION_HEADER = "mcp-session-id"
_CLOSE_TIMEOUT_S = 5.0
_PING_TIMEOUT_S = 3.0


class Link:
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


class Connecting(Protocol):
    """What :func:`bounded` reads of the server it connects to (an ``MCPServer``)."""

    name: str
    connect_timeout_s: float

    def _redact(self, text: str) -> str: ...


async def bounded(awaitable: Any, server: Connecting) -> Any:
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
class Refusal:
    """Whether the HTTP server refused a request of one call that carried a session id, with
    status 400 or 404: a client error, answered before anything ran."""

    seen: bool = False


# The SDK sends each request from a task started in the caller's context, so the HTTP client's
# response hook finds here the record of the call that sent it.
_REFUSAL: contextvars.ContextVar[Refusal | None] = contextvars.ContextVar(
    "fsm_agent_mcp_refusal", default=None
)


async def watched(call: Coroutine[Any, Any, _T], refusal: Refusal) -> _T:
    """Await ``call`` with ``refusal`` as the record of its requests' refusals (only there: a
    connection opened afterwards must not start its tasks in a context that holds it)."""
    token = _REFUSAL.set(refusal)
    try:
        return await call
    finally:
        _REFUSAL.reset(token)


async def note_refusal(response: httpx2.Response) -> None:
    """The HTTP client's response hook: record a 400 or 404 to a request within a session."""
    refusal, request = _REFUSAL.get(), response.request
    if (
        refusal is not None
        and response.status_code in (400, 404)
        and request.method == "POST"
        and _SESSION_HEADER in request.headers
    ):
        refusal.seen = True


async def session_lost(link: Link, exc: MCPError, refusal: Refusal) -> bool:
    """Whether the server refused the call without running it because it no longer knows the
    session: it says so, or it refused the call's request with 400 or 404 and refuses a listing
    on the session too (the SDK reports a 400 without a JSON body as -32603, and a server's own
    JSON-RPC error as it came, so the status tells a refusal from a failure)."""
    if _session_dropped(exc):
        return True
    return refusal.seen and not await link.answers()
