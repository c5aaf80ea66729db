"""The live inspector: a local web page over a checkpoint store.

It lists the runs (task, state, stop reason, steps, model, start, duration, tokens, answer;
filter and search) and shows one run: its task and ending, the machine's overview with the
run's path and counts drawn on it (zoom, pan, fit; each state linked to its rows), the timed
timeline of moves, the messages and tool calls, usage, and the questions a suspended run waits
on beside the model's message that led to them. A run in flight is followed live (the page
polls; the current state lights up). Given an agent, the page answers a suspended run's
questions, which resumes it through ``agent.resume``; without one it is read-only. Reading can
be opened to anyone who reaches the address (``public_read``); answering always needs the
token.

Needs the ``[inspector]`` extra (Starlette and uvicorn) and, for the diagram, ``[diagrams]``::

    from fsm_agent.inspector import serve

    serve("runs.db", agent=agent)  # prints http://127.0.0.1:8765/#token=…

or ``fsm-agent inspect runs.db``. ``docs/inspector.md`` shows the pages.
"""

from __future__ import annotations

from ..errors import MissingExtraError

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:
    raise MissingExtraError(
        "fsm_agent.inspector", extra="inspector", module="starlette and uvicorn"
    ) from exc

from ..redaction import REDACTED, redact
from .app import Inspector
from .server import DEFAULT_PORT, build, serve, serve_async

__all__ = ["DEFAULT_PORT", "REDACTED", "Inspector", "build", "redact", "serve", "serve_async"]
