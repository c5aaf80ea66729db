"""Chat Completions request bodies against the official ``openai`` SDK's request types (the
Responses API's are checked in test_providers_responses.py): every kind of message, tools,
settings and typed output, built directly and sent by an agent run to the loopback server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from conftest_network import no_external_network  # noqa: F401
from fsm_agent import Agent, Policy, tool
from fsm_agent.messages import (
    ImagePart,
    Message,
    ModelRequest,
    OutputSchema,
    ReasoningPart,
    Role,
    TextPart,
    ToolCall,
    ToolDefinition,
    ToolResult,
)
from fsm_agent.providers import OpenAIChatModel
from provider_server import FAST, ProviderServer, Turn, json_reply, openai_json
from sdk_types import chat_faults

LOOKUP = ToolDefinition(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)
CITY = OutputSchema(
    name="City", json_schema={"type": "object", "properties": {"name": {"type": "string"}}}
)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("tools", [(), (LOOKUP,)], ids=["no-tools", "tools"])
def test_every_chat_request_shape_fits_the_sdks_request_types(
    stream: bool, tools: tuple[ToolDefinition, ...]
) -> None:
    """System, user text and images, an assistant's text, reasoning and calls, and tool results,
    with every setting and typed output (a response format without tools, the final answer tool
    with them), make a body the SDK's request types describe, message by message."""
    call = ToolCall.create("call_1", "lookup", {"q": "fsm"})
    thought = ReasoningPart(text="Look it up.", provider_data={"provider": "openai"})
    request = ModelRequest(
        messages=(
            Message.system("Be brief."),
            Message.user("What is this?", ImagePart(media_type="image/png", data="aGVsbG8=")),
            Message(role=Role.ASSISTANT, parts=(thought, TextPart(text="Let me look."), call)),
            Message.tool(ToolResult(call_id="call_1", name="lookup", content="a state machine")),
            Message.assistant("A state machine."),
            Message.user("And this?", ImagePart(url="https://example.org/a.png")),
        ),
        tools=tools,
        tool_choice="lookup" if tools else None,
        parallel_tool_calls=False if tools else None,
        output=CITY,
        max_tokens=64,
        temperature=0.2,
        top_p=0.9,
        seed=7,
        stop_sequences=("END",),
        reasoning_effort="low",
    )
    body = OpenAIChatModel("m", api_key="sk-x").build_body(request, stream=stream)
    assert chat_faults(body) == []


def test_the_bodies_of_an_agent_run_fit_the_sdks_request_types() -> None:
    """A run with a tool call and an answer sends requests the SDK's types describe."""

    @tool
    def lookup(q: str) -> str:
        """Look a word up."""
        return "a state machine"

    async def scenario() -> list[Any]:
        replies = [
            json_reply(openai_json(Turn(calls=[("call_1", "lookup", {"q": "fsm"})]))),
            json_reply(openai_json(Turn(text="A state machine."))),
        ]
        async with ProviderServer().script(*replies) as server:
            model = OpenAIChatModel("m", base_url=server.url, api_key="sk-x", timeouts=FAST)
            try:
                agent: Agent[None] = Agent(
                    model, tools=[lookup], system_prompt="Be brief.", policy=Policy(max_steps=4)
                )
                assert (await agent.run("What is fsm?")).ok
            finally:
                await model.aclose()
            return [r.json for r in server.requests]

    bodies = asyncio.run(scenario())
    assert len(bodies) == 2 and [chat_faults(b) for b in bodies] == [[], []]
