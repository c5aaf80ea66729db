"""Typed output: each supported kind of type validates, an invalid answer goes back to the model
as feedback and spends the verification budget (ending ``output_invalid``), each provider asks
for the schema its own way, a streamed run emits partial objects, and a resumed run keeps the
typed output."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict

from conftest_network import no_external_network  # noqa: F401
from fsm_agent import (
    Agent,
    ConfigurationError,
    DefinitionChangedError,
    FallbackModel,
    Model,
    OutputValidationError,
    Policy,
    State,
    StopReason,
    Verdict,
    tool,
)
from fsm_agent.events import FinalEvent, PartialOutputEvent, VerificationFailedEvent
from fsm_agent.fuzzing.engine import Engine
from fsm_agent.fuzzing.primary import FailingPrimary
from fsm_agent.machine.checker import check
from fsm_agent.machine.table import Outcome
from fsm_agent.messages import FinishReason, Message, ModelRequest, Role, ToolDefinition
from fsm_agent.output import OutputSpec
from fsm_agent.persistence import InMemoryCheckpointer
from fsm_agent.providers import AnthropicModel, GeminiModel, OpenAIChatModel
from fsm_agent.testing import (
    ScriptedModel,
    answer,
    crash_and_resume,
    resume_differences,
    text,
    tool_call,
)
from fsm_agent.tools.mcp import MCPServerStdio
from helpers import add
from provider_server import (
    FAST,
    ProviderServer,
    Turn,
    anthropic_events,
    anthropic_json,
    collect,
    gemini_json,
    json_reply,
    openai_json,
    openai_sse,
    run,
    sse,
    sse_reply,
)


class Plan(BaseModel):
    steps: list[str]
    done: bool


@dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


@pytest.mark.parametrize(
    ("output_type", "answer_text", "expected"),
    [
        (Plan, '{"steps": ["a", "b"], "done": true}', Plan(steps=["a", "b"], done=True)),
        (Point, '{"x": 1, "y": 2}', Point(1, 2)),
        (Movie, '{"title": "Alien", "year": 1979}', {"title": "Alien", "year": 1979}),
        (int, '{"value": 42}', 42),
        (bool, '{"value": false}', False),
        (list[int], '{"value": [1, 2]}', [1, 2]),
    ],
    ids=["model", "dataclass", "typeddict", "int", "bool", "list"],
)
def test_each_kind_of_type_validates_into_the_output(
    output_type: Any, answer_text: str, expected: object
) -> None:
    """A pydantic model, a dataclass, a TypedDict and scalars (wrapped) become result.output."""
    model = ScriptedModel([text(answer_text)])
    result = Agent(model, output_type=output_type).run_sync("go")
    assert result.stop_reason is StopReason.COMPLETED
    assert result.output == expected
    assert result.output_text == answer_text
    schema = model.requests[0].output
    assert schema is not None and schema.json_schema["type"] == "object"
    assert schema.wrapped is (output_type in (int, bool, list[int]))


def test_a_fenced_answer_validates() -> None:
    """An answer in a Markdown code fence (models without a JSON mode write one) validates."""
    fenced = '```json\n{"steps": [], "done": false}\n```'
    result = Agent(ScriptedModel([text(fenced)]), output_type=Plan).run_sync("go")
    assert result.output == Plan(steps=[], done=False)


def test_an_invalid_answer_is_sent_back_with_the_validation_error_then_passes() -> None:
    """The validation error is the feedback; the next, valid answer is the output."""
    model = ScriptedModel([text('{"steps": ["a"]}'), answer(Plan(steps=["a"], done=True))])
    result = Agent(model, output_type=Plan).run_sync("go")
    assert result.output == Plan(steps=["a"], done=True)
    assert result.counters.verifications == 1
    assert result.error is None
    feedback = model.requests[1].messages[-1]
    assert feedback.role is Role.USER
    assert "done: Field required" in feedback.text
    outcomes = [move.outcome for move in result.trace]
    assert Outcome.OUTPUT_INVALID in outcomes


def test_a_spent_budget_ends_output_invalid_with_the_error() -> None:
    """Invalid answers spend max_verifications; then the run ends output_invalid, output None."""
    model = ScriptedModel([text("not json"), text("{}"), text('{"x": 1}')])
    result = Agent(model, output_type=Point, policy=Policy(max_verifications=2)).run_sync("go")
    assert (result.state, result.stop_reason) == (State.DONE, StopReason.OUTPUT_INVALID)
    assert result.output is None
    assert result.output_text == '{"x": 1}'
    assert isinstance(result.error, OutputValidationError)
    assert "y: Field required" in result.error.feedback
    assert "max_verifications" in str(result.error)
    assert result.model_calls == 3


def test_the_verifier_sees_the_validated_object() -> None:
    """With an output type the verifier's ``output`` is the validated object, not the text."""
    seen: list[object] = []

    def verifier(*, output: Plan, run_state: object) -> Verdict:
        seen.append(output)
        return Verdict.accept() if output.done else Verdict.reject("finish the plan")

    model = ScriptedModel([answer(Plan(steps=[], done=False)), answer(Plan(steps=[], done=True))])
    result = Agent(model, output_type=Plan, verifier=verifier).run_sync("go")
    assert seen == [Plan(steps=[], done=False), Plan(steps=[], done=True)]
    assert result.output == Plan(steps=[], done=True)


def test_tool_calls_come_before_the_typed_answer() -> None:
    """Tools run as usual; only the final (no-tool) answer is validated."""
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), answer({"value": 3})])
    result = Agent(model, tools=[add], output_type=int).run_sync("add")
    assert result.output == 3
    assert result.tool_executions == 1


def test_text_agents_send_no_schema_and_keep_their_output() -> None:
    """Without output_type the request has no schema and the output is the text."""
    model = ScriptedModel([text("hello")])
    result = Agent(model).run_sync("hi")
    assert model.requests[0].output is None
    assert result.output == "hello"


def test_bad_configurations_are_refused() -> None:
    """A type pydantic cannot handle, and output_type with require_done_tool, are refused."""

    class Opaque:
        pass

    with pytest.raises(ConfigurationError, match="output_type"):
        Agent(ScriptedModel([]), output_type=Opaque)
    with pytest.raises(ConfigurationError, match="require_done_tool"):
        Agent(ScriptedModel([]), output_type=Plan, policy=Policy(require_done_tool=True))


def test_a_tool_named_like_the_answer_tool_is_refused() -> None:
    """A typed agent refuses a tool of its own named ``final_answer``: the model could not tell
    it from the tool that carries the answer."""

    @tool
    def final_answer(text: str) -> str:
        """Echo."""
        return text

    with pytest.raises(ConfigurationError, match="final_answer"):
        Agent(ScriptedModel([]), output_type=Plan, tools=[final_answer])
    assert Agent(ScriptedModel([]), tools=[final_answer]).output_type is str


def test_streaming_emits_partial_objects_then_the_final_answer() -> None:
    """run_stream emits partial_output events that grow toward the answer."""

    async def main() -> list[Any]:
        model = ScriptedModel([answer(Plan(steps=["alpha", "beta"], done=True))])
        return [e async for e in Agent(model, output_type=Plan).run_stream("go")]

    events = run(main())
    partials = [e.partial for e in events if isinstance(e, PartialOutputEvent)]
    assert partials[-1] == {"steps": ["alpha", "beta"], "done": True}
    assert any(p != partials[-1] for p in partials)  # earlier ones were partial
    assert all(isinstance(p, dict) for p in partials)
    assert isinstance(events[-1], FinalEvent)


def test_streaming_an_invalid_answer_emits_the_feedback() -> None:
    """A rejected typed answer is a verification_failed event carrying the validation error."""

    async def main() -> list[Any]:
        model = ScriptedModel([text('{"x": 1}'), answer(Point(1, 2))])
        return [e async for e in Agent(model, output_type=Point).run_stream("go")]

    [failed] = [e for e in run(main()) if isinstance(e, VerificationFailedEvent)]
    assert "y: Field required" in failed.feedback


def test_a_scalar_partial_is_unwrapped() -> None:
    """A wrapped scalar's partial value is the value, not the wrapper object."""
    spec = OutputSpec.of(list[int])
    assert spec.partial('{"value": [1, 2') == [1, 2]
    assert spec.partial("") is None


def _durable_agent() -> Agent[None, Plan]:
    model = ScriptedModel([text('{"steps": []}'), answer(Plan(steps=["s"], done=True))])
    return Agent(model, output_type=Plan, checkpointer=InMemoryCheckpointer())


def test_a_resumed_run_keeps_the_typed_output() -> None:
    """A run that crashes at any write resumes to the same validated output."""
    baseline = _durable_agent().run_sync("go")
    assert baseline.output == Plan(steps=["s"], done=True)
    for crash_after in range(1, len(baseline.trace) + 2):
        result, _ = asyncio.run(crash_and_resume(_durable_agent(), "go", crash_after=crash_after))
        assert result.output == baseline.output, crash_after
        assert not resume_differences(baseline, result)


def test_a_run_is_not_resumed_under_another_output_type() -> None:
    """The output type is part of the agent's definition: a run started for one type is not
    resumed by an agent that validates another (text agents keep their fingerprints)."""

    @tool(needs_approval=True)
    def deploy() -> str:
        """Deploy."""
        return "deployed"

    store = InMemoryCheckpointer()

    def agent(output_type: type[Any]) -> Agent[None, Any]:
        script = [tool_call("deploy", {}, id="d1"), answer(Point(x=1, y=2))]
        model = ScriptedModel(script)
        return Agent(model, tools=[deploy], checkpointer=store, output_type=output_type)

    suspended = agent(Plan).run_sync("go")
    assert suspended.state is State.SUSPENDED
    assert "output=" in (suspended.run_state.definition or "")  # type: ignore[union-attr]
    with pytest.raises(DefinitionChangedError) as caught:
        asyncio.run(agent(Point).resume(suspended.run_id, {"d1": True}))
    assert caught.value.changed == ("output",)
    text_run = Agent(ScriptedModel([text("hi")]), checkpointer=store).run_sync("hi")
    assert "output=" not in (text_run.run_state.definition or "output=")  # type: ignore[union-attr]


# -- the providers ---------------------------------------------------------------------------
_REQUEST = ModelRequest(messages=(Message.user("plan"),), output=OutputSpec.of(Plan).schema)
_PLAN = {"steps": ["a"], "done": True}


def test_openai_compatible_request_carries_the_json_schema_response_format() -> None:
    """OpenAI-compatible servers get response_format json_schema; the JSON text is the answer."""

    async def main() -> tuple[Any, Any]:
        turn = Turn(text=json.dumps(_PLAN))
        async with ProviderServer().script(json_reply(openai_json(turn))) as server:
            model = OpenAIChatModel("gpt-test", base_url=server.url, api_key="sk", timeouts=FAST)
            try:
                response = await model.complete(_REQUEST)
            finally:
                await model.aclose()
            return response, server.requests[0].json

    response, body = run(main())
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Plan", "schema": Plan.model_json_schema(), "strict": False},
    }
    assert OutputSpec.of(Plan).validate(response.message.text) == Plan(**_PLAN)


_LOOKUP = ToolDefinition(
    name="lookup",
    description="Look something up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)


@pytest.mark.parametrize(
    ("streaming", "reply_kind"),
    [(False, "json"), (True, "sse"), (True, "json")],
    ids=["complete", "stream", "stream-answered-whole"],
)
def test_openai_with_tools_answers_through_the_final_answer_tool(
    streaming: bool, reply_kind: str
) -> None:
    """With tools, an OpenAI-compatible server gets no response_format (it would constrain
    every turn to the schema) but a final_answer tool and tool_choice required; the call becomes
    the text answer with finish reason stop, and streamed arguments become text deltas."""
    turn = Turn(calls=[("call_1", "final_answer", _PLAN)])
    request = _REQUEST.model_copy(update={"tools": (_LOOKUP,)})

    async def main() -> tuple[Any, list[Any], Any]:
        reply = (
            sse_reply(openai_sse(turn)) if reply_kind == "sse" else json_reply(openai_json(turn))
        )
        async with ProviderServer().script(reply) as server:
            model = OpenAIChatModel("gpt-test", base_url=server.url, api_key="sk", timeouts=FAST)
            try:
                if streaming:
                    deltas, response = await collect(model, request)
                else:
                    deltas, response = [], await model.complete(request)
            finally:
                await model.aclose()
            return response, deltas, server.requests[0].json

    response, deltas, body = run(main())
    assert "response_format" not in body
    assert [t["function"]["name"] for t in body["tools"]] == ["lookup", "final_answer"]
    assert body["tools"][1]["function"]["parameters"] == Plan.model_json_schema()
    assert body["tool_choice"] == "required"
    assert response.finish_reason is FinishReason.STOP
    assert not response.message.tool_calls
    assert json.loads(response.message.text) == _PLAN
    if streaming:
        assert "".join(getattr(d, "text", "") for d in deltas) == response.message.text
        assert not [d for d in deltas if d.type == "tool_call_delta"]


def test_openai_typed_run_with_tools_calls_a_tool_then_answers_in_the_type() -> None:
    """A typed run with tools over an OpenAI-compatible server: the model calls a user tool,
    then the answer tool; the output is typed and every tool call in the history has exactly
    one result."""

    def lookup(q: str) -> str:
        """Look something up."""
        return "found"

    async def main() -> tuple[Any, list[Any]]:
        first = Turn(calls=[("call_1", "lookup", {"q": "x"})])
        second = Turn(calls=[("call_2", "final_answer", _PLAN)])
        async with ProviderServer().script(
            json_reply(openai_json(first)), json_reply(openai_json(second))
        ) as server:
            model = OpenAIChatModel("gpt-test", base_url=server.url, api_key="sk", timeouts=FAST)
            try:
                result = await Agent(model, tools=[lookup], output_type=Plan).run("go")
            finally:
                await model.aclose()
            return result, [r.json for r in server.requests]

    result, bodies = run(main())
    assert result.stop_reason is StopReason.COMPLETED and result.output == Plan(**_PLAN)
    assert all("response_format" not in b and b["tool_choice"] == "required" for b in bodies)
    calls = [c.id for m in result.messages for c in m.tool_calls]
    results = [r.call_id for m in result.messages for r in m.tool_results]
    assert calls == results == ["call_1"]


def test_gemini_request_carries_the_response_json_schema() -> None:
    """Gemini gets responseMimeType application/json and responseJsonSchema."""

    async def main() -> Any:
        turn = Turn(text=json.dumps(_PLAN))
        async with ProviderServer().script(json_reply(gemini_json(turn))) as server:
            model = GeminiModel("gemini-test", base_url=server.url, api_key="k", timeouts=FAST)
            try:
                await model.complete(_REQUEST)
            finally:
                await model.aclose()
            return server.requests[0].json

    config = run(main())["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == Plan.model_json_schema()


@pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])
def test_anthropic_answers_through_the_final_answer_tool(streaming: bool) -> None:
    """Anthropic is offered a final_answer tool (tool_choice any); its call becomes the text
    answer with finish reason stop, and streamed arguments become text deltas."""
    turn = Turn(calls=[("toolu_1", "final_answer", _PLAN)])

    async def main() -> tuple[Any, list[Any], Any]:
        reply = (
            sse_reply(sse(*(e := anthropic_events(turn)), names=[x["type"] for x in e]))
            if streaming
            else json_reply(anthropic_json(turn))
        )
        async with ProviderServer().script(reply) as server:
            model = AnthropicModel("c", base_url=server.url, api_key="sk-ant", timeouts=FAST)
            try:
                if streaming:
                    deltas, response = await collect(model, _REQUEST)
                else:
                    deltas, response = [], await model.complete(_REQUEST)
            finally:
                await model.aclose()
            return response, deltas, server.requests[0].json

    response, deltas, body = run(main())
    [tool] = body["tools"]
    assert tool["name"] == "final_answer"
    assert tool["input_schema"] == Plan.model_json_schema()
    assert body["tool_choice"] == {"type": "any"}
    assert response.finish_reason is FinishReason.STOP
    assert not response.message.tool_calls
    assert json.loads(response.message.text) == _PLAN
    if streaming:
        assert "".join(getattr(d, "text", "") for d in deltas) == response.message.text
        assert not [d for d in deltas if d.type == "tool_call_delta"]


def test_anthropic_typed_run_keeps_one_result_per_tool_call() -> None:
    """A typed run over Anthropic: a user tool, then the answer tool; the history holds the
    answer as text, so every tool call in it has exactly one result."""

    def lookup(q: str) -> str:
        """Look something up."""
        return "found"

    async def main() -> Any:
        first = Turn(calls=[("toolu_1", "lookup", {"q": "x"})])
        second = Turn(calls=[("toolu_2", "final_answer", _PLAN)])
        async with ProviderServer().script(
            json_reply(anthropic_json(first)), json_reply(anthropic_json(second))
        ) as server:
            model = AnthropicModel("c", base_url=server.url, api_key="sk-ant", timeouts=FAST)
            try:
                return await Agent(model, tools=[lookup], output_type=Plan).run("go")
            finally:
                await model.aclose()

    result = run(main())
    assert result.output == Plan(**_PLAN)
    calls = [c.id for m in result.messages for c in m.tool_calls]
    results = [r.call_id for m in result.messages for r in m.tool_results]
    assert calls == results == ["toolu_1"]


# -- the three together: MCP tools, typed output, a fallback model ---------------------------
def test_the_checker_and_the_fuzzer_run_an_agent_with_mcp_tools_typed_output_and_fallback() -> None:
    """One agent with a real MCP server's tools, an output type and a FallbackModel whose
    primary always fails: the checker proves its bounds, and generated scripts (typed answers
    valid and invalid, MCP calls that fail or hang) keep every run invariant."""
    server = MCPServerStdio(
        sys.executable,
        [str(Path(__file__).parents[1] / "support" / "mcp_server.py"), "stdio"],
        include={"add", "fail", "hang"},
        timeout_s=0.05,
    )
    policy = Policy(max_steps=4, max_verifications=2, tool_timeout_s=0.05)

    def make_agent(model: Model) -> Agent[None, Plan]:
        chain = FallbackModel(FailingPrimary(model), model)  # type: ignore[arg-type]
        return Agent(chain, tools=server.tools, policy=policy, output_type=Plan)

    engine = Engine(None, seed=5)
    try:
        engine.loop.run_until_complete(server.__aenter__())
        probe = make_agent(ScriptedModel([]))
        assert (len(probe._plan.models), probe._plan.limits.output_validation) == (2, True)
        report = check(policy, models=2, output_validation=True)
        engine.use(make_agent)
        session = engine.run(range(40))
        engine.loop.run_until_complete(server.__aexit__(None, None, None))
    finally:
        engine.close()
    assert report.proven, report.format()
    assert StopReason.OUTPUT_INVALID in report.stop_reasons
    invalid = {
        i for i, row in enumerate(probe.machine.rows) if row.outcome is Outcome.OUTPUT_INVALID
    }
    assert not invalid & set(report.disabled_rows)
    assert session.found is None, session.found
    assert session.examples == 40 and len(session.paths) > 5


def test_fsm_agent_check_reports_the_bounds_with_an_output_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`fsm-agent check --output-type --models 2 --json` explores the policy, proves the bounds
    and lists output_invalid among the stop reasons it reaches."""
    from fsm_agent.cli import main

    policy = tmp_path / "policy.json"
    policy.write_text(Policy(max_steps=6, max_verifications=2).model_dump_json())
    argv = ["check", "--policy", str(policy), "--output-type", "--models", "2", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "proven" and data["output_validation"] is True
    assert "output_invalid" in data["stop_reasons"]
