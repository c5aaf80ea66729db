"""Wire shapes that real servers demand: requests a strict server accepts, stream answers read by
their content type, and the smaller faults (error classes, labels, finish reasons, pause_turn,
connection messages, discarded attempts). Every test talks HTTP to a loopback server."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from conftest_network import no_external_network  # noqa: F401
from fsm_agent import Agent, Policy, RetryPolicy, RunHandle, tool
from fsm_agent.errors import (
    AuthenticationError,
    MalformedResponseError,
    ModelConnectionError,
    ModelError,
    ProviderServerError,
)
from fsm_agent.events import AttemptDiscardedEvent, RetryingEvent, TextDeltaEvent
from fsm_agent.messages import (
    FinishReason,
    Message,
    ModelRequest,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    ToolResult,
)
from fsm_agent.providers import AnthropicModel, GeminiModel, OpenAIChatModel, OpenAIResponsesModel
from provider_server import (
    FAST,
    Close,
    ProviderServer,
    Reply,
    Request,
    Turn,
    anthropic_events,
    anthropic_json,
    collect,
    gemini_events,
    gemini_json,
    json_reply,
    openai_chunk,
    openai_events,
    openai_json,
    openai_sse,
    run,
    schema_faults,
    sse,
    sse_reply,
)
from responses_wire import responses_events, responses_json

KEY = "sk-wire-0123456789abcdef"
LOOKUP = ToolDefinition(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)
CALL = ToolCall.create("call_1", "lookup", {"q": "fsm"})
HISTORY = (
    Message.system("Be brief."),
    Message.user("What is fsm?"),
    Message.assistant("", [CALL]),
    Message.tool(ToolResult(call_id="call_1", name="lookup", content="a state machine")),
)

Maker = Callable[[str], Any]
MAKERS: dict[str, Maker] = {
    "openai": lambda url: OpenAIChatModel("m", base_url=url, api_key=KEY, timeouts=FAST),
    "openai-responses": lambda url: OpenAIResponsesModel(
        "m", base_url=url, api_key=KEY, timeouts=FAST
    ),
    "anthropic": lambda url: AnthropicModel("m", base_url=url, api_key=KEY, timeouts=FAST),
    "gemini": lambda url: GeminiModel("m", base_url=url, api_key=KEY, timeouts=FAST),
}
WHOLE: dict[str, Callable[[Turn], Any]] = {
    "openai": openai_json,
    "openai-responses": responses_json,
    "anthropic": anthropic_json,
    "gemini": gemini_json,
}
providers = pytest.mark.parametrize("provider", list(MAKERS))
paths = pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])


async def _ask(provider: str, request: ModelRequest, *replies: Reply, streaming: bool) -> Any:
    """Send ``request`` to a strict server scripted with ``replies``; the answer and the bodies."""
    async with ProviderServer().script(*replies) as server:
        model = MAKERS[provider](server.url)
        try:
            if streaming:
                answer: Any = await collect(model, request)
            else:
                answer = await model.complete(request)
        finally:
            await model.aclose()
        return answer, [r.json for r in server.requests]


# --- request shapes ---------------------------------------------------------------------------


@providers
def test_summary_call_keeps_the_tools_and_forbids_them(provider: str) -> None:
    """A request with tools and tool_choice "none" after a tool round trip (the step-limit
    summary) passes a strict server and forbids tool use in the provider's own terms."""
    request = ModelRequest(messages=HISTORY, tools=(LOOKUP,), tool_choice="none")
    reply = json_reply(WHOLE[provider](Turn(text="It is a state machine.")))
    response, [body] = run(_ask(provider, request, reply, streaming=False))
    assert response.message.text == "It is a state machine."
    assert body["tools"]
    if provider in ("openai", "openai-responses"):
        assert body["tool_choice"] == "none"
    elif provider == "anthropic":
        assert body["tool_choice"] == {"type": "none"}
    else:
        assert body["toolConfig"] == {"functionCallingConfig": {"mode": "NONE"}}


@providers
def test_no_tool_choice_and_no_tool_blocks_without_tools(provider: str) -> None:
    """Without tools, no tool_choice goes out (and Anthropic gets past calls as text), so a
    strict server accepts a tool history even when the caller set a tool_choice."""
    request = ModelRequest(messages=HISTORY, tool_choice="none")
    reply = json_reply(WHOLE[provider](Turn(text="done")))
    response, [body] = run(_ask(provider, request, reply, streaming=False))
    assert response.message.text == "done"
    assert "tool_choice" not in body and "toolConfig" not in body
    if provider == "anthropic":
        texts = [b["text"] for m in body["messages"] for b in m["content"]]
        assert any("lookup" in t for t in texts) and any("a state machine" in t for t in texts)


def test_openai_tool_call_turn_is_sent_with_empty_content() -> None:
    """An assistant turn that only calls tools carries ``"content": ""``; ``empty_content``
    keeps ``null`` or leaves the field out for a server that wants that instead."""

    def assistant(**options: Any) -> dict[str, Any]:
        model = OpenAIChatModel("m", api_key=KEY, base_url="http://127.0.0.1:9", **options)
        body = model.build_body(ModelRequest(messages=HISTORY, tools=(LOOKUP,)), stream=False)
        [entry] = [m for m in body["messages"] if m["role"] == "assistant"]
        return entry

    assert assistant()["content"] == ""
    assert assistant(empty_content="null")["content"] is None
    assert "content" not in assistant(empty_content="omit")


def test_strict_server_rejects_the_shapes_strict_apis_reject() -> None:
    """The loopback server's schema check names null content, tool_choice without tools and
    Anthropic tool blocks without tools (so the default suite catches a regression)."""

    def faults(path: str, body: dict[str, Any]) -> list[str]:
        return schema_faults(Request("POST", path, {}, json.dumps(body).encode()))

    null = {"messages": [{"role": "assistant", "content": None, "tool_calls": []}]}
    assert faults("/v1/chat/completions", null) == ["messages[0].content must be a string"]
    assert faults("/v1/chat/completions", {"messages": [], "tool_choice": "none"})
    blocks = {"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}
    assert faults("/v1/messages", blocks)
    assert faults("/v1beta/models/g:generateContent", {"toolConfig": {}})
    assert not faults("/v1/chat/completions", {"messages": [{"role": "user", "content": ""}]})


@paths
def test_multi_turn_tool_run_against_a_strict_server(streaming: bool) -> None:
    """A tool-using run completes against a server that rejects ``content: null``."""
    looked_up: list[str] = []

    @tool
    def lookup(q: str) -> str:
        """Look a word up."""
        looked_up.append(q)
        return "a state machine"

    def handler(request: Request) -> Reply:
        answered = any(m["role"] == "tool" for m in request.json["messages"])
        turn = Turn(text="It is a state machine.") if answered else Turn(calls=[CALL_WIRE])
        return sse_reply(openai_sse(turn)) if streaming else json_reply(openai_json(turn))

    async def scenario() -> Any:
        async with ProviderServer(handler) as server:
            model = OpenAIChatModel("m", base_url=server.url, api_key=KEY, timeouts=FAST)
            agent: Agent[None] = Agent(model, tools=[lookup], policy=Policy(max_steps=4))
            handle = RunHandle()
            if streaming:
                _ = [e async for e in agent.run_stream("What is fsm?", handle=handle)]
            else:
                await agent.run("What is fsm?", handle=handle)
            await model.aclose()
            return handle.result, server.requests

    result, requests = run(scenario())
    assert result.ok, f"the run ended {result.stop_reason}: {result.error}"
    assert result.output == "It is a state machine."
    assert looked_up == ["fsm"] and len(requests) == 2


CALL_WIRE = ("call_1", "lookup", {"q": "fsm"})


# --- content types of a streamed answer -------------------------------------------------------


@providers
def test_json_answer_to_a_streaming_request_is_one_response(provider: str) -> None:
    """A server that answers a streaming request with a whole JSON completion gives the same
    response as a plain call, with its text and calls as deltas."""
    turn = Turn(text="Checking.", calls=[CALL_WIRE])
    request = ModelRequest(messages=HISTORY[:2], tools=(LOOKUP,))
    reply = json_reply(WHOLE[provider](turn))
    (deltas, streamed), _ = run(_ask(provider, request, reply, streaming=True))
    plain, _ = run(_ask(provider, request, json_reply(WHOLE[provider](turn)), streaming=False))
    assert streamed.message.text == plain.message.text == "Checking."
    assert streamed.finish_reason is FinishReason.TOOL_CALLS
    assert [c.arguments for c in streamed.message.tool_calls] == [{"q": "fsm"}]
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "Checking."
    assert [d.name for d in deltas if isinstance(d, ToolCallDelta)] == ["lookup"]


@providers
def test_other_content_type_to_a_streaming_request_is_a_clear_final_error(provider: str) -> None:
    """A body that is neither an event stream nor JSON is a non-retryable error naming its
    content type."""
    page = Reply(headers={"content-type": "text/html; charset=utf-8"}, body=[b"<html>hi</html>"])
    request = ModelRequest(messages=HISTORY[:2])
    with pytest.raises(MalformedResponseError) as caught:
        run(_ask(provider, request, page, streaming=True))
    assert "text/html" in str(caught.value)
    assert not caught.value.retryable


# --- error classes and labels ------------------------------------------------------------------


@providers
def test_401_is_an_authentication_error_whatever_the_body_type(provider: str) -> None:
    """A 401 whose body says ``invalid_request_error`` (as OpenAI sends) is an
    AuthenticationError, not retryable."""
    body = {"error": {"message": "Incorrect API key", "type": "invalid_request_error"}}
    request = ModelRequest(messages=HISTORY[:2])
    with pytest.raises(ModelError) as caught:
        run(_ask(provider, request, json_reply(body, 401), streaming=False))
    assert type(caught.value) is AuthenticationError
    assert not caught.value.retryable


@pytest.mark.parametrize("provider", ["openai", "gemini"])
def test_error_in_a_whole_200_body_is_not_called_a_stream_error(provider: str) -> None:
    """An error object in a non-streamed 200 answer is labelled as such, not "stream error"."""
    body = {"error": {"message": "backend exploded", "type": "server_error", "code": 500}}
    request = ModelRequest(messages=HISTORY[:2])
    with pytest.raises(ProviderServerError) as caught:
        run(_ask(provider, request, json_reply(body), streaming=False))
    assert "stream error" not in str(caught.value)
    assert "backend exploded" in str(caught.value)


def _wrong_text_type(provider: str, streaming: bool) -> Reply:
    """A 200 answer whose text is a JSON object where the format has a string."""
    odd = {"unexpected": "object"}
    if provider == "openai":
        if streaming:
            return sse_reply(sse(openai_chunk({"content": odd}), openai_chunk({}, "stop")))
        body = openai_json(Turn(text="x"))
        body["choices"][0]["message"]["content"] = odd
        return json_reply(body)
    if provider == "openai-responses":
        if streaming:
            events = responses_events(Turn(text="x", pieces=1))
            events[3]["delta"] = odd
            return sse_reply(sse(*events, names=[e["type"] for e in events]))
        body = responses_json(Turn(text="x"))
        body["output"][0]["content"][0]["text"] = odd
        return json_reply(body)
    if provider == "anthropic":
        if streaming:
            events = anthropic_events(Turn(text="x"))
            events[3]["delta"]["text"] = odd
            return sse_reply(sse(*events, names=[e["type"] for e in events]))
        body = anthropic_json(Turn(text="x"))
        body["content"][0]["text"] = odd
        return json_reply(body)
    chunks = gemini_events(Turn(text="x"))
    chunks[0]["candidates"][0]["content"]["parts"][0]["text"] = odd
    if streaming:
        return sse_reply(sse(*chunks))
    body = gemini_json(Turn(text="x"))
    body["candidates"][0]["content"]["parts"][0]["text"] = odd
    return json_reply(body)


@providers
@paths
def test_text_of_the_wrong_type_is_a_malformed_response(provider: str, streaming: bool) -> None:
    """Text that is not a string is a MalformedResponseError, whole or streamed, never an empty
    answer."""
    request = ModelRequest(messages=HISTORY[:2])
    reply = _wrong_text_type(provider, streaming)
    with pytest.raises(MalformedResponseError, match="not a string"):
        run(_ask(provider, request, reply, streaming=streaming))


@pytest.mark.parametrize("raw", ["MISSING_THOUGHT_SIGNATURE", "MALFORMED_RESPONSE"])
def test_gemini_failed_generations_are_not_a_finished_answer(raw: str) -> None:
    """Gemini's newer failure finish reasons are ``error``, never a finished ``stop``."""
    request = ModelRequest(messages=HISTORY[:2])
    reply = json_reply(gemini_json(Turn(text="half", finish=raw)))
    response, _ = run(_ask("gemini", request, reply, streaming=False))
    assert response.finish_reason is FinishReason.ERROR
    assert response.raw_finish_reason == raw


@providers
def test_unreachable_server_names_the_url_and_the_cause(provider: str) -> None:
    """A refused connection says which URL (without credentials) and why."""

    async def scenario() -> ModelError:
        async with ProviderServer() as server:
            url = server.url
        model = MAKERS[provider](url.replace("http://", "http://user:pw@"))
        with pytest.raises(ModelError) as caught:
            await model.complete(ModelRequest(messages=HISTORY[:2]))
        return caught.value

    error = run(scenario())
    assert isinstance(error, ModelConnectionError)
    assert url_of(error) in str(error)
    assert "ConnectionRefusedError" in str(error)
    assert "pw" not in str(error)


def url_of(error: ModelError) -> str:
    """The ``http://127.0.0.1:<port>`` an error message names."""
    text = str(error)
    start = text.index("http://127.0.0.1:")
    end = start + len("http://127.0.0.1:")
    while text[end].isdigit():
        end += 1
    return text[start:end]


# --- Anthropic pause_turn ----------------------------------------------------------------------


def test_pause_turn_stream_keeps_the_server_tools_streamed_input() -> None:
    """A streamed ``pause_turn`` continuation sends back the server tool's input as streamed."""
    query = {"query": "state machines"}
    first = anthropic_events(Turn(), stop=False)
    first.append(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "server_tool_use", "id": "srv_1", "name": "web_search"},
        }
    )
    text = json.dumps(query)
    for piece in (text[:7], text[7:]):
        delta = {"type": "input_json_delta", "partial_json": piece}
        first.append({"type": "content_block_delta", "index": 0, "delta": delta})
    first.append({"type": "content_block_stop", "index": 0})
    first.append({"type": "message_delta", "delta": {"stop_reason": "pause_turn"}, "usage": {}})
    first.append({"type": "message_stop"})
    second = anthropic_events(Turn(text="Found it."))
    request = ModelRequest(messages=HISTORY[:2])
    (_, response), bodies = run(
        _ask(
            "anthropic",
            request,
            sse_reply(sse(*first)),
            sse_reply(sse(*second)),
            streaming=True,
        )
    )
    assert response.message.text == "Found it."
    [sent] = [b for b in bodies[1]["messages"][-1]["content"] if b["type"] == "server_tool_use"]
    assert sent["input"] == query


# --- discarded attempts ------------------------------------------------------------------------


def test_a_failed_streamed_attempt_is_withdrawn_before_the_retry() -> None:
    """When a streamed attempt fails after showing text and is retried, the listener is told to
    drop what it showed before the retry streams its own answer."""
    partial = openai_events(Turn(text="half an ans", pieces=2))[:2]
    replies = [
        sse_reply([*sse(*partial), Close()]),
        sse_reply(openai_sse(Turn(text="whole answer"))),
    ]

    async def scenario() -> list[Any]:
        async with ProviderServer().script(*replies) as server:
            model = OpenAIChatModel("m", base_url=server.url, api_key=KEY, timeouts=FAST)
            retry = RetryPolicy(base_delay_s=0.0, jitter=0.0)
            agent: Agent[None] = Agent(model, policy=Policy(retry=retry))
            events = [e async for e in agent.run_stream("hi")]
            await model.aclose()
            return events

    events = run(scenario())
    kinds = [e.type for e in events]
    discarded = kinds.index("attempt_discarded")
    assert kinds[discarded + 1] == "retrying"
    shown_before = [e.text for e in events[:discarded] if isinstance(e, TextDeltaEvent)]
    shown_after = [e.text for e in events[discarded:] if isinstance(e, TextDeltaEvent)]
    assert "".join(shown_before) == "half an ans"[: len("".join(shown_before))] != ""
    assert "".join(shown_after) == "whole answer"
    event = events[discarded]
    assert isinstance(event, AttemptDiscardedEvent) and event.attempt == 1
    assert isinstance(events[discarded + 1], RetryingEvent)
