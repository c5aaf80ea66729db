"""The provider conformance suite: the same claims, checked against every model implementation.

Each test runs over every backend in :data:`BACKENDS` and over both paths (``complete`` and
``stream``). A backend turns a neutral :class:`~provider_server.Turn` into a model answering it
(a provider talking HTTP to a :class:`~provider_server.ProviderServer`, or the in-process
``ScriptedModel``) and reads back what the model sent. A new backend added to :data:`BACKENDS`
runs every conformance test.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from conftest_network import no_external_network  # noqa: F401
from fsm_agent.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Usage,
)
from fsm_agent.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel
from provider_server import (
    FAST,
    ProviderServer,
    Reply,
    Request,
    Turn,
    anthropic_json,
    anthropic_sse,
    collect,
    gemini_json,
    gemini_sse,
    json_reply,
    openai_json,
    openai_sse,
    run,
    sse_reply,
)
from responses_wire import responses_json, responses_sse

# The neutral finish reason → a turn that makes the backend report it.
FinishScenarios = dict[FinishReason, Turn]


@dataclass
class Session:
    """A model wired to its backend, with the requests it sent (as wire JSON, or neutral)."""

    model: Any
    sent: Callable[[], list[Any]]


@dataclass(frozen=True)
class Backend:
    """How to run the conformance suite against one model implementation."""

    name: str
    open: Callable[[Sequence[Turn]], Any]
    system_prompt_of: Callable[[Any], str | None]
    tool_results_of: Callable[[Any], list[tuple[str, str]]]
    finishes: FinishScenarios
    ids_from_server: bool = True
    scripted_ids: bool = True
    """Whether the server answers with the call ids the turn scripted (else ids of its own)."""


def _http_backend(
    name: str,
    make: Callable[[str], Any],
    is_stream: Callable[[Request], bool],
    as_json: Callable[[Turn], Any],
    as_sse: Callable[[Turn], list[bytes]],
) -> Callable[[Sequence[Turn]], Any]:
    @asynccontextmanager
    async def open_session(turns: Sequence[Turn]) -> AsyncIterator[Session]:
        queue = list(turns)

        def handler(request: Request) -> Reply:
            turn = queue.pop(0) if len(queue) > 1 else queue[0]
            if is_stream(request):
                return sse_reply(as_sse(turn))
            return json_reply(as_json(turn))

        async with ProviderServer(handler) as server:
            model = make(server.url)
            try:
                yield Session(model, lambda: [r.json for r in server.requests])
            finally:
                await model.aclose()

    return open_session


def _scripted(turns: Sequence[Turn]) -> Any:
    from fsm_agent.testing import ScriptedModel

    scripted = []
    for turn in turns:
        raw = turn.finish or ("tool_calls" if turn.calls else "stop")
        calls = [ToolCall.create(i, n, a) for i, n, a in turn.calls]
        usage = Usage(requests=1, input_tokens=turn.usage[0], output_tokens=turn.usage[1])
        scripted.append(
            ModelResponse(
                message=Message.assistant(turn.text, calls),
                finish_reason=FinishReason(raw),
                raw_finish_reason=raw,
                usage=usage,
            )
        )

    @asynccontextmanager
    async def open_session() -> AsyncIterator[Session]:
        model = ScriptedModel(scripted)
        yield Session(model, lambda: list(model.requests))

    return open_session()


def _neutral_system(request: ModelRequest) -> str | None:
    return request.system_prompt


def _neutral_results(request: ModelRequest) -> list[tuple[str, str]]:
    return [(r.call_id, r.content) for m in request.messages for r in m.tool_results]


def _openai_system(body: Any) -> str | None:
    first = body["messages"][0]
    return first["content"] if first["role"] in ("system", "developer") else None


def _openai_results(body: Any) -> list[tuple[str, str]]:
    return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]


def _responses_system(body: Any) -> str | None:
    assert all(i.get("role") != "system" for i in body["input"])
    return body.get("instructions")


def _responses_results(body: Any) -> list[tuple[str, str]]:
    return [
        (i["call_id"], i["output"])
        for i in body["input"]
        if i.get("type") == "function_call_output"
    ]


def _anthropic_system(body: Any) -> str | None:
    assert all(m["role"] in ("user", "assistant") for m in body["messages"])
    system = body.get("system")
    if isinstance(system, list):  # text blocks (a cache breakpoint needs one)
        return "".join(block["text"] for block in system)
    return system


def _anthropic_results(body: Any) -> list[tuple[str, str]]:
    return [
        (b["tool_use_id"], b["content"])
        for m in body["messages"]
        if m["role"] == "user"
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


def _gemini_system(body: Any) -> str | None:
    assert all(c["role"] in ("user", "model") for c in body["contents"])
    instruction = body.get("systemInstruction")
    return instruction["parts"][0]["text"] if instruction else None


def _gemini_results(body: Any) -> list[tuple[str, str]]:
    out = []
    for content in body["contents"]:
        for part in content["parts"]:
            if "functionResponse" in part:
                response = part["functionResponse"]
                out.append((response.get("id", response["name"]), response["response"]["result"]))
    return out


_CALL = [("call_x", "lookup", {"q": "x"})]

BACKENDS: list[Backend] = [
    Backend(
        name="openai",
        open=_http_backend(
            "openai",
            lambda url: OpenAIChatModel("gpt-test", base_url=url, api_key="sk-t", timeouts=FAST),
            lambda r: bool(r.json.get("stream")),
            openai_json,
            openai_sse,
        ),
        system_prompt_of=_openai_system,
        tool_results_of=_openai_results,
        finishes={
            FinishReason.STOP: Turn(text="done"),
            FinishReason.TOOL_CALLS: Turn(calls=_CALL),
            FinishReason.LENGTH: Turn(text="cut", finish="length"),
            FinishReason.CONTENT_FILTER: Turn(text="", finish="content_filter"),
            FinishReason.ERROR: Turn(text="", finish="tool_calls"),
            FinishReason.OTHER: Turn(text="hm", finish="brand_new_reason"),
        },
    ),
    Backend(
        name="openai-responses",
        open=_http_backend(
            "openai-responses",
            lambda url: OpenAIResponsesModel(
                "gpt-test", base_url=url, api_key="sk-t", timeouts=FAST
            ),
            lambda r: bool(r.json.get("stream")),
            responses_json,
            responses_sse,
        ),
        system_prompt_of=_responses_system,
        tool_results_of=_responses_results,
        finishes={
            FinishReason.STOP: Turn(text="done"),
            FinishReason.TOOL_CALLS: Turn(calls=_CALL),
            FinishReason.LENGTH: Turn(text="cut", finish="max_output_tokens"),
            FinishReason.CONTENT_FILTER: Turn(text="", finish="content_filter"),
            FinishReason.OTHER: Turn(text="hm", finish="brand_new_reason"),
        },
    ),
    Backend(
        name="anthropic",
        open=_http_backend(
            "anthropic",
            lambda url: AnthropicModel("claude-test", base_url=url, api_key="sk-a", timeouts=FAST),
            lambda r: bool(r.json.get("stream")),
            anthropic_json,
            anthropic_sse,
        ),
        system_prompt_of=_anthropic_system,
        tool_results_of=_anthropic_results,
        finishes={
            FinishReason.STOP: Turn(text="done"),
            FinishReason.TOOL_CALLS: Turn(calls=_CALL),
            FinishReason.LENGTH: Turn(text="cut", finish="max_tokens"),
            FinishReason.CONTENT_FILTER: Turn(text="I can't", finish="refusal"),
            FinishReason.ERROR: Turn(text="", finish="tool_use"),
            FinishReason.OTHER: Turn(text="hm", finish="brand_new_reason"),
        },
    ),
    Backend(
        name="gemini",
        open=_http_backend(
            "gemini",
            lambda url: GeminiModel("gemini-test", base_url=url, api_key="g-key", timeouts=FAST),
            lambda r: ":streamGenerateContent" in r.path,
            gemini_json,
            gemini_sse,
        ),
        system_prompt_of=_gemini_system,
        tool_results_of=_gemini_results,
        finishes={
            FinishReason.STOP: Turn(text="done"),
            FinishReason.TOOL_CALLS: Turn(calls=_CALL),
            FinishReason.LENGTH: Turn(text="cut", finish="MAX_TOKENS"),
            FinishReason.CONTENT_FILTER: Turn(text="", finish="SAFETY"),
            FinishReason.ERROR: Turn(text="", finish="MALFORMED_FUNCTION_CALL"),
            FinishReason.OTHER: Turn(text="hm", finish="OTHER"),
        },
        ids_from_server=False,
    ),
    Backend(
        name="scripted",
        open=_scripted,
        system_prompt_of=_neutral_system,
        tool_results_of=_neutral_results,
        finishes={reason: Turn(text="x", finish=reason.value) for reason in FinishReason},
    ),
]


SYSTEM = "You are terse."


def _request(*extra: Message, tools: bool = True) -> ModelRequest:
    from fsm_agent.messages import ToolDefinition

    definitions = (
        (
            ToolDefinition(
                name="lookup",
                description="Look a word up.",
                parameters={"type": "object", "properties": {"q": {"type": "string"}}},
            ),
        )
        if tools
        else ()
    )
    return ModelRequest(
        messages=(Message.system(SYSTEM), Message.user("hi"), *extra), tools=definitions
    )


async def _answer(backend: Backend, turns: Sequence[Turn], streaming: bool) -> ModelResponse:
    async with backend.open(turns) as session:
        if streaming:
            deltas, response = await collect(session.model, _request())
            streamed = "".join(d.text for d in deltas if isinstance(d, TextDelta))
            assert streamed == response.message.text
            return response
        response = await session.model.complete(_request())
        assert isinstance(response, ModelResponse)
        return response


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn (a module that imports these tests may define its own)."""
    result: Backend = request.param
    return result


paths = pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])


@paths
def test_text_answer(backend: Backend, streaming: bool) -> None:
    """A plain answer comes back as one assistant text with finish ``stop``."""
    response = run(_answer(backend, [Turn(text="Hello there, friend!")], streaming))
    assert response.message.role is Role.ASSISTANT
    assert response.message.text == "Hello there, friend!"
    assert response.message.tool_calls == []
    assert response.finish_reason is FinishReason.STOP


@paths
def test_one_tool_call(backend: Backend, streaming: bool) -> None:
    """A single tool call is assembled with its name, parsed arguments and an id."""
    turn = Turn(calls=[("call_1", "lookup", {"q": "fsm", "n": 2})])
    response = run(_answer(backend, [turn], streaming))
    assert response.finish_reason is FinishReason.TOOL_CALLS
    [call] = response.message.tool_calls
    assert call.name == "lookup"
    assert call.arguments == {"q": "fsm", "n": 2}
    assert json.loads(call.arguments_json) == {"q": "fsm", "n": 2}
    assert call.id
    if backend.ids_from_server and backend.scripted_ids:
        assert call.id == "call_1"


@paths
def test_parallel_tool_calls(backend: Backend, streaming: bool) -> None:
    """Two calls in one turn come back in order, each with distinct ids and its own arguments."""
    turn = Turn(
        text="Checking both.",
        calls=[("call_a", "lookup", {"q": "a"}), ("call_b", "lookup", {"q": "b" * 40})],
    )
    response = run(_answer(backend, [turn], streaming))
    assert response.finish_reason is FinishReason.TOOL_CALLS
    calls = response.message.tool_calls
    assert [c.arguments for c in calls] == [{"q": "a"}, {"q": "b" * 40}]
    assert len({c.id for c in calls}) == 2
    assert response.message.text == "Checking both."


@paths
def test_tool_result_round_trip(backend: Backend, streaming: bool) -> None:
    """A tool result sent back is linked to its call's id and the model answers with text."""

    async def scenario() -> tuple[ModelResponse, list[tuple[str, str]]]:
        turns = [Turn(calls=[("call_9", "lookup", {"q": "x"})]), Turn(text="It is x.")]
        async with backend.open(turns) as session:
            first = await session.model.complete(_request())
            [call] = first.message.tool_calls
            result = ToolResult(call_id=call.id, name=call.name, content="x means x")
            follow = _request(first.message, Message.tool(result))
            if streaming:
                _, second = await collect(session.model, follow)
            else:
                second = await session.model.complete(follow)
            sent = backend.tool_results_of(session.sent()[-1])
            expected_id = call.id if backend.ids_from_server else call.name
            assert sent == [(expected_id, "x means x")]
            return second, sent

    second, _ = run(scenario())
    assert second.message.text == "It is x."
    assert second.finish_reason is FinishReason.STOP


@paths
@pytest.mark.parametrize("reason", list(FinishReason), ids=[r.value for r in FinishReason])
def test_every_finish_reason(backend: Backend, streaming: bool, reason: FinishReason) -> None:
    """Each normalised finish reason is reported for the backend's corresponding raw signal."""
    if reason not in backend.finishes:
        pytest.skip(f"{backend.name} cannot be made to report {reason.value}")
    response = run(_answer(backend, [backend.finishes[reason]], streaming))
    assert response.finish_reason is reason
    assert response.raw_finish_reason is not None
    if reason is not FinishReason.TOOL_CALLS:
        assert response.message.tool_calls == []


@paths
def test_usage(backend: Backend, streaming: bool) -> None:
    """Token usage of the call is reported, counted as one request."""
    response = run(_answer(backend, [Turn(text="ok", usage=(123, 45))], streaming))
    assert response.usage.requests == 1
    assert (response.usage.input_tokens, response.usage.output_tokens) == (123, 45)


def test_system_prompt_placement(backend: Backend) -> None:
    """The system prompt is sent once, where the provider expects instructions."""

    async def scenario() -> str | None:
        async with backend.open([Turn(text="ok")]) as session:
            await session.model.complete(_request())
            return backend.system_prompt_of(session.sent()[-1])

    assert run(scenario()) == SYSTEM


def test_streaming_equals_complete(backend: Backend) -> None:
    """Streaming and non-streaming calls for the same turn give the same response."""
    turn = Turn(
        text="Let me look.",
        calls=[("call_1", "lookup", {"q": "é ü \u2028"}), ("call_2", "lookup", {})],
        usage=(50, 9),
    )

    async def scenario() -> tuple[ModelResponse, ModelResponse, list[Any]]:
        async with backend.open([turn, turn]) as session:
            plain = await session.model.complete(_request())
            deltas, streamed = await collect(session.model, _request())
            return plain, streamed, deltas

    plain, streamed, deltas = run(scenario())

    def canonical(message: Message) -> list[Any]:
        # Raw argument text may differ in spacing and escapes (a JSON body carries an object,
        # a stream carries the model's text): compare the parsed arguments instead.
        # A server that picks its own call ids picks new ones (and new item ids, kept in
        # provider_data) for every answer.
        blank: dict[str, Any] = {"arguments_json": ""}
        if not backend.scripted_ids:
            blank.update(id="", provider_data=None)
        return [p.model_copy(update=blank) if isinstance(p, ToolCall) else p for p in message.parts]

    assert canonical(streamed.message) == canonical(plain.message)
    assert (streamed.finish_reason, streamed.usage) == (plain.finish_reason, plain.usage)
    fragments: dict[int, str] = {}
    for delta in deltas:
        if isinstance(delta, ToolCallDelta):
            fragments[delta.index] = fragments.get(delta.index, "") + delta.arguments_fragment
    assert [fragments[i] for i in sorted(fragments)] == [
        c.arguments_json for c in streamed.message.tool_calls
    ]
