"""Scripted runs in a checkpoint store, for the inspector's tests and its screenshots' script:
one finished run whose tool returned hostile markup, one run suspended on an approval, and a
dozen more of every ending, with different tasks and models."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

from fsm_agent import Agent, AuthenticationError, tool
from fsm_agent.persistence import Checkpointer
from fsm_agent.testing import ScriptedModel, Turn, fail, text, tool_call

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


@tool
def search_tickets(query: str) -> str:
    """Search the support tickets (scripted)."""
    return f"3 tickets match {query!r}: #481 login loop, #484 export times out, #490 typo"


@tool
def check_service(name: str) -> str:
    """Check a service's health (scripted)."""
    return f"{name}: healthy, p95 212 ms"


@tool(needs_approval=True)
def refund(order: str, amount_eur: float) -> str:
    """Refund an order (a human approves it first)."""
    return f"refunded {amount_eur} EUR on {order}"


_MANY: list[tuple[str, str, list[Turn]]] = [
    (
        "Summarise this week's open support tickets.\nGroup them by product area.",
        "model-large",
        [
            tool_call("search_tickets", {"query": "status:open week:current"}),
            text("Three open tickets: a login loop (#481), a slow export (#484), a typo (#490)."),
        ],
    ),
    (
        "Is the billing service healthy?",
        "model-small",
        [
            tool_call("check_service", {"name": "billing"}),
            text("Yes: billing is healthy (p95 212 ms)."),
        ],
    ),
    (
        "Draft a polite reply to a customer asking when the export bug is fixed.",
        "model-large",
        [text("Dear customer, thank you for your patience: the fix ships on Monday.")],
    ),
    (
        "Translate the release notes into German.",
        "model-small",
        [fail(AuthenticationError("the provider refused the API key (401)"))],
    ),
    (
        "Check the search and the checkout services.",
        "model-small",
        [
            tool_call("check_service", {"name": "search"}),
            tool_call("check_service", {"name": "checkout"}),
            text("Both are healthy."),
        ],
    ),
    (
        "Refund order B-204: the parcel never arrived.",
        "model-large",
        [
            tool_call(
                "refund",
                {"order": "B-204", "amount_eur": 59.9},
                text="The tracking shows the parcel lost in transit, so a full refund of "
                "59.90 EUR is due. I am asking for approval before refunding.",
            ),
            text("Refunded 59.90 EUR on B-204."),
        ],
    ),
    (
        "Write a haiku about state machines.",
        "model-small",
        [
            text(
                "Rows tried in order /\nthe first guard that holds decides /\n"
                "the loop comes to rest"
            )
        ],
    ),
    (
        "Find tickets that mention the export timeout.",
        "model-large",
        [
            tool_call("search_tickets", {"query": "export timeout"}),
            text("Ticket #484 reports the export timing out after 30 s."),
        ],
    ),
    (
        "Which tickets are about logging in?",
        "model-small",
        [
            tool_call("search_tickets", {"query": "login"}),
            text("Ticket #481: a login loop after the password reset."),
        ],
    ),
]


async def fill_many(store: Checkpointer) -> list[str]:
    """Nine more runs on ``store``, each with its own task and model: finished ones, one that
    ended with the model's error, one waiting for approval of a refund. Returns their ids in
    the order they ran."""
    ids = []
    for task, model, turns in _MANY:
        agent = Agent(
            ScriptedModel(turns, name=model),
            tools=[search_tickets, check_service, refund],
            checkpointer=store,
        )
        result = await agent.run(task)
        ids.append(result.run_id)
    return ids


def task_line(index: int) -> str:
    """The task the list shows for the ``index``-th run of :func:`fill_many`."""
    return _MANY[index][0].split("\n")[0]


def model_of(index: int) -> str:
    """The model's name of the ``index``-th run of :func:`fill_many`."""
    return _MANY[index][1]


class Gate:
    """A switch a tool waits on, opened from another thread."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._reached = threading.Event()

    def open(self) -> None:
        """Let the waiting tool finish."""
        self._open.set()

    async def wait(self) -> None:
        """Wait until opened (polling, so the run's cancellation is honoured)."""
        self._reached.set()
        while not self._open.is_set():  # noqa: ASYNC110 - opened from another thread
            await asyncio.sleep(0.02)

    async def reached(self) -> None:
        """Return once a tool waits at the gate (its run then rests in ``dispatching``)."""
        if not await asyncio.to_thread(self._reached.wait, 60):
            raise AssertionError("no tool reached the gate within a minute")


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
