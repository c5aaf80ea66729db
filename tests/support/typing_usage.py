"""Type-checked only (mypy runs on it in CI, and tests/package/test_user_typing.py checks it as
user code with and without the pydantic plugin; pytest never imports it): proves the public types
read the way the docs say (STYLE 12)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_type

from pydantic import BaseModel, JsonValue
from typing_extensions import TypedDict

from fsm_agent import (
    Agent,
    CompactionSettings,
    FallbackModel,
    FinishReason,
    Handoff,
    Message,
    Model,
    ModelChain,
    ModelError,
    ModelRequest,
    ModelSettings,
    ModelTimeoutError,
    Move,
    Policy,
    ProviderServerError,
    RateLimitError,
    RetryPolicy,
    RunResult,
    State,
    StopReason,
    ToolContext,
    ToolOutputSettings,
    Usage,
    UsageLimits,
    Verdict,
    decide,
    tool,
)
from fsm_agent.machine.table import Counters, Limits, Outcome
from fsm_agent.phases import MovePhase, Phase, PhaseChange, Phases, PhaseView, Transition
from fsm_agent.run.events import Event, ModelSwitchedEvent, PartialOutputEvent
from fsm_agent.testing import ScriptedModel, answer, text, tool_call, tool_calls


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


def defaults() -> None:
    # Every field has a default, so each settings model builds from keywords alone, and an
    # agent built without deps is an Agent[None].
    policy = Policy(
        max_steps=5,
        retry=RetryPolicy(max_retries=2),
        compaction=CompactionSettings(threshold=0.9),
        tool_output=ToolOutputSettings(max_chars=2_000),
        usage_limits=UsageLimits(max_requests=10),
    )
    agent = Agent(ScriptedModel([text("hi")]), policy=policy)
    assert_type(agent, Agent[None])
    assert_type(Agent(ScriptedModel([text("hi")]), deps=3), Agent[int])
    # A script's arguments may be any JSON mapping, not only a dict[str, JsonValue].
    ScriptedModel([tool_calls(("echo", {"text": "hi"})), tool_call("echo", {"n": "1"})])


def model_settings() -> None:
    # Settings on the agent and on a run; a hook's apply gives back a request.
    settings = ModelSettings(max_tokens=100, stop_sequences=["END"], tool_choice="lookup")
    agent = Agent(ScriptedModel([text("hi")]), model_settings=settings)
    assert_type(agent.run_sync("hi", model_settings=ModelSettings(seed=1)), RunResult)
    request = ModelSettings(temperature=0.0).apply(ModelRequest(messages=()))
    assert_type(request, ModelRequest)
    assert_type(ModelSettings.of(request).merged(settings), ModelSettings)


def fallback_chain() -> None:
    # A chain of any models is a Model for Agent, typed as the chain; on= takes ModelError types.
    chain = FallbackModel(
        ScriptedModel([text("primary")]),
        ScriptedModel([text("backup")]),
        on=(RateLimitError, ProviderServerError, ModelTimeoutError),
    )
    assert_type(chain.models, tuple[Model, ...])
    assert_type(chain.on, tuple[type[ModelError], ...])
    assert_type(chain.falls_back_on(RateLimitError("429")), bool)
    assert_type(Agent(chain), Agent[None])
    assert_type(Agent(chain, deps="x").run_sync("hi"), RunResult)
    checked: ModelChain = chain
    assert_type(checked.models, tuple[Model, ...])
    event: Event = ModelSwitchedEvent(
        run_id="r", from_model="a", to_model="b", switches=1, error="429"
    )
    if isinstance(event, ModelSwitchedEvent):
        assert_type(event.to_model, str)


class Plan(BaseModel):
    steps: list[str]


@dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


async def typed_output() -> None:
    # output_type sets the second type parameter; result.output is that type (or None).
    agent = Agent(ScriptedModel([answer(Plan(steps=["a"]))]), output_type=Plan)
    assert_type(agent, Agent[None, Plan])
    result = await agent.run("plan it")
    assert_type(result, RunResult[Plan])
    assert_type(result.output, Plan | None)
    assert_type(result.output_text, str | None)
    assert_type(agent.run_sync("again").output, Plan | None)
    assert_type(Agent(ScriptedModel([]), output_type=Point).run_sync("p").output, Point | None)
    assert_type(Agent(ScriptedModel([]), output_type=int, deps="x"), Agent[str, int])
    movie = Agent(ScriptedModel([]), output_type=Movie).run_sync("m").output
    assert_type(movie, Movie | None)
    async for event in agent.run_stream("stream it"):
        if isinstance(event, PartialOutputEvent):
            assert_type(event.partial, JsonValue)
    # An agent without output_type is a text agent, spelled as before.
    text_agent: Agent[None] = Agent(ScriptedModel([text("hi")]))
    assert_type(text_agent, Agent[None, str])


def phases() -> None:
    # A phase table takes Phase values and (source, dest) pairs or Transitions with guards over
    # a PhaseView; a run state's phase is a str or None; a tool may return MovePhase.
    def planned(view: PhaseView) -> bool:
        return view.phase_steps >= 1 and view.visited("plan") == 1

    table = Phases(
        [Phase("plan", (), "Plan."), Phase("act", max_steps=3, on_budget="plan")],
        [Transition("plan", "act", planned, "planned"), ("act", "plan")],
        goals=["act"],
    )
    assert_type(table.next_phases, dict[str, tuple[str, ...]])
    agent = Agent(ScriptedModel([text("hi")]), phases=table)
    run_state = agent.run_sync("hi").run_state
    if run_state is not None:
        assert_type(run_state.phase, str | None)
        assert_type(run_state.phase_trace, tuple[PhaseChange, ...])
    assert_type(MovePhase("act", "done planning").phase, str)


def composition() -> None:
    # A handoff's and an agent tool's agent is typed as the agent it was built with (the kernel
    # reads it through a protocol of its own).
    billing = Agent(ScriptedModel([]), output_type=int)
    assert_type(Handoff(billing, name="billing", description="Refunds.").agent, Agent[None, int])
    assert_type(billing.as_tool(name="billing", description="Bills.").agent, Agent[None, int])
