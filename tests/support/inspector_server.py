"""The inspector served by uvicorn on a free loopback port in a background thread, for the
browser tests and the screenshots' script."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import httpx
import uvicorn

from fsm_agent import Agent
from fsm_agent.inspector import build
from fsm_agent.persistence import Checkpointer

T = TypeVar("T")

CHROMIUM = "/usr/bin/chromium"
"""The distribution's Chromium, which the browser tests drive (never a downloaded one)."""

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""How the tests start Chromium: headless, and quiet on the network."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_in_thread(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``asyncio.run(work())`` in a thread of its own: Playwright's synchronous API keeps an
    event loop running in the test's thread."""
    results: list[T] = []
    thread = threading.Thread(target=lambda: results.append(asyncio.run(work())))
    thread.start()
    thread.join()
    if not results:
        raise RuntimeError("the coroutine failed in its thread (its error is printed above)")
    return results[0]


class LiveInspector:
    """An inspector over ``store`` (answering through ``agent`` when given; reading without the
    token with ``public_read``), serving until :meth:`stop`. ``url`` is the address to open,
    token included."""

    def __init__(
        self,
        store: Checkpointer,
        *,
        agent: Agent[Any, Any] | None = None,
        public_read: bool = False,
    ) -> None:
        self.inspector = build(store, agent=agent, public_read=public_read)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/#token={self.inspector.token}"
        config = uvicorn.Config(
            self.inspector.app, host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()))

    def page(self, path: str) -> str:
        """The address of ``path`` on this server, with the token."""
        return f"{self.base}{path}#token={self.inspector.token}"

    def __enter__(self) -> LiveInspector:
        self._thread.start()
        for _ in range(200):
            try:
                httpx.get(self.base + "/static/style.css", timeout=1)
                return self
            except httpx.TransportError:
                time.sleep(0.025)
        raise RuntimeError("the inspector did not start")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop serving and wait for the server's thread."""
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self.inspector.close()
