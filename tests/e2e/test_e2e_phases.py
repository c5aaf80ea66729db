"""End-to-end: an agent under phases against a real OpenAI-compatible server (``pytest -m
e2e``; the server is the one of ``tests/e2e/test_e2e_openai_server.py``). The claims are about the
protocol and the phases, never about what the model says: the generated ``move_to_phase`` tool
and its enum of legal targets go over the wire in the shape a real server accepts, the model's
call moves the task, and the next request offers the next phase's tools."""

from __future__ import annotations

from typing import Any

import pytest
from test_e2e_openai_server import (  # the shared server fixture and its functions
    Target,
    connect,
    run,
    target,  # noqa: F401  (the fixture)
    text_turn,
    tool_turn,
)

from fsm_agent import Agent, Policy, RunHandle, tool
from fsm_agent.events import PhaseChangedEvent
from fsm_agent.messages import Message, ModelRequest, Role, ToolCall, ToolResult
from fsm_agent.phases import MOVE_TOOL, Phase, Phases
from fsm_agent.run_state import RunState

pytestmark = pytest.mark.e2e


@tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return "rainy"


PHASES = Phases(
    [Phase("plan", (), "Move to 'act' now."), Phase("act", ("get_weather",), "Answer briefly.")],
    [("plan", "act")],
    goals=["act"],
)


class MoveFirst:
    """A before_model_call hook: the turn after the user's must call a tool (in ``plan`` the
    only one is ``move_to_phase``, whose ``phase`` the server's grammar limits to its enum);
    every other turn is a short text answer."""

    def __init__(self, server: Target) -> None:
        self.target = server

    def before_model_call(
        self, *, request: ModelRequest, run_state: RunState, **_: Any
    ) -> ModelRequest:
        messages = list(request.messages)
        if request.tools and messages[-1].role is Role.USER:
            turn = tool_turn(self.target, messages)
            return turn.model_copy(update={"tools": request.tools})
        return text_turn(messages, request.tools)


def few_shot() -> list[Message]:
    """One earlier task, moved to its next phase through the move tool."""
    call = ToolCall.create("call_earlier", MOVE_TOOL, {"phase": "act"})
    return [
        Message.user("Start the task."),
        Message.assistant(tool_calls=[call]),
        Message.tool(ToolResult(call_id=call.id, name=call.name, content="Moved to phase 'act'.")),
        Message.assistant("Done."),
    ]


def test_a_real_model_moves_the_task_with_the_generated_tool(target: Target) -> None:  # noqa: F811
    """The first request offers only move_to_phase with the enum ["act"]; the model's call
    moves the run to act, whose tools the second request offers."""

    async def scenario() -> tuple[list[Any], RunHandle, Any]:
        async with connect(target) as (model, wire):
            agent: Agent[None] = Agent(
                model,
                tools=[get_weather],
                policy=Policy(max_steps=4, parallel_tool_calls=False),
                hooks=[MoveFirst(target)],
                phases=PHASES,
            )
            handle = RunHandle()
            events = [
                e
                async for e in agent.run_stream(
                    "What is the weather in Paris?", history=few_shot(), handle=handle
                )
            ]
            return events, handle, wire

    events, handle, wire = run(scenario())
    result = handle.result
    assert result is not None and result.run_state is not None
    first, second = wire.bodies[0], wire.bodies[1]
    (offered,) = first["tools"]
    assert offered["function"]["name"] == MOVE_TOOL
    assert offered["function"]["parameters"]["properties"]["phase"]["enum"] == ["act"]
    assert first["messages"][0]["content"].endswith("Move to 'act' now.")
    assert [e.dest for e in events if isinstance(e, PhaseChangedEvent)] == ["act"]
    assert result.run_state.phase == "act"
    assert [t["function"]["name"] for t in second["tools"]] == ["get_weather"]
    assert result.ok, f"the run ended {result.stop_reason}: {result.error}"
