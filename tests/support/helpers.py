"""The suite's shared doubles: the tools most tests call, an agent on a virtual clock, and event
collection. Model doubles are :mod:`fsm_agent.testing`'s ``ScriptedModel`` (and its builders)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from fsm_agent import Agent, Policy, RunHandle, RunResult, Runtime, tool
from fsm_agent.events import Event
from fsm_agent.messages import ModelRequest, ModelResponse, StreamDelta
from fsm_agent.testing import ScriptedModel, Turn, VirtualClock

__all__ = ["Held", "add", "boom", "look", "make_agent", "stream", "virtual_runtime"]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def boom(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


@tool
def look(topic: str = "x") -> str:
    """Look something up."""
    return f"found {topic}"


class Held(ScriptedModel):
    """A scripted model whose calls wait until ``release`` is set; ``entered`` is set as soon as
    a call arrives (to cancel or interrupt a run while its model call is in flight)."""

    def __init__(self, turns: Sequence[Turn] = (), *, context_window: int | None = None) -> None:
        super().__init__(turns, name="held", context_window=context_window)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Wait for ``release``, then play the next turn."""
        self.entered.set()
        await self.release.wait()
        return await super().complete(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Wait for ``release``, then stream the next turn."""
        self.entered.set()
        await self.release.wait()
        async for item in super().stream(request):
            yield item


def virtual_runtime(clock: VirtualClock | None = None) -> Runtime:
    """A runtime on ``clock`` (a fresh virtual clock by default): its sleeps take no real time."""
    clock = clock or VirtualClock()
    return Runtime(sleep=clock.sleep, clock=clock.now)


def make_agent(
    turns: Sequence[Turn],
    *,
    tools: Sequence[Any] = (),
    policy: Policy | None = None,
    clock: VirtualClock | None = None,
    **kwargs: Any,
) -> tuple[Agent[Any, Any], ScriptedModel, VirtualClock]:
    """An agent on a scripted model whose sleeps take no real time."""
    clock = clock or VirtualClock()
    model = ScriptedModel(turns)
    agent: Agent[Any, Any] = Agent(
        model,
        tools=tools,
        policy=policy,
        runtime=virtual_runtime(clock),
        **kwargs,
    )
    return agent, model, clock


def stream(
    agent: Agent[Any, Any],
    prompt: str = "Do the task.",
    *,
    on_event: Callable[[Event, RunHandle], None] | None = None,
    **kwargs: Any,
) -> tuple[list[Event], RunResult]:
    """Run with run_stream, collecting every event; ``on_event`` sees each as it comes."""
    handle = RunHandle()
    events: list[Event] = []

    async def main() -> None:
        async for event in agent.run_stream(prompt, handle=handle, **kwargs):
            events.append(event)
            if on_event is not None:
                on_event(event, handle)

    asyncio.run(main())
    assert handle.result is not None
    return events, handle.result
