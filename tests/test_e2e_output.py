"""End-to-end: typed output against a real OpenAI-compatible server (``pytest -m e2e``; the
server is the one of ``tests/test_e2e_openai_server.py``). The claims are about the protocol,
never about what the model knows: the output type's JSON schema goes over the wire as a
``response_format`` a real server accepts, and the answer it sends back validates into the
type (the bundled llama.cpp server turns the schema into a grammar, so its answer has the
schema's shape whatever the model)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from fsm_agent import Agent, Policy, RunResult
from test_e2e_openai_server import (  # the shared server fixture and its functions
    Target,
    Wire,
    connect,
    run,
    target,  # noqa: F401  (the fixture)
)

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
