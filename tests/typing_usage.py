"""Type-checked only (mypy runs on it in CI, pytest never imports it): proves the public types
read the way the docs say (STYLE 12)."""

from __future__ import annotations

from typing import assert_type

from fsm_agent import (
    Agent,
    FinishReason,
    Message,
    Move,
    Policy,
    RunResult,
    State,
    StopReason,
    ToolContext,
    Usage,
    Verdict,
    decide,
    tool,
)
from fsm_agent.events import Event
from fsm_agent.table import Counters, Limits, Outcome
from fsm_agent.testing import ScriptedModel, text, tool_call


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def whoami(ctx: ToolContext[str]) -> str:
    """Who am I."""
    return ctx.deps


def verifier(*, output: str, run_state: object) -> Verdict:
    return Verdict.accept() if output else Verdict.reject("say something")


async def usage() -> None:
    agent: Agent[str] = Agent(
        ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")]),
        tools=[add, whoami],
        policy=Policy(max_steps=10),
        verifier=verifier,
        deps="alice",
    )
    result = await agent.run("What is 1 + 2?")
    assert_type(result, RunResult)
    assert_type(result.output, str | None)
    assert_type(result.stop_reason, StopReason)
    assert_type(result.state, State)
    assert_type(result.usage, Usage)
    assert_type(result.messages, tuple[Message, ...])
    assert_type(result.trace, tuple[Move, ...])
    async for event in agent.run_stream("again"):
        assert_type(event, Event)
    move = decide(State.CALLING, Outcome.STOP, Counters(), Limits())
    assert_type(move.dest, State)
    assert_type(move.stop, StopReason | None)
    assert_type(FinishReason("stop"), FinishReason)
    assert_type(agent.run_sync("sync"), RunResult)
