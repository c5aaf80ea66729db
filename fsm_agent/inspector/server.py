"""Serving the inspector: :func:`serve` (blocking) and :func:`serve_async` run it with uvicorn on
127.0.0.1 by default and print the address that carries the access token once the port listens.

The socket is bound here, not by uvicorn, so that an address that cannot be listened on (a port
in use, a host that is not this machine's) is an :class:`OSError` the caller can report in its
own words, and the address is announced only once connections to it are accepted."""

from __future__ import annotations

import secrets
import socket
import sys
from collections.abc import Callable
from typing import Any, TextIO

import uvicorn

from ..kernel.agent import Agent
from ..persistence import Checkpointer, open_checkpointer
from .app import Inspector

__all__ = ["build", "listen", "printer", "serve", "serve_async"]

DEFAULT_PORT = 8765
"""The port :func:`serve` listens on unless told otherwise."""


def build(
    store: Checkpointer | str | None = None,
    *,
    agent: Agent[Any, Any] | None = None,
    token: str | None = None,
    public_read: bool = False,
) -> Inspector:
    """An :class:`Inspector` over ``store`` (a checkpointer, a SQLite path, ``sqlite:///PATH`` or
    a ``postgresql://`` URL; by default the agent's checkpointer). With ``agent`` it answers
    suspended runs by ``agent.resume(run_id, decisions)``; an agent without a checkpointer gets
    one on the same store. ``token`` defaults to a fresh random one; with ``public_read``
    reading needs no token (answering still does)."""
    name = ""
    if store is None:
        if agent is None or agent.checkpointer is None:
            raise ValueError("the inspector needs a store, or an agent with a checkpointer")
        opened: Checkpointer = agent.checkpointer
        name = repr(opened)
    elif isinstance(store, str):
        name = store  # shown redacted: a password in the URL never reaches the page
        opened = open_checkpointer(store)
        if agent is not None and agent.checkpointer is None:
            agent.checkpointer = open_checkpointer(store)
    else:
        opened = store
        name = repr(store)
        if agent is not None and agent.checkpointer is None:
            agent.checkpointer = store
    return Inspector(
        opened,
        token=token or secrets.token_urlsafe(24),
        agent=agent,
        store_name=name,
        public_read=public_read,
    )


class _Server(uvicorn.Server):
    """uvicorn's server, announcing its address once it accepts connections."""

    def __init__(self, config: uvicorn.Config, announce: Callable[[], None]) -> None:
        super().__init__(config)
        self.announce = announce

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start serving, then announce."""
        await super().startup(sockets)
        if self.started:
            self.announce()


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (``port`` 0: a free one the system picks).
    Raises :class:`OSError` when it cannot (the port is in use, the host is not this
    machine's, the name does not resolve) and ``ValueError`` for a port outside 0–65535."""
    if not 0 <= port <= 65_535:
        raise ValueError(f"port must be between 0 and 65535, not {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


async def serve_async(
    store: Checkpointer | str | None = None,
    *,
    agent: Agent[Any, Any] | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    announce: Callable[[str], None] | None = None,
    public_read: bool = False,
) -> None:
    """Serve the inspector until cancelled (see :func:`build` for the arguments). ``announce``
    receives the address to open, token included, once it accepts connections (default:
    printed on stderr). Raises :class:`OSError` when it cannot listen (see :func:`listen`)."""
    inspector = build(store, agent=agent, token=token, public_read=public_read)
    try:
        sock = listen(host, port)
    except BaseException:
        inspector.close()
        raise
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/#token={inspector.token}"
    say = announce or printer(sys.stderr)
    config = uvicorn.Config(inspector.app, log_level="warning", lifespan="off")
    server = _Server(config, lambda: say(url))
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        inspector.close()


def printer(stream: TextIO) -> Callable[[str], None]:
    """The default announcement: one line on ``stream`` with the address to open."""

    def show(url: str) -> None:
        print(f"fsm_agent inspector: open {url}  (Ctrl-C stops it)", file=stream, flush=True)

    return show


def serve(
    store: Checkpointer | str | None = None,
    *,
    agent: Agent[Any, Any] | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    public_read: bool = False,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve the inspector until interrupted: :func:`serve_async` in a fresh event loop."""
    import asyncio

    asyncio.run(
        serve_async(
            store,
            agent=agent,
            host=host,
            port=port,
            token=token,
            announce=announce,
            public_read=public_read,
        )
    )
