"""The peer benchmark's workload, and the adapters that need nothing but fsm_agent.

One run of N steps: the model calls a trivial ``add`` tool N - 1 times, then answers ``done``.
Step k calls ``add(a=k, b=1)``; its result, k + 1, tells a stateless scripted model which step
comes next (see :func:`next_call`), so every system plays the same turns from its own history
without a per-run script. fsm_agent and the floor replay the same turns from a
:class:`~fsm_agent.testing.ScriptedModel` (:func:`script`) that keeps no record of the
requests (a test's record would dominate the memory measured).

An :class:`Adapter` makes one system run the workload. Everything a run needs (agents, models)
is built by :meth:`Adapter.prepare`, before the clock starts; the clock times only the runs.
Building the agent is measured on its own, as start-up (:meth:`Adapter.start`).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar

from fsm_agent import Agent, Message, ModelRequest, Policy, Role, Tool, ToolContext, tool
from fsm_agent.testing import ScriptedModel, Turn, text, tool_call

PROMPT = "count"
SYSTEM_PROMPT = "Be brief."
ANSWER = "done"

Run = Callable[[], Awaitable[str]]
"""One prepared run: awaiting it plays the whole run and returns the final answer."""


@dataclass(slots=True)
class _Counter:
    value: int = 0


add_calls = _Counter()
"""How many times :func:`add` ran (adapters are checked against it)."""


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    add_calls.value += 1
    return a + b


ADD_TOOL: Tool = tool(add)
POLICY = Policy(max_steps=10_000)


@dataclass(frozen=True, slots=True)
class Call:
    """The model's call ``add(a, 1)`` at step ``a`` (steps count from 0)."""

    a: int

    @property
    def id(self) -> str:
        """The call id, the same in every system."""
        return f"c{self.a}"

    @property
    def args(self) -> dict[str, int]:
        """The call's arguments."""
        return {"a": self.a, "b": 1}


def next_call(last_result: int | None, steps: int) -> Call | None:
    """The model's next turn in a run of ``steps`` steps, given the last ``add`` result
    (``None`` before the first call): the next call, or ``None`` for the final answer."""
    step = last_result or 0
    return Call(step) if step < steps - 1 else None


@functools.cache
def script(steps: int) -> tuple[Turn, ...]:
    """The run's turns for :class:`~fsm_agent.testing.ScriptedModel` (shared: turns are
    immutable)."""
    turns: list[Turn] = []
    result: int | None = None
    while (call := next_call(result, steps)) is not None:
        turns.append(tool_call("add", call.args, id=call.id))
        result = call.a + 1  # what add returns
    turns.append(text(ANSWER))
    return tuple(turns)


class Adapter(ABC):
    """One system running the workload."""

    name: ClassVar[str]
    """The system's name in the report."""
    distributions: ClassVar[tuple[str, ...]] = ()
    """The installed distributions whose versions the report names."""
    concurrent: ClassVar[bool] = True
    """Runs can share one event loop (false for a synchronous framework)."""

    @abstractmethod
    def start(self, steps: int) -> object:
        """Build what one run of ``steps`` steps starts from (the agent): the start-up cost."""

    @abstractmethod
    def prepare(self, steps: int) -> Run:
        """Build everything one run needs; awaiting the result plays the run."""


class FsmAgentAdapter(Adapter):
    """fsm_agent: an :class:`~fsm_agent.Agent` over a :class:`~fsm_agent.testing.ScriptedModel`
    (an agent per run: the scripted model keeps the run's position)."""

    name = "fsm_agent"
    distributions = ("fsm_agent", "pydantic", "transitions")

    def start(self, steps: int) -> Agent[None]:
        """An agent with the ``add`` tool, a system prompt and the run's script."""
        return Agent(
            ScriptedModel(script(steps), keep_requests=False),
            tools=[ADD_TOOL],
            system_prompt=SYSTEM_PROMPT,
            policy=POLICY,
        )

    def prepare(self, steps: int) -> Run:
        """A fresh agent's ``run``."""
        agent = self.start(steps)

        async def run() -> str:
            result = await agent.run(PROMPT)
            return result.output or ""

        return run


class FloorAdapter(Adapter):
    """The floor: a hand-written typed asyncio loop over fsm_agent's pydantic message types,
    the least a correct loop does with them (same model, same tool, same argument
    validation; no table, counters, trace, limits or interrupts)."""

    name = "floor"

    def start(self, steps: int) -> ScriptedModel:
        """The loop starts from its model alone."""
        return ScriptedModel(script(steps), keep_requests=False)

    def prepare(self, steps: int) -> Run:
        """The typed loop over a fresh scripted model."""
        return functools.partial(typed_loop, self.start(steps))


async def typed_loop(model: ScriptedModel) -> str:
    """Call the model, run its tool calls, repeat until it answers; return the answer."""
    tools = {ADD_TOOL.name: ADD_TOOL}
    definitions = (ADD_TOOL.definition,)
    messages = [Message.system(SYSTEM_PROMPT), Message.user(PROMPT)]
    step = 0
    while True:
        step += 1
        request = ModelRequest.model_construct(
            messages=tuple(messages), tools=definitions, tool_choice=None
        )
        response = await model.complete(request)
        messages.append(response.message)
        calls = response.message.tool_calls
        if not calls:
            return response.message.text
        for call in calls:
            context = ToolContext(run_id="run", call_id=call.id, step=step, deps=None)
            execution = await tools[call.name].execute(call, context)
            messages.append(Message.model_construct(role=Role.TOOL, parts=(execution.result,)))
