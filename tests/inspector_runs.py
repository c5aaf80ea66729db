"""Scripted runs in a checkpoint store, for the inspector's tests and its screenshots' script:
one finished run whose tool returned hostile markup, one run suspended on an approval."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

from fsm_agent import Agent, tool
from fsm_agent.persistence import Checkpointer
from fsm_agent.testing import ScriptedModel, text, tool_call

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="alert(1)">'
"""What the scripted web page holds: markup that must be shown as text, never run."""


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page (scripted: it returns hostile markup)."""
    return f"page {url}: {HOSTILE}"


@tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (a human approves it first)."""
    return f"deleted {path}"


@dataclass(frozen=True, slots=True)
class FilledStore:
    """The runs :func:`fill` stored, and the agent that resumes the suspended one."""

    finished: str  # run id: fetch_page, then an answer
    suspended: str  # run id: waits for approval of delete_file
    approver: Agent[Any, Any]  # its model's script continues the suspended run


async def fill(store: Checkpointer) -> FilledStore:
    """Run the scripted agents on ``store``."""
    reader = Agent(
        ScriptedModel(
            [tool_call("fetch_page", {"url": "https://example.test"}), text("The page is hostile.")]
        ),
        tools=[fetch_page],
        checkpointer=store,
    )
    finished = await reader.run("Read the page.")
    approver = Agent(
        ScriptedModel(
            [tool_call("delete_file", {"path": "build/old.log"}), text("Deleted the old log.")]
        ),
        tools=[delete_file],
        checkpointer=store,
    )
    suspended = await approver.run("Clean up the build directory.")
    return FilledStore(finished.run_id, suspended.run_id, approver)


class Gate:
    """A switch a tool waits on, opened from another thread."""

    def __init__(self) -> None:
        self._open = threading.Event()

    def open(self) -> None:
        """Let the waiting tool finish."""
        self._open.set()

    async def wait(self) -> None:
        """Wait until opened (polling, so the run's cancellation is honoured)."""
        while not self._open.is_set():  # noqa: ASYNC110 - opened from another thread
            await asyncio.sleep(0.02)


def gated_agent(store: Checkpointer, gate: Gate) -> Agent[Any, Any]:
    """An agent whose one tool call waits for ``gate``: its run rests in ``dispatching`` until
    the gate opens, then finishes."""

    @tool
    async def slow_build(target: str) -> str:
        """Build a target (waits for the gate)."""
        await gate.wait()
        return f"built {target}"

    return Agent(
        ScriptedModel([tool_call("slow_build", {"target": "all"}), text("Built.")]),
        tools=[slow_build],
        checkpointer=store,
    )


def gated_approver(store: Checkpointer, gate: Gate) -> Agent[Any, Any]:
    """An agent whose one call needs approval and, once approved, waits for ``gate``."""

    @tool(needs_approval=True)
    async def deploy(target: str) -> str:
        """Deploy a target (a human approves it first; then it waits for the gate)."""
        await gate.wait()
        return f"deployed {target}"

    return Agent(
        ScriptedModel([tool_call("deploy", {"target": "prod"}), text("Deployed.")]),
        tools=[deploy],
        checkpointer=store,
    )
