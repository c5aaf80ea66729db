"""Gemini specifics: synthesised call ids, thought signatures, RetryInfo delays, per-day quota,
blocked prompts, merged usage snapshots and bare error objects, over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from conftest_network import no_external_network  # noqa: F401
from fsm_agent.errors import ModelError, ProviderServerError, RateLimitError
from fsm_agent.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolResult,
)
from fsm_agent.providers import GeminiModel
from provider_server import (
    FAST,
    ProviderServer,
    Reply,
    Turn,
    collect,
    gemini_events,
    gemini_json,
    json_reply,
    run,
    sse,
    sse_reply,
)

REQUEST = ModelRequest(messages=(Message.system("sys"), Message.user("hi")))


async def talk(*replies: Reply, streaming: bool = True) -> tuple[ModelResponse, list[Any]]:
    async with ProviderServer().script(*replies) as server:
        model = GeminiModel("g", base_url=server.url, api_key="g-test-key", timeouts=FAST)
        try:
            if streaming:
                _, response = await collect(model, REQUEST)
            else:
                response = await model.complete(REQUEST)
            return response, server.requests
        finally:
            await model.aclose()


def test_function_call_without_id_gets_a_stable_id_and_signature_round_trip() -> None:
    """A call without id gets a deterministic id; its thoughtSignature is replayed in the same
    part, and the functionResponse pairs by name without inventing a server id."""
    turn = Turn(calls=[("", "grep", {"p": 1})], signature="c2lnbmF0dXJl")
    response, requests = run(talk(sse_reply(sse(*gemini_events(turn), eol="\r\n"))))
    assert requests[0].target.endswith(":streamGenerateContent?alt=sse")
    [call] = response.message.tool_calls
    assert call.id == "gemini_resp-1_0"
    assert response.finish_reason is FinishReason.TOOL_CALLS
    result = ToolResult(call_id=call.id, name="grep", content="found")
    follow = ModelRequest(messages=(Message.user("hi"), response.message, Message.tool(result)))
    body = GeminiModel("g", api_key="k").build_body(follow)
    model_part = body["contents"][1]["parts"][0]
    assert model_part == {
        "functionCall": {"name": "grep", "args": {"p": 1}},
        "thoughtSignature": "c2lnbmF0dXJl",
    }
    assert body["contents"][2]["parts"][0] == {
        "functionResponse": {"name": "grep", "response": {"result": "found"}}
    }


def test_foreign_history_gets_the_signature_bypass_once_per_turn() -> None:
    """Calls from another provider carry the documented bypass signature on the first call."""
    calls = [ToolCall.create("x1", "grep", {}), ToolCall.create("x2", "grep", {})]
    request = ModelRequest(messages=(Message.user("hi"), Message.assistant("", calls)))
    parts = GeminiModel("g", api_key="k").build_body(request)["contents"][1]["parts"]
    assert parts[0]["thoughtSignature"] == "skip_thought_signature_validator"
    assert "thoughtSignature" not in parts[1]


def test_retry_info_delay_from_body() -> None:
    """A 429 ``RESOURCE_EXHAUSTED`` honours the fractional ``RetryInfo.retryDelay``."""
    body = {
        "error": {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "message": "quota",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "45.837906927s"}
            ],
        }
    }
    with pytest.raises(RateLimitError) as caught:
        run(talk(json_reply(body, 429), streaming=False))
    assert caught.value.retryable
    assert caught.value.retry_after == pytest.approx(45.837906927)


def test_per_day_quota_is_not_retryable() -> None:
    """A per-day ``QuotaFailure`` is a RateLimitError that must not be retried."""
    violation = {"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}
    body = {
        "error": {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [violation]}
            ],
        }
    }
    with pytest.raises(RateLimitError) as caught:
        run(talk(json_reply(body, 429), streaming=False))
    assert not caught.value.retryable


@pytest.mark.parametrize("streaming", [False, True])
def test_blocked_prompt_is_content_filter(streaming: bool) -> None:
    """No candidates with ``promptFeedback.blockReason`` is content_filter, not an IndexError."""
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {}}
    reply = sse_reply(sse(blocked)) if streaming else json_reply(blocked)
    response, _ = run(talk(reply, streaming=streaming))
    assert (response.finish_reason, response.raw_finish_reason) == (
        FinishReason.CONTENT_FILTER,
        "SAFETY",
    )


def test_usage_snapshots_are_merged_field_by_field() -> None:
    """A usage field that drops out of a later snapshot keeps its last value."""
    events = gemini_events(Turn(text="hello world", usage=(40, 6)))
    events[0]["usageMetadata"]["cachedContentTokenCount"] = 30
    response, _ = run(talk(sse_reply(sse(*events))))
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (40, 6, 30)


def test_a_negative_token_count_reads_as_absent() -> None:
    """A negative count on the wire is no count: it reads as 0, never as a negative usage."""
    response, _ = run(talk(sse_reply(sse(*gemini_events(Turn(text="hi", usage=(-40, 6)))))))
    assert (response.usage.input_tokens, response.usage.output_tokens) == (0, 6)


def test_error_object_mid_stream_keyed_by_body_code() -> None:
    """``{"error": {"code": 500}}`` after a candidate chunk is a retryable server error."""
    events = gemini_events(Turn(text="partial text"))[:1]
    error = {"error": {"code": 500, "status": "INTERNAL", "message": "internal"}}
    with pytest.raises(ProviderServerError, match="internal") as caught:
        run(talk(sse_reply(sse(*events, error))))
    assert caught.value.retryable


def test_bare_multi_line_error_object_without_data_prefix() -> None:
    """An error object written without ``data:`` over several lines is still classified."""
    pieces = [*sse(*gemini_events(Turn(text="abc"))[:1]), b'{"error": {\n  "code": 503,\n']
    pieces.append(b'  "message": "unavailable", "status": "UNAVAILABLE"}}\n')
    with pytest.raises(ProviderServerError, match="unavailable"):
        run(talk(sse_reply(pieces)))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("UNEXPECTED_TOOL_CALL", FinishReason.ERROR),
        ("RECITATION", FinishReason.CONTENT_FILTER),
        ("MODEL_ARMOR", FinishReason.CONTENT_FILTER),
        ("SOMETHING_NEW", FinishReason.TOOL_CALLS),  # unknown + calls assembled
    ],
)
def test_finish_reason_table(raw: str, expected: FinishReason) -> None:
    """Gemini finish reasons map per the table, then reconcile with the assembled calls."""
    turn = Turn(text="x", calls=[("", "grep", {})], finish=raw)
    response, _ = run(talk(json_reply(gemini_json(turn)), streaming=False))
    assert response.finish_reason is expected
    assert bool(response.message.tool_calls) == (expected is FinishReason.TOOL_CALLS)


def test_thought_parts_and_signed_text() -> None:
    """Thought parts become reasoning; a signature on a text part is kept for replay."""
    payload = gemini_json(Turn())
    payload["candidates"][0]["content"]["parts"] = [
        {"text": "pondering", "thought": True},
        {"text": "answer", "thoughtSignature": "U0lH"},
    ]
    response, _ = run(talk(json_reply(payload), streaming=False))
    assert response.message.text == "answer"
    thought, signature = response.message.reasoning
    assert thought.text == "pondering"
    assert signature.signature == "U0lH"
    request = ModelRequest(messages=(Message.user("q"), response.message))
    parts = GeminiModel("g", api_key="k").build_body(request)["contents"][1]["parts"]
    assert parts == [{"text": "answer"}, {"text": "", "thoughtSignature": "U0lH"}]


def test_request_mapping() -> None:
    """systemInstruction, tools, toolConfig and generationConfig are mapped."""
    from fsm_agent.messages import ToolDefinition

    request = ModelRequest(
        messages=(Message.system("be brief"), Message.user("hi")),
        tools=(ToolDefinition(name="grep", description="d"),),
        tool_choice="grep",
        max_tokens=10,
        temperature=0.5,
        stop_sequences=("X",),
        reasoning_effort="low",
    )
    body = GeminiModel("models/g", api_key="k").build_body(request)
    assert body["systemInstruction"] == {"parts": [{"text": "be brief"}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert body["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["grep"]}
    }
    config = body["generationConfig"]
    assert (config["maxOutputTokens"], config["temperature"], config["stopSequences"]) == (
        10,
        0.5,
        ["X"],
    )
    assert config["thinkingConfig"]["includeThoughts"] is True


def test_model_error_has_provider() -> None:
    """Errors say which provider raised them."""
    with pytest.raises(ModelError) as caught:
        run(talk(json_reply({"error": {"code": 503}}, 503), streaming=False))
    assert caught.value.provider == "gemini"


def test_a_json_array_answer_to_a_streaming_request_is_read_as_its_chunks() -> None:
    """Gemini's own non-SSE stream shape, a JSON array of chunks, is one answer read once."""
    turn = Turn(text="Hello there", calls=[("c", "grep", {"p": 1})], pieces=2)

    async def scenario() -> tuple[list[Any], ModelResponse, int]:
        async with ProviderServer().script(json_reply(gemini_events(turn))) as server:
            model = GeminiModel("g", base_url=server.url, api_key="g-test-key", timeouts=FAST)
            try:
                deltas, response = await collect(model, REQUEST)
            finally:
                await model.aclose()
            return deltas, response, len(server.requests)

    deltas, response, requests = run(scenario())
    assert requests == 1
    assert response.message.text == "Hello there"
    assert [c.name for c in response.message.tool_calls] == ["grep"]
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert "".join(getattr(d, "text", "") for d in deltas) == "Hello there"


def test_an_error_object_in_a_json_array_stream_is_raised() -> None:
    """An error element in Gemini's JSON array stream is the typed error it names."""
    chunks = [*gemini_events(Turn(text="Hi"))[:1], {"error": {"code": 503, "message": "busy"}}]
    with pytest.raises(ProviderServerError, match="busy"):
        run(talk(json_reply(chunks)))
