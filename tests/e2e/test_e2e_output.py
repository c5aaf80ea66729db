"""End-to-end: typed output against a real OpenAI-compatible server (``pytest -m e2e``; the
server is the one of ``tests/e2e/test_e2e_openai_server.py``). The claims are about the protocol,
never about what the model knows: without tools the output type's JSON schema goes over the wire
as a ``response_format`` a real server accepts, and the answer it sends back validates into the
type (the bundled llama.cpp server turns the schema into a grammar, so its answer has the
schema's shape whatever the model); with tools the schema is a ``final_answer`` tool, so the
server's grammar still lets the model call the other tools."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from test_e2e_openai_server import (  # the shared server fixture and its functions
    WEATHER,
    Target,
    Wire,
    assert_one_weather_call,
    connect,
    few_shot,
    run,
    target,  # noqa: F401  (the fixture)
)

from fsm_agent import Agent, Policy, RunResult
from fsm_agent.messages import Message, ModelRequest, ModelResponse
from fsm_agent.output import OutputSpec

pytestmark = pytest.mark.e2e


class City(BaseModel):
    name: str
    country: str


def test_a_real_server_answers_in_the_output_type(target: Target) -> None:  # noqa: F811
    """The request carries the json_schema response format, and the run ends with a City."""

    async def scenario() -> tuple[RunResult[City], Wire]:
        async with connect(target) as (model, wire):
            agent = Agent(model, output_type=City, policy=Policy(max_steps=3))
            result = await agent.run("Name one city in France, as JSON.")
            return result, wire

    result, wire = run(scenario())
    body = wire.bodies[0]
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["schema"]["required"] == ["name", "country"]
    assert result.ok, f"the run ended {result.stop_reason}: {result.error}"
    assert isinstance(result.output, City)


def test_with_tools_the_model_can_still_call_a_tool(target: Target) -> None:  # noqa: F811
    """With tools, the schema goes as the final_answer tool and no response_format, so the
    server's grammar allows a tool call: the model calls get_weather, as its history shows."""
    messages = (*few_shot(), Message.user("What is the weather in Paris?"))
    request = ModelRequest(
        messages=messages,
        tools=(WEATHER,),
        output=OutputSpec.of(City).schema,
        parallel_tool_calls=False,
        max_tokens=64,
        temperature=0,
        stop_sequences=target.tool_stop,
    )

    async def scenario() -> tuple[ModelResponse, Wire]:
        async with connect(target) as (model, wire):
            return await model.complete(request), wire

    response, wire = run(scenario())
    body = wire.bodies[0]
    assert "response_format" not in body and body["tool_choice"] == "required"
    assert [t["function"]["name"] for t in body["tools"]] == ["get_weather", "final_answer"]
    assert_one_weather_call(response)
