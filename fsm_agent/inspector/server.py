"""Serving the inspector: :func:`serve` (blocking) and :func:`serve_async` run it with uvicorn on
127.0.0.1 by default and print the address that carries the access token."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable
from typing import Any, TextIO

import uvicorn

from ..kernel.agent import Agent
from ..persistence import Checkpointer, open_checkpointer
from .app import Inspector

__all__ = ["build", "serve", "serve_async"]

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
    receives the address to open, token included (default: printed on stderr)."""
    inspector = build(store, agent=agent, token=token, public_read=public_read)
    config = uvicorn.Config(
        inspector.app, host=host, port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/#token={inspector.token}"
    say = announce or _printer(sys.stderr)
    say(url)
    try:
        await server.serve()
    finally:
        inspector.close()


def _printer(stream: TextIO) -> Callable[[str], None]:
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
) -> None:
    """Serve the inspector until interrupted: :func:`serve_async` in a fresh event loop."""
    import asyncio

    asyncio.run(
        serve_async(store, agent=agent, host=host, port=port, token=token, public_read=public_read)
    )
