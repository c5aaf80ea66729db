"""The spans follow the GenAI semantic conventions: every name is checked against the constants of
``opentelemetry-semantic-conventions``, never against literals copied here."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import (
    error_attributes,
    exception_attributes,
    gen_ai_attributes,
    server_attributes,
)
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GEN_AI_AGENT_ID,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_OPERATION_NAME,
    GEN_AI_OUTPUT_TYPE,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_REQUEST_STREAM,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_TOOL_DESCRIPTION,
    GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    GenAiOperationNameValues,
    GenAiOutputTypeValues,
    GenAiProviderNameValues,
)
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.exception_attributes import (
    EXCEPTION_MESSAGE,
    EXCEPTION_TYPE,
)
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT
from pydantic import BaseModel

from fsm_agent import Agent, Conversation, Policy
from fsm_agent import _genai_names as names
from fsm_agent.errors import AuthenticationError, ProviderServerError, RateLimitError
from fsm_agent.messages import Usage
from fsm_agent.observability import OpenTelemetryHooks
from fsm_agent.persistence.sqlite import SQLiteCheckpointer
from fsm_agent.policy import RetryPolicy
from fsm_agent.providers.anthropic import AnthropicModel
from fsm_agent.providers.fallback import FallbackModel
from fsm_agent.providers.openai import OpenAIChatModel
from fsm_agent.testing import ScriptedModel, answer, crash_and_resume, fail, text, tool_call
from helpers import add

CHAT = GenAiOperationNameValues.CHAT.value
INVOKE_AGENT = GenAiOperationNameValues.INVOKE_AGENT.value
EXECUTE_TOOL = GenAiOperationNameValues.EXECUTE_TOOL.value
NO_RETRY_WAIT = Policy(retry=RetryPolicy(base_delay_s=0.0, max_delay_s=0.0))


def _hooks(exporter: InMemorySpanExporter, **options: Any) -> OpenTelemetryHooks:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetryHooks(tracer_provider=provider, **options)


def _op(spans: tuple[ReadableSpan, ...], operation: str) -> list[ReadableSpan]:
    return [s for s in spans if (s.attributes or {}).get(GEN_AI_OPERATION_NAME) == operation]


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _qualified(kind: type[BaseException]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _chat_json(model: str, content: str = "hello", usage: dict[str, Any] | None = None) -> Any:
    return {
        "id": "chatcmpl-1",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": usage or {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


def _openai(
    handler: Callable[[httpx.Request], httpx.Response], model: str, **options: Any
) -> OpenAIChatModel:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return OpenAIChatModel(model, api_key="sk-test", client=client, **options)


def _convention_names() -> set[str]:
    modules = (gen_ai_attributes, server_attributes, error_attributes, exception_attributes)
    return {
        value
        for module in modules
        for key, value in vars(module).items()
        if key.isupper() and isinstance(value, str)
    }


def test_every_name_the_library_keeps_is_the_conventions_own() -> None:
    """Each attribute name in the library's table equals the constant of the same name in the
    conventions package, and each provider value is one the conventions list."""
    modules = (gen_ai_attributes, server_attributes, error_attributes, exception_attributes)
    constants = {k: v for m in modules for k, v in vars(m).items() if k.isupper()}
    kept = {k: v for k, v in vars(names).items() if k.startswith(("GEN_AI_", "SERVER_", "ERR"))}
    kept |= {k: v for k, v in vars(names).items() if k.startswith("EXCEPTION_")}
    kept.pop("EXCEPTION_EVENT")
    assert kept and all(constants[k] == v for k, v in kept.items())
    assert set(names.PROVIDERS.values()) <= {p.value for p in GenAiProviderNameValues}
    assert {names.OUTPUT_TEXT, names.OUTPUT_JSON} <= {t.value for t in GenAiOutputTypeValues}


def test_every_attribute_of_a_traced_run_is_a_convention_name_or_the_librarys_own(
    exporter: InMemorySpanExporter,
) -> None:
    """A run with a tool, content capture and a failed attempt: every attribute and event
    attribute on every span is named by the conventions, or is fsm_agent's own."""
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), fail("down"), text("3")])
    hooks = _hooks(exporter, capture_content=True)
    assert Agent(model, tools=[add], policy=NO_RETRY_WAIT, hooks=[hooks]).run_sync("1+2?").ok
    known = _convention_names()
    seen = set()
    for span in exporter.get_finished_spans():
        seen |= set(span.attributes or {})
        for event in span.events:
            seen |= set(event.attributes or {})
    foreign = {k for k in seen if not k.startswith("fsm_agent.") and k not in known}
    assert foreign == set()
    assert {GEN_AI_PROVIDER_NAME, EXCEPTION_TYPE, ERROR_TYPE} <= seen


def test_the_invocation_span_names_the_provider_the_model_and_the_server(
    exporter: InMemorySpanExporter,
) -> None:
    """An OpenAI model at a local server: invoke_agent and chat carry gen_ai.provider.name,
    gen_ai.request.model, server.address and server.port, read from the model."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=_chat_json("gpt-test"))

    model = _openai(handler, "gpt-test", base_url="http://llm.internal:8081/v1")
    assert Agent(model, hooks=[_hooks(exporter)]).run_sync("hi").ok
    spans = exporter.get_finished_spans()
    (run,) = _op(spans, INVOKE_AGENT)
    (chat,) = _op(spans, CHAT)
    for span in (run, chat):
        attrs = _attrs(span)
        assert attrs[GEN_AI_PROVIDER_NAME] == GenAiProviderNameValues.OPENAI.value
        assert attrs[GEN_AI_REQUEST_MODEL] == "gpt-test"
        assert (attrs[SERVER_ADDRESS], attrs[SERVER_PORT]) == ("llm.internal", 8081)
    assert chat.name == f"{CHAT} gpt-test"
    assert _attrs(chat)[GEN_AI_REQUEST_STREAM] is False
    assert _attrs(chat)[GEN_AI_OUTPUT_TYPE] == GenAiOutputTypeValues.TEXT.value


def test_a_gemini_model_reports_the_conventions_provider_value(
    exporter: InMemorySpanExporter,
) -> None:
    """The library's "gemini" provider is the conventions' gcp.gemini; at the public endpoint
    the port is the scheme's."""
    from fsm_agent.providers.gemini import GeminiModel

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [{"text": "hi"}]},
                        "finishReason": "STOP",
                    }
                ],
                "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1},
            },
        )

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    model = GeminiModel("gemini-test", api_key="k", client=client)
    assert Agent(model, hooks=[_hooks(exporter)]).run_sync("hi").ok
    (chat,) = _op(exporter.get_finished_spans(), CHAT)
    assert _attrs(chat)[GEN_AI_PROVIDER_NAME] == GenAiProviderNameValues.GCP_GEMINI.value
    assert _attrs(chat)[SERVER_PORT] == 443


def test_without_a_known_model_the_chat_span_is_named_chat_and_invents_no_model(
    exporter: InMemorySpanExporter,
) -> None:
    """A model that names no model id and no request_model option: the span is named by the
    operation alone and carries no gen_ai.request.model."""
    Agent(ScriptedModel([text("hi")]), hooks=[_hooks(exporter)]).run_sync("hi")
    spans = exporter.get_finished_spans()
    (chat,) = _op(spans, CHAT)
    assert chat.name == CHAT
    assert GEN_AI_REQUEST_MODEL not in _attrs(chat)
    assert GEN_AI_REQUEST_MODEL not in _attrs(_op(spans, INVOKE_AGENT)[0])
    assert _attrs(chat)[GEN_AI_PROVIDER_NAME]  # required: the model's name stands in


def test_a_fallback_chain_has_a_chat_span_per_model_named_after_it(
    exporter: InMemorySpanExporter,
) -> None:
    """The first model is rate-limited, the second answers: one chat span per model, each named
    after and carrying its own model; the first fails with RateLimitError as its type."""

    def limited(request: httpx.Request) -> httpx.Response:
        return httpx.Response(429, json={"error": {"message": "slow down"}})

    def answers(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=_chat_json("gpt-b-0101"))

    chain = FallbackModel(_openai(limited, "gpt-a"), _openai(answers, "gpt-b"))
    assert Agent(chain, policy=NO_RETRY_WAIT, hooks=[_hooks(exporter)]).run_sync("hi").ok
    first, second = _op(exporter.get_finished_spans(), CHAT)
    assert (first.name, second.name) == (f"{CHAT} gpt-a", f"{CHAT} gpt-b")
    assert _attrs(first)[GEN_AI_REQUEST_MODEL] == "gpt-a"
    assert _attrs(first)[ERROR_TYPE] == _qualified(RateLimitError)
    (event,) = first.events
    assert (event.attributes or {})[EXCEPTION_TYPE] == _qualified(RateLimitError)
    assert _attrs(second)[GEN_AI_REQUEST_MODEL] == "gpt-b"
    assert _attrs(second)[GEN_AI_RESPONSE_MODEL] == "gpt-b-0101"


def test_a_streamed_openai_call_reports_the_servers_model(exporter: InMemorySpanExporter) -> None:
    """run_stream against an SSE stream whose chunks name a dated model: the chat span says
    gen_ai.request.stream true and the server's model as gen_ai.response.model."""
    chunks = [
        {"id": "c1", "model": "gpt-test-2026-01-01", "choices": [{"index": 0, "delta": {}}]},
        {
            "id": "c1",
            "model": "gpt-test-2026-01-01",
            "choices": [{"index": 0, "delta": {"content": "hello"}, "finish_reason": "stop"}],
        },
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)

    agent = Agent(_openai(handler, "gpt-test"), hooks=[_hooks(exporter)])

    async def consume() -> list[str]:
        return [event.type async for event in agent.run_stream("hi")]

    assert asyncio.run(consume())[-1] == "final"
    (chat,) = _op(exporter.get_finished_spans(), CHAT)
    assert _attrs(chat)[GEN_AI_REQUEST_STREAM] is True
    assert _attrs(chat)[GEN_AI_REQUEST_MODEL] == "gpt-test"
    assert _attrs(chat)[GEN_AI_RESPONSE_MODEL] == "gpt-test-2026-01-01"


def test_the_exception_event_names_the_exception_class_not_the_outcome(
    exporter: InMemorySpanExporter,
) -> None:
    """A retried 5xx, then a fatal 401: each failed chat span and the aborted run span carry
    the exception's class as exception.type, and its text as exception.message."""
    model = ScriptedModel(
        [fail(ProviderServerError("down", status_code=503)), fail(AuthenticationError("bad key"))]
    )
    result = Agent(model, policy=NO_RETRY_WAIT, hooks=[_hooks(exporter)]).run_sync("hi")
    assert not result.ok
    spans = exporter.get_finished_spans()
    retried, fatal = _op(spans, CHAT)
    (run,) = _op(spans, INVOKE_AGENT)
    for span, kind in ((retried, ProviderServerError), (fatal, AuthenticationError), (run, None)):
        kind = kind or AuthenticationError
        (event,) = [e for e in span.events if e.name == "exception"]
        assert (event.attributes or {})[EXCEPTION_TYPE] == _qualified(kind)
    assert "bad key" in str((fatal.events[0].attributes or {})[EXCEPTION_MESSAGE])
    assert _attrs(run)[ERROR_TYPE] == result.stop_reason.value  # the stop reason: an error code


def test_the_runs_of_one_conversation_share_its_conversation_id(
    exporter: InMemorySpanExporter,
) -> None:
    """Two runs of one Conversation carry its id as gen_ai.conversation.id; a run on its own
    carries its run id."""
    agent = Agent(
        ScriptedModel([text("one"), text("two"), text("three")]), hooks=[_hooks(exporter)]
    )
    conversation = Conversation(agent)
    first, second = conversation.run_sync("a"), conversation.run_sync("b")
    alone = agent.run_sync("c")
    ids = [
        _attrs(s)[GEN_AI_CONVERSATION_ID] for s in _op(exporter.get_finished_spans(), INVOKE_AGENT)
    ]
    assert ids == [conversation.conversation_id, conversation.conversation_id, alone.run_id]
    assert first.run_id != second.run_id and conversation.conversation_id != first.run_id


def test_cache_and_reasoning_token_counts_reach_the_spans(exporter: InMemorySpanExporter) -> None:
    """An OpenAI answer with cached prompt and reasoning tokens, then a scripted one with a
    cache write: each chat span has its counts; the run span has their sums."""
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 12},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=_chat_json("gpt-test", usage=usage))

    Agent(_openai(handler, "gpt-test"), hooks=[_hooks(exporter)]).run_sync("hi")
    written = Usage(requests=1, input_tokens=50, output_tokens=5, cache_write_tokens=40)
    Agent(ScriptedModel([text("x", usage=written)]), hooks=[_hooks(exporter)]).run_sync("hi")
    spans = exporter.get_finished_spans()
    first, second = _op(spans, CHAT)
    assert _attrs(first)[GEN_AI_USAGE_INPUT_TOKENS] == 100
    assert _attrs(first)[GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 64
    assert _attrs(first)[GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 12
    assert GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS not in _attrs(first)  # none reported
    assert _attrs(second)[GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 40
    runs = _op(spans, INVOKE_AGENT)
    assert _attrs(runs[0])[GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 64
    assert _attrs(runs[1])[GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 40


def test_tool_spans_describe_the_tool_and_the_agent_id_follows_the_definition(
    exporter: InMemorySpanExporter,
) -> None:
    """execute_tool carries the tool's description; gen_ai.agent.id is the same for two agents
    of one definition and differs for another definition."""

    def run(system_prompt: str) -> ReadableSpan:
        exporter.clear()
        model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])
        agent = Agent(model, tools=[add], system_prompt=system_prompt, hooks=[_hooks(exporter)])
        agent.run_sync("1+2?")
        (call,) = _op(exporter.get_finished_spans(), EXECUTE_TOOL)
        assert _attrs(call)[GEN_AI_TOOL_DESCRIPTION] == "Add two integers."
        return _op(exporter.get_finished_spans(), INVOKE_AGENT)[0]

    one, same, other = run("Be brief."), run("Be brief."), run("Be thorough.")
    assert _attrs(one)[GEN_AI_AGENT_ID] == _attrs(same)[GEN_AI_AGENT_ID]
    assert _attrs(one)[GEN_AI_AGENT_ID] != _attrs(other)[GEN_AI_AGENT_ID]


class Sum(BaseModel):
    """A typed answer."""

    total: int


def test_a_typed_output_agent_reports_json_output(exporter: InMemorySpanExporter) -> None:
    """output_type set: the chat and invoke_agent spans say gen_ai.output.type json."""
    agent = Agent(ScriptedModel([answer({"total": 3})]), output_type=Sum, hooks=[_hooks(exporter)])
    assert agent.run_sync("1+2?").output == Sum(total=3)
    spans = exporter.get_finished_spans()
    for span in (*_op(spans, CHAT), *_op(spans, INVOKE_AGENT)):
        assert _attrs(span)[GEN_AI_OUTPUT_TYPE] == GenAiOutputTypeValues.JSON.value


def test_the_invocation_a_crash_cut_short_reports_the_usage_it_had(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    """A run crashes after a model call and is resumed by the same hooks: the crashed
    invocation's span, ended with error status, reports the tokens spent before the crash."""
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])
    agent = Agent(model, tools=[add], hooks=[_hooks(exporter)])
    result, crashed = asyncio.run(
        crash_and_resume(agent, "go", crash_after=3, store=SQLiteCheckpointer(tmp_path / "r.db"))
    )
    assert crashed and result.ok
    crashed_span, _ = _op(exporter.get_finished_spans(), INVOKE_AGENT)
    first_call = model.turns[0].usage  # type: ignore[union-attr]
    assert _attrs(crashed_span)[GEN_AI_USAGE_INPUT_TOKENS] == first_call.input_tokens > 0
    assert _attrs(crashed_span)[GEN_AI_USAGE_OUTPUT_TOKENS] == first_call.output_tokens


def test_anthropic_cache_counts_are_included_in_the_input_tokens(
    exporter: InMemorySpanExporter,
) -> None:
    """Anthropic reports cached tokens beside input_tokens; the span's gen_ai.usage.input_tokens
    includes them, as the conventions ask, and names each cache count."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json={
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [{"type": "text", "text": "hi"}],
                "stop_reason": "end_turn",
                "usage": {
                    "input_tokens": 10,
                    "output_tokens": 2,
                    "cache_read_input_tokens": 30,
                    "cache_creation_input_tokens": 20,
                },
            },
        )

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    model = AnthropicModel("claude-test", api_key="k", client=client)
    assert Agent(model, hooks=[_hooks(exporter)]).run_sync("hi").ok
    (chat,) = _op(exporter.get_finished_spans(), CHAT)
    attrs = _attrs(chat)
    assert attrs[GEN_AI_PROVIDER_NAME] == GenAiProviderNameValues.ANTHROPIC.value
    assert attrs[GEN_AI_USAGE_INPUT_TOKENS] == 60
    assert attrs[GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 30
    assert attrs[GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 20


def test_a_responses_model_reports_openai_and_its_cache_write(
    exporter: InMemorySpanExporter,
) -> None:
    """A Responses API run names the conventions' openai as its provider, and its chat span
    carries the cache reads and writes the server reported (both inside input_tokens)."""
    from fsm_agent.providers.openai_responses import OpenAIResponsesModel
    from provider_server import Turn
    from responses_wire import responses_json

    def handler(request: httpx.Request) -> httpx.Response:
        body = responses_json(Turn(text="hi", usage=(100, 2)))
        body["usage"]["input_tokens_details"] = {"cached_tokens": 30, "cache_write_tokens": 50}
        return httpx.Response(200, json=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    model = OpenAIResponsesModel("gpt-test", api_key="k", client=client)
    assert Agent(model, hooks=[_hooks(exporter)]).run_sync("hi").ok
    spans = exporter.get_finished_spans()
    (chat,) = _op(spans, CHAT)
    (run,) = _op(spans, INVOKE_AGENT)
    for span in (chat, run):
        assert _attrs(span)[GEN_AI_PROVIDER_NAME] == GenAiProviderNameValues.OPENAI.value
    attrs = _attrs(chat)
    assert attrs[GEN_AI_USAGE_INPUT_TOKENS] == 100
    assert attrs[GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 30
    assert attrs[GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] == 50
