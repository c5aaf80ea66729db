"""OpenAI Chat Completions and compatible-server quirks (catalogue sections B–E), over HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest_network import no_external_network  # noqa: F401
from fsm_agent.errors import MalformedResponseError, ModelError, ProviderServerError
from fsm_agent.messages import (
    FinishReason,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    ToolResult,
)
from fsm_agent.providers import OpenAIChatModel
from provider_server import (
    FAST,
    ProviderServer,
    Turn,
    collect,
    json_reply,
    openai_chunk,
    openai_events,
    openai_json,
    run,
    sse,
    sse_reply,
)

REQUEST = ModelRequest(
    messages=(Message.system("sys"), Message.user("hi")),
    tools=(ToolDefinition(name="read_file"), ToolDefinition(name="grep")),
)
USAGE = {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


def tc(index: int | None = None, **fields: Any) -> dict[str, Any]:
    """One tool-call fragment; ``name``/``arguments`` go under ``function``."""
    fragment: dict[str, Any] = {} if index is None else {"index": index}
    function = {k: fields.pop(k) for k in ("name", "arguments") if k in fields}
    if function:
        fragment["function"] = function
    return {**fragment, **fields}


def stream(*events: Any, done: bool = True) -> list[bytes]:
    return sse(*events, *(["[DONE]"] if done else []))


async def streamed(pieces: list[bytes], **options: Any) -> tuple[list[Any], ModelResponse]:
    async with ProviderServer().script(sse_reply(pieces)) as server:
        model = OpenAIChatModel("m", base_url=server.url, timeouts=FAST, **options)
        try:
            return await collect(model, REQUEST)
        finally:
            await model.aclose()


def answer(*events: Any, done: bool = True) -> ModelResponse:
    return run(streamed(stream(*events, done=done)))[1]


def calls(response: ModelResponse) -> list[tuple[str, str, str]]:
    return [(c.id, c.name, c.arguments_json) for c in response.message.tool_calls]


def test_interleaved_parallel_fragments_group_by_index() -> None:
    """Fragments of two calls arriving interleaved are grouped by index, not by recency."""
    response = answer(
        openai_chunk({"tool_calls": [tc(0, id="a", name="read_file", arguments="")]}),
        openai_chunk({"tool_calls": [tc(1, id="b", name="grep", arguments='{"p":')]}),
        openai_chunk({"tool_calls": [tc(0, arguments='{"f":')]}),
        openai_chunk({"tool_calls": [tc(1, arguments='"x"}')]}),
        openai_chunk({"tool_calls": [tc(0, arguments='"y"}')]}),
        openai_chunk({}, "tool_calls"),
    )
    assert calls(response) == [("a", "read_file", '{"f":"y"}'), ("b", "grep", '{"p":"x"}')]


def test_repeated_name_and_id_are_set_once() -> None:
    """A server repeating id and name on every fragment gives ``read_file``, not doubled."""
    frag = {"id": "call_1", "type": "function"}
    response = answer(
        openai_chunk({"tool_calls": [tc(0, **frag, name="read_file", arguments='{"f"')]}),
        openai_chunk({"tool_calls": [tc(0, **frag, name="read_file", arguments=':"a"}')]}),
        openai_chunk({}, "tool_calls"),
    )
    assert calls(response) == [("call_1", "read_file", '{"f":"a"}')]


def test_index_less_deltas_with_ids() -> None:
    """Deltas without ``index`` are keyed by id (Gemini's compat endpoint, old Ollama)."""
    response = answer(
        openai_chunk({"tool_calls": [tc(id="a", name="grep", arguments='{"p":1}')]}),
        openai_chunk({"tool_calls": [tc(id="b", name="grep", arguments='{"p":2}')]}),
        openai_chunk({}, "tool_calls"),
    )
    assert calls(response) == [("a", "grep", '{"p":1}'), ("b", "grep", '{"p":2}')]


def test_index_less_continuation_of_the_only_open_call() -> None:
    """A fragment with neither index nor id continues the single open call."""
    response = answer(
        openai_chunk({"tool_calls": [tc(id="a", name="grep", arguments='{"p"')]}),
        openai_chunk({"tool_calls": [tc(arguments=":1}")]}),
        openai_chunk({}, "tool_calls"),
    )
    assert calls(response) == [("a", "grep", '{"p":1}')]


def test_ambiguous_index_less_fragment_is_a_protocol_error() -> None:
    """With two open calls, a fragment with neither index nor id is a typed error."""
    with pytest.raises(MalformedResponseError, match="neither index nor id"):
        answer(
            openai_chunk({"tool_calls": [tc(id="a", name="grep", arguments="{")]}),
            openai_chunk({"tool_calls": [tc(id="b", name="grep", arguments="{")]}),
            openai_chunk({"tool_calls": [tc(arguments="}")]}),
            openai_chunk({}, "tool_calls"),
        )


def test_index_reuse_with_new_id_opens_a_new_call() -> None:
    """Two calls with distinct ids both at index 0 (Ollama) are two calls."""
    response = answer(
        openai_chunk({"tool_calls": [tc(0, id="a", name="grep", arguments='{"p":1}')]}),
        openai_chunk({"tool_calls": [tc(0, id="b", name="read_file", arguments='{"f":2}')]}),
        openai_chunk({}, "tool_calls"),
    )
    assert calls(response) == [("a", "grep", '{"p":1}'), ("b", "read_file", '{"f":2}')]


def test_arguments_as_object_are_canonicalised() -> None:
    """A whole call in one chunk with ``arguments`` as a JSON object becomes compact text."""
    response = answer(
        openai_chunk({"tool_calls": [tc(0, id="a", name="grep", arguments={"p": "é"})]}),
        openai_chunk({}, "tool_calls"),
    )
    [call] = response.message.tool_calls
    assert (call.arguments_json, call.arguments) == ('{"p":"é"}', {"p": "é"})


def test_invalid_and_empty_arguments() -> None:
    """Invalid JSON keeps the raw text with ``arguments=None``; empty arguments are ``{}``."""
    response = answer(
        openai_chunk({"tool_calls": [tc(0, id="a", name="grep", arguments='{"p": 1</parameter>')]}),
        openai_chunk({"tool_calls": [tc(1, id="b", name="grep", arguments="")]}),
        openai_chunk({}, "tool_calls"),
    )
    bad, empty = response.message.tool_calls
    assert (bad.arguments_json, bad.arguments) == ('{"p": 1</parameter>', None)
    assert (empty.arguments_json, empty.arguments) == ("{}", {})


def test_invalid_arguments_replay_as_an_object_placeholder() -> None:
    """Replaying a call whose arguments were invalid sends an object-shaped placeholder."""
    bad = ToolCall(id="a", name="grep", arguments_json="{oops", arguments=None)
    request = ModelRequest(
        messages=(
            Message.user("hi"),
            Message.assistant(tool_calls=[bad]),
            Message.tool(ToolResult(call_id="a", name="grep", content="bad args", is_error=True)),
        )
    )
    body = OpenAIChatModel("m", base_url="http://127.0.0.1:1").build_body(request, stream=False)
    sent = body["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent) == {"_raw": "{oops"}


def test_length_with_open_call_never_dispatches() -> None:
    """``length`` while a call is open drops the call: finish is ``length``, no tool calls."""
    response = answer(
        openai_chunk({"tool_calls": [tc(0, id="a", name="grep", arguments='{"p": "ab')]}),
        openai_chunk({}, "length"),
    )
    assert response.finish_reason is FinishReason.LENGTH
    assert response.message.tool_calls == []


def test_stop_with_tool_calls_is_tool_calls() -> None:
    """``finish_reason: stop`` with assembled calls is normalised to ``tool_calls``."""
    response = answer(
        openai_chunk({"tool_calls": [tc(0, id="a", name="grep", arguments="{}")]}),
        openai_chunk({}, "stop"),
    )
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert response.raw_finish_reason == "stop"


def test_null_and_empty_choices_and_null_delta_are_skipped() -> None:
    """``choices: null``, ``choices: []``, ``delta: null`` and ``object: ""`` chunks are skipped."""
    response = answer(
        {"id": "c", "object": "", "choices": None},
        {"id": "c", "choices": []},
        openai_chunk(None),
        openai_chunk({"content": "ok"}),
        openai_chunk({}, "stop"),
        USAGE,
    )
    assert response.message.text == "ok"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (3, 2)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("eos_token", FinishReason.STOP),
        ("sensitive", FinishReason.CONTENT_FILTER),
        ("function_call", FinishReason.ERROR),  # tool calls announced, none assembled
        ("something_new", FinishReason.OTHER),
    ],
)
def test_non_standard_finish_reasons(raw: str, expected: FinishReason) -> None:
    """Non-standard finish reasons map per the table; unknown values are ``other``."""
    response = answer(openai_chunk({"content": "x"}), openai_chunk({}, raw))
    assert (response.finish_reason, response.raw_finish_reason) == (expected, raw)


def test_placeholder_finish_reasons_mean_not_finished() -> None:
    """``""`` and ``"null"`` finish reasons do not end the turn; the real one later does."""
    response = answer(
        openai_chunk({"content": "a"}, ""),
        openai_chunk({"content": "b"}, "null"),
        openai_chunk({}, "stop"),
    )
    assert (response.message.text, response.finish_reason) == ("ab", FinishReason.STOP)


@pytest.mark.parametrize("raw", ["abort", "error", "network_error", "cancelled", "capacity"])
def test_failed_generation_on_http_200_is_retryable(raw: str) -> None:
    """vLLM ``abort`` (and gateway ``error`` etc.) then ``[DONE]`` is a retryable server error."""
    with pytest.raises(ProviderServerError) as caught:
        answer(openai_chunk({"content": "partial"}), openai_chunk({}, raw))
    assert caught.value.retryable


def test_error_chunk_on_http_200() -> None:
    """``data: {"error": …}`` mid-stream (llama.cpp, gateways) is a typed error with its text."""
    with pytest.raises(ProviderServerError, match="slot unavailable") as caught:
        answer(
            openai_chunk({"content": "par"}),
            {"error": {"code": 500, "message": "slot unavailable", "type": "server_error"}},
        )
    assert caught.value.retryable


def test_done_twice_and_data_after_done_are_ignored() -> None:
    """The first ``[DONE]`` ends parsing; a second one and trailing garbage are never read."""
    pieces = sse(*openai_events(Turn(text="fine")), "[DONE]", "[DONE]", "not json")
    _, response = run(streamed(pieces))
    assert response.message.text == "fine"


def test_clean_eof_after_finish_without_done_is_accepted() -> None:
    """A server that omits ``[DONE]`` but sent the finish_reason ends the turn cleanly."""
    response = answer(*openai_events(Turn(text="fine")), done=False)
    assert (response.message.text, response.usage.output_tokens) == ("fine", 7)


def test_done_without_finish_reason_is_truncated() -> None:
    """``[DONE]`` with no finish_reason is a truncated stream, never ``stop``."""
    with pytest.raises(MalformedResponseError, match="truncated"):
        answer(openai_chunk({"content": "half"}))


def test_usage_chunk_missing_reports_no_tokens_not_a_failure() -> None:
    """Without the usage chunk the turn still completes; usage counts the request only."""
    response = answer(openai_chunk({"content": "x"}), openai_chunk({}, "stop"))
    assert (response.usage.requests, response.usage.total_tokens) == (1, 0)


def test_reasoning_content_and_reasoning_fields() -> None:
    """``reasoning_content`` (DeepSeek) and ``reasoning`` (gpt-oss) stream as reasoning."""
    deltas, response = run(
        streamed(
            stream(
                openai_chunk({"reasoning_content": "think "}),
                openai_chunk({"reasoning": "more"}),
                openai_chunk({"content": "answer"}),
                openai_chunk({}, "stop"),
            )
        )
    )
    assert [r.text for r in response.message.reasoning] == ["think more"]
    assert response.message.text == "answer"
    assert [type(d).__name__ for d in deltas] == ["ReasoningDelta", "ReasoningDelta", "TextDelta"]


def test_refusal_is_content_filter() -> None:
    """A ``refusal`` delta makes the turn ``content_filter`` and keeps the refusal text."""
    response = answer(openai_chunk({"refusal": "I can't help."}), openai_chunk({}, "stop"))
    assert response.finish_reason is FinishReason.CONTENT_FILTER
    assert response.message.text == "I can't help."


def test_gemini_compat_thought_signature_round_trips() -> None:
    """``extra_content`` on a tool-call delta is kept on the call and sent back with it."""
    extra = {"google": {"thought_signature": "sig=="}}
    response = answer(
        openai_chunk(
            {"tool_calls": [tc(id="a", name="grep", arguments="{}", extra_content=extra)]}
        ),
        openai_chunk({}, "tool_calls"),
    )
    [call] = response.message.tool_calls
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:1")
    request = ModelRequest(messages=(Message.user("hi"), response.message))
    body = model.build_body(request, stream=False)
    assert body["messages"][1]["tool_calls"][0]["extra_content"] == extra
    assert call.provider_data == {"extra_content": extra}


def test_tool_call_deltas_carry_index_id_and_name_once() -> None:
    """Streamed tool-call deltas give the call's ordinal, its id and name once, then fragments."""
    deltas, _ = run(streamed(stream(*openai_events(Turn(calls=[("a", "grep", {"p": 1})])))))
    tool_deltas = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert next((d.index, d.id, d.name) for d in tool_deltas) == (0, "a", "grep")
    assert all(d.id is None and d.name is None for d in tool_deltas[1:])


def test_request_mapping_for_openai_and_compatible_servers() -> None:
    """OpenAI gets ``developer`` + ``max_completion_tokens``; compatible servers ``system`` +
    ``max_tokens``; tools, tool_choice, images, stop and include_usage are mapped."""
    request = ModelRequest(
        messages=(
            Message.system("be brief"),
            Message.user("see", ImagePart(data="AAAA", media_type="image/jpeg")),
        ),
        tools=(ToolDefinition(name="grep", description="search", strict=True),),
        tool_choice="grep",
        parallel_tool_calls=False,
        max_tokens=50,
        temperature=0.2,
        stop_sequences=("END",),
    )
    official = OpenAIChatModel("gpt", api_key="k").build_body(request, stream=True)
    local = OpenAIChatModel("m", base_url="http://127.0.0.1:8000/v1").build_body(
        request, stream=False
    )
    assert official["messages"][0] == {"role": "developer", "content": "be brief"}
    assert official["max_completion_tokens"] == 50
    assert official["stream_options"] == {"include_usage": True}
    assert local["messages"][0]["role"] == "system"
    assert local["max_tokens"] == 50
    assert "stream" not in local
    image = local["messages"][1]["content"][1]
    assert image == {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}
    assert local["tool_choice"] == {"type": "function", "function": {"name": "grep"}}
    assert local["tools"][0]["function"]["strict"] is True
    assert (local["parallel_tool_calls"], local["stop"], local["temperature"]) == (
        False,
        ["END"],
        0.2,
    )


def test_non_streaming_quirks() -> None:
    """A JSON body with ``choices: []`` is a typed error; an ``error`` object on 200 too."""

    async def scenario() -> list[ModelError]:
        replies = [json_reply({"choices": []}), json_reply({"error": {"message": "bad gateway"}})]
        errors = []
        async with ProviderServer().script(*replies) as server:
            model = OpenAIChatModel("m", base_url=server.url, timeouts=FAST)
            for _ in replies:
                with pytest.raises(ModelError) as caught:
                    await model.complete(REQUEST)
                errors.append(caught.value)
            await model.aclose()
        return errors

    no_choices, error_body = run(scenario())
    assert isinstance(no_choices, MalformedResponseError)
    assert "bad gateway" in str(error_body)


def test_non_streaming_arguments_as_object_and_reasoning() -> None:
    """A JSON body with object arguments and ``reasoning_content`` is read like a stream."""
    body = openai_json(Turn(reasoning="hmm", calls=[("a", "grep", {"p": 1})]))
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"p": 1}

    async def scenario() -> ModelResponse:
        async with ProviderServer().script(json_reply(body)) as server:
            model = OpenAIChatModel("m", base_url=server.url, timeouts=FAST)
            try:
                return await model.complete(REQUEST)
            finally:
                await model.aclose()

    response = run(scenario())
    assert calls(response) == [("a", "grep", '{"p":1}')]
    assert response.message.reasoning[0].text == "hmm"


def test_a_stream_reports_the_model_the_server_names() -> None:
    """A streamed response carries the ``model`` of the server's chunks, not the one asked for."""
    events = openai_events(Turn(text="hi"))
    for event in events:
        event["model"] = "served-model-2026"
    response = answer(*events)
    assert response.model_name == "served-model-2026"
