"""OpenAI's Responses API: request items, reasoning kept across turns, typed output, usage, and the
API's own failure shapes (``response.failed``, ``error`` events), over HTTP to the loopback server
or through ``httpx.MockTransport``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from conftest_network import no_external_network  # noqa: F401
from fsm_agent import Agent, OpenAIResponsesModel, Policy, RunHandle, tool
from fsm_agent.errors import (
    ContextWindowExceededError,
    InvalidRequestError,
    MalformedResponseError,
    ModelError,
    ProviderServerError,
    RateLimitError,
)
from fsm_agent.messages import (
    FinishReason,
    ImagePart,
    Message,
    ModelRequest,
    OutputSchema,
    ReasoningDelta,
    ReasoningPart,
    Role,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    ToolResult,
)
from fsm_agent.providers import infer_model
from provider_server import FAST, ProviderServer, Reply, Turn, collect, json_reply, run, sse
from provider_server import sse_reply as _sse_reply
from responses_wire import responses_events, responses_json, responses_sse
from sdk_types import responses_faults

LOOKUP = ToolDefinition(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)
ASK = ModelRequest(messages=(Message.system("Be brief."), Message.user("What is fsm?")))
THINKING = Turn(text="", reasoning="I should look it up.", signature="gAAAAB-opaque", calls=[])
CALLING = Turn(
    reasoning="I should look it up.", signature="enc-1", calls=[("call_1", "lookup", {"q": "fsm"})]
)
paths = pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])


def _model(url: str, **options: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("gpt-test", base_url=url, api_key="sk-r", timeouts=FAST, **options)


def _reply(turn: Turn, streaming: bool) -> Reply:
    return _sse_reply(responses_sse(turn)) if streaming else json_reply(responses_json(turn))


async def _ask(
    request: ModelRequest, *replies: Reply, streaming: bool, **options: Any
) -> tuple[Any, list[Any]]:
    async with ProviderServer().script(*replies) as server:
        model = _model(server.url, **options)
        try:
            answer = await (collect(model, request) if streaming else model.complete(request))
        finally:
            await model.aclose()
        return answer, [r.json for r in server.requests]


def _response(answer: Any, streaming: bool) -> Any:
    return answer[1] if streaming else answer


# --- requests ---------------------------------------------------------------------------------


def test_request_items_for_every_kind_of_message() -> None:
    """The system prompt is ``instructions``; user text and images, an assistant's text and
    calls and the tools' results become the API's input items, linked by ``call_id``."""
    call = ToolCall.create("call_1", "lookup", {"q": "fsm"})
    request = ModelRequest(
        messages=(
            Message.system("Be brief."),
            Message.user("What is this?", ImagePart(url="https://example.org/a.png")),
            Message.assistant("Let me look.", [call]),
            Message.tool(ToolResult(call_id="call_1", name="lookup", content="a state machine")),
        ),
        tools=(LOOKUP,),
        tool_choice="lookup",
        parallel_tool_calls=False,
        max_tokens=64,
        temperature=0.2,
        reasoning_effort="low",
    )
    body = _model("http://127.0.0.1:1").build_body(request, stream=False)
    assert body["instructions"] == "Be brief."
    assert body["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is this?"},
                {
                    "type": "input_image",
                    "image_url": "https://example.org/a.png",
                    "detail": "auto",
                },
            ],
        },
        {"type": "message", "role": "assistant", "content": "Let me look."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"q":"fsm"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "a state machine"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": LOOKUP.parameters,
            "strict": False,
        }
    ]
    assert body["tool_choice"] == {"type": "function", "name": "lookup"}
    assert (body["parallel_tool_calls"], body["max_output_tokens"]) == (False, 64)
    assert (body["temperature"], body["reasoning"]) == (0.2, {"effort": "low"})
    assert "store" not in body and "include" not in body and "stream" not in body


STRICT_READY = ToolDefinition(
    name="add",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": ["integer", "null"]}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    strict=True,
)


def test_strict_is_sent_for_every_tool_and_true_only_when_asked_and_possible() -> None:
    """Every function tool says ``strict``: false for a tool with an optional parameter (the
    API would otherwise make it required), for one that does not ask, and for one that asks
    but whose schema strict mode cannot take; true for a strict-ready schema that asks."""
    optional = ToolDefinition(
        name="f",
        parameters={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 3}},
            "required": ["a"],
        },
    )
    asks_but_cannot = ToolDefinition(name="g", parameters=optional.parameters, strict=True)
    not_asking = ToolDefinition(name="h", parameters=STRICT_READY.parameters)
    tools = (optional, asks_but_cannot, not_asking, STRICT_READY)
    request = ASK.model_copy(update={"tools": tools, "output": SCHEMA})
    body = _model("http://127.0.0.1:1").build_body(request, stream=False)
    sent = {t["name"]: t["strict"] for t in body["tools"]}
    assert sent == {"f": False, "g": False, "h": False, "add": True, "final_answer": False}
    assert responses_faults(body) == []


REPLAYED_REASONING = ReasoningPart(
    text="Count.",
    provider_data={
        "provider": "openai-responses",
        "item": {
            "type": "reasoning",
            "id": "rs_7",
            "summary": [],
            "content": None,
            "encrypted_content": "enc",
        },
        "message_id": "msg_7",
    },
)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_every_request_shape_fits_the_sdks_request_types(stream: bool) -> None:
    """A request with every kind of message (a second system prompt, user text and images, an
    assistant's text alone, after reasoning and beside calls, a replayed reasoning item whose
    content is null, tool results), tools, settings and typed output is a body the official
    SDK's request types describe, item by item."""
    call = ToolCall.create("call_1", "lookup", {"q": "fsm"})
    request = ModelRequest(
        messages=(
            Message.system("Be brief."),
            Message.user("What is this?", ImagePart(media_type="image/png", data="aGVsbG8=")),
            Message.assistant("A picture."),
            Message.system("Answer in English."),
            Message(role=Role.ASSISTANT, parts=(REPLAYED_REASONING, TextPart(text="Three."))),
            Message.user("And this?", ImagePart(url="https://example.org/a.png")),
            Message.assistant("Let me look.", [call]),
            Message.tool(ToolResult(call_id="call_1", name="lookup", content="a state machine")),
        ),
        tools=(LOOKUP, STRICT_READY),
        output=SCHEMA,
        parallel_tool_calls=False,
        max_tokens=64,
        temperature=0.2,
        top_p=0.9,
        reasoning_effort="low",
    )
    model = _model("http://127.0.0.1:1", store=False, reasoning_summary="auto")
    body = model.build_body(request, stream=stream)
    assert responses_faults(body) == []
    reasoning, message = body["input"][3:5]
    assert "content" not in reasoning and message["id"] == "msg_7"
    alone = request.model_copy(update={"tools": (), "output": SCHEMA})
    assert responses_faults(model.build_body(alone, stream=stream)) == []


def test_settings_the_api_lacks_are_not_sent() -> None:
    """The API has no stop sequences and no seed: a request with them goes out without them
    (so a fallback chain can share the settings), with ``top_p`` as it is."""
    sent: list[Any] = []

    def endpoint(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=responses_json(Turn(text="x")))

    async def scenario() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(endpoint)) as client:
            model = OpenAIResponsesModel("m", base_url="http://api.test/v1", client=client)
            request = ASK.model_copy(update={"stop_sequences": ("\n",), "seed": 7, "top_p": 0.5})
            assert (await model.complete(request)).message.text == "x"

    run(scenario())
    [body] = sent
    assert body["top_p"] == 0.5
    assert not {"stop", "seed", "stop_sequences"} & set(body)


def test_infer_model_builds_a_responses_model() -> None:
    """``openai-responses:<model>`` names the Responses provider."""
    model = infer_model("openai-responses:gpt-5-mini", api_key="sk-x")
    assert isinstance(model, OpenAIResponsesModel)
    assert model.name == "openai-responses:gpt-5-mini"


# --- reasoning across turns -------------------------------------------------------------------


@paths
def test_reasoning_items_are_kept_and_sent_back_before_their_calls(streaming: bool) -> None:
    """A reasoning item comes back as a reasoning part holding the item, and the next request
    sends it verbatim, followed by the call it led to with that call's item id."""

    async def scenario() -> tuple[Any, list[Any], Any]:
        async with ProviderServer().script(
            _reply(CALLING, streaming), _reply(Turn(text="It is a state machine."), False)
        ) as server:
            model = _model(server.url)
            request = ASK.model_copy(update={"tools": (LOOKUP,)})
            first = await (collect(model, request) if streaming else model.complete(request))
            response = _response(first, streaming)
            [call] = response.message.tool_calls
            result = ToolResult(call_id=call.id, name=call.name, content="a state machine")
            follow = request.model_copy(
                update={"messages": (*request.messages, response.message, Message.tool(result))}
            )
            second = await model.complete(follow)
            await model.aclose()
            return first, [r.json for r in server.requests], second

    first, bodies, second = run(scenario())
    response = _response(first, streaming)
    [reasoning] = response.message.reasoning
    assert reasoning.text == "I should look it up."
    assert response.finish_reason is FinishReason.TOOL_CALLS
    if streaming:
        deltas = first[0]
        assert "".join(d.text for d in deltas if isinstance(d, ReasoningDelta)) == reasoning.text
    replayed = bodies[1]["input"][1:3]
    assert replayed[0] == {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "I should look it up."}],
        "encrypted_content": "enc-1",
    }
    assert replayed[1] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "lookup",
        "arguments": '{"q": "fsm"}',
        "id": "fc_0",
    }
    assert second.message.text == "It is a state machine."


@paths
def test_a_reasoning_item_goes_back_with_the_message_it_led_to(streaming: bool) -> None:
    """A reasoning item followed by a message is sent back followed by that message, under its
    item id, and with a ``summary`` even when the server sent none: the API refuses a reasoning
    item without its following item, or without a summary."""
    body = responses_json(Turn(text="Three.", reasoning="Count the r's.", signature="enc"))
    del body["output"][0]["summary"]
    if streaming:
        reply = _sse_reply(sse({"type": "response.completed", "response": body}))
    else:
        reply = json_reply(body)
    answer, _ = run(_ask(ASK, reply, streaming=streaming))
    response = _response(answer, streaming)
    follow = ModelRequest(messages=(*ASK.messages, response.message, Message.user("Sure?")))
    sent = _model("http://127.0.0.1:1").build_body(follow, stream=False)["input"]
    assert sent[1:3] == [
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "enc", "summary": []},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Three.", "annotations": []}],
            "id": "msg_1",
            "status": "completed",
        },
    ]


def test_store_off_asks_for_encrypted_reasoning() -> None:
    """With ``store=False`` the request says so and includes the encrypted reasoning, which a
    reasoning part keeps even when the model wrote no summary."""
    answer, [body] = run(_ask(ASK, _reply(THINKING, False), streaming=False, store=False))
    assert (body["store"], body["include"]) == (False, ["reasoning.encrypted_content"])
    [reasoning] = answer.message.reasoning
    assert reasoning.provider_data["item"]["encrypted_content"] == "gAAAAB-opaque"


def test_reasoning_of_another_provider_is_not_sent() -> None:
    """A reasoning part from another provider (a fallback's history) has no item to send."""
    foreign = Message(
        role=Role.ASSISTANT,
        parts=(
            ReasoningPart(text="thinking", signature="sig", provider_data={"provider": "x"}),
            TextPart(text="Hi."),
        ),
    )
    request = ModelRequest(messages=(Message.user("hi"), foreign, Message.user("again")))
    body = _model("http://127.0.0.1:1").build_body(request, stream=True)
    assert [i.get("type", "message") for i in body["input"]] == ["message"] * 3
    assert body["stream"] is True


def test_reasoning_summary_is_asked_for() -> None:
    """``reasoning_summary`` goes out beside the request's effort."""
    request = ASK.model_copy(update={"reasoning_effort": "high"})
    body = _model("http://127.0.0.1:1", reasoning_summary="auto").build_body(request, stream=False)
    assert body["reasoning"] == {"effort": "high", "summary": "auto"}


# --- typed output -----------------------------------------------------------------------------

SCHEMA = OutputSchema(
    name="City",
    json_schema={"type": "object", "properties": {"name": {"type": "string"}}},
    strict=True,
)


def test_typed_output_without_tools_is_a_json_schema_text_format() -> None:
    """Without tools, typed output asks for a ``json_schema`` text format."""
    request = ASK.model_copy(update={"output": SCHEMA})
    answer, [body] = run(
        _ask(request, _reply(Turn(text='{"name":"Oslo"}'), False), streaming=False)
    )
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "City",
            "schema": SCHEMA.json_schema,
            "strict": True,
        }
    }
    assert answer.message.text == '{"name":"Oslo"}'


@paths
def test_typed_output_with_tools_is_the_final_answer_tool(streaming: bool) -> None:
    """With tools, typed output is the final answer tool (``tool_choice`` "required"); its call
    comes back as the answer's text, streamed as text deltas, finish ``stop``."""
    request = ASK.model_copy(update={"output": SCHEMA, "tools": (LOOKUP,)})
    turn = Turn(calls=[("call_9", "final_answer", {"name": "Oslo"})])
    answer, [body] = run(_ask(request, _reply(turn, streaming), streaming=streaming))
    assert [t["name"] for t in body["tools"]] == ["lookup", "final_answer"]
    assert body["tool_choice"] == "required" and "text" not in body
    response = _response(answer, streaming)
    assert json.loads(response.message.text) == {"name": "Oslo"}
    assert response.message.tool_calls == []
    assert response.finish_reason is FinishReason.STOP
    if streaming:
        assert not any(isinstance(d, ToolCallDelta) for d in answer[0])
        assert (
            "".join(d.text for d in answer[0] if isinstance(d, TextDelta)) == response.message.text
        )


# --- answers ----------------------------------------------------------------------------------


@paths
def test_usage_counts_cached_written_and_reasoning_tokens(streaming: bool) -> None:
    """Input, output, cached input, cache-written input and reasoning tokens are read from the
    usage object."""
    turn = Turn(text="ok", usage=(1200, 80))
    if streaming:
        events = responses_events(turn)
        usage_of = events[-1]["response"]["usage"]
    else:
        body = responses_json(turn)
        usage_of = body["usage"]
    usage_of["input_tokens_details"] = {"cached_tokens": 1024, "cache_write_tokens": 128}
    usage_of["output_tokens_details"]["reasoning_tokens"] = 64
    if streaming:
        reply = _sse_reply(sse(*events, names=[e["type"] for e in events]))
    else:
        reply = json_reply(body)
    answer, _ = run(_ask(ASK, reply, streaming=streaming))
    usage = _response(answer, streaming).usage
    assert (usage.input_tokens, usage.output_tokens) == (1200, 80)
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (1024, 128)
    assert (usage.reasoning_tokens, usage.requests) == (64, 1)


@paths
def test_a_refusal_is_content_filter_and_keeps_its_text(streaming: bool) -> None:
    """A ``refusal`` content part makes the turn ``content_filter``; its text is the answer."""
    body = responses_json(Turn(text="x"))
    body["output"][0]["content"] = [{"type": "refusal", "refusal": "I can't help with that."}]
    if streaming:
        events = [
            {"type": "response.output_item.added", "output_index": 0, "item": body["output"][0]},
            {
                "type": "response.refusal.delta",
                "output_index": 0,
                "delta": "I can't help with that.",
            },
            {"type": "response.completed", "response": body},
        ]
        reply = _sse_reply(sse(*events, names=[e["type"] for e in events]))
    else:
        reply = json_reply(body)
    answer, _ = run(_ask(ASK, reply, streaming=streaming))
    response = _response(answer, streaming)
    assert response.finish_reason is FinishReason.CONTENT_FILTER
    assert response.message.text == "I can't help with that."


def test_items_sent_whole_still_stream_as_deltas() -> None:
    """A server that sends each output item only when done (no deltas) still streams its text
    and the call's arguments, which match the final response."""
    turn = Turn(text="Checking.", calls=[("call_1", "lookup", {"q": "fsm"})])
    events = [
        e
        for e in responses_events(turn)
        if e["type"] not in ("response.output_item.added",) and not e["type"].endswith(".delta")
    ]
    events[-1]["response"]["output"] = []  # the terminal event may list no items
    reply = _sse_reply(sse(*events))
    (deltas, response), _ = run(_ask(ASK, reply, streaming=True))
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "Checking."
    fragments = "".join(d.arguments_fragment for d in deltas if isinstance(d, ToolCallDelta))
    [call] = response.message.tool_calls
    assert fragments == call.arguments_json and call.arguments == {"q": "fsm"}
    assert response.message.text == "Checking."


# --- failures ---------------------------------------------------------------------------------


def _failed(code: str, message: str) -> dict[str, Any]:
    body = responses_json(Turn(text=""), status="failed")
    body.update(output=[], error={"code": code, "message": message}, usage=None)
    return body


FAILURES = {
    "server_error": (ProviderServerError, True),
    "rate_limit_exceeded": (RateLimitError, True),
    "invalid_prompt": (InvalidRequestError, False),
}


@paths
@pytest.mark.parametrize("code", list(FAILURES))
def test_a_failed_response_is_the_typed_error_of_its_code(streaming: bool, code: str) -> None:
    """A response that failed (``response.failed`` in a stream, ``status: failed`` whole) raises
    the error its ``code`` names, retryable when the cause may pass."""
    body = _failed(code, f"it failed: {code}")
    if streaming:
        events = [*responses_events(Turn(text="par"), stop=False)[:3]]
        events.append({"type": "response.failed", "response": body})
        reply = _sse_reply(sse(*events, names=[e["type"] for e in events]))
    else:
        reply = json_reply(body)
    with pytest.raises(ModelError) as caught:
        run(_ask(ASK, reply, streaming=streaming))
    cls, retryable = FAILURES[code]
    assert type(caught.value) is cls
    assert caught.value.retryable is retryable
    assert f"it failed: {code}" in str(caught.value)


def test_a_failed_stream_without_a_cause_is_a_server_error() -> None:
    """``response.failed`` whose response names no error is a retryable ProviderServerError."""
    body = responses_json(Turn(text=""), status="failed")
    reply = _sse_reply(sse({"type": "response.failed", "response": body}))
    with pytest.raises(ProviderServerError) as caught:
        run(_ask(ASK, reply, streaming=True))
    assert caught.value.retryable


@pytest.mark.parametrize(
    ("event", "cls", "retryable"),
    [
        ({"code": "rate_limit_exceeded", "message": "slow down"}, RateLimitError, True),
        (
            {"code": "context_length_exceeded", "message": "too long"},
            ContextWindowExceededError,
            False,
        ),
        ({"code": None, "message": "something broke"}, ProviderServerError, True),
        ({"error": {"type": "server_error", "message": "boom"}}, ProviderServerError, True),
    ],
    ids=["rate-limit", "context", "no-code", "nested"],
)
def test_error_events_mid_stream_are_typed(
    event: dict[str, Any], cls: type, retryable: bool
) -> None:
    """An ``error`` event after some deltas raises the class its code names; nothing is kept."""
    events = [
        *responses_events(Turn(text="partial text"), stop=False)[:4],
        {"type": "error", **event},
    ]
    reply = _sse_reply(sse(*events, names=[e["type"] for e in events]))
    with pytest.raises(ModelError) as caught:
        run(_ask(ASK, reply, streaming=True))
    assert type(caught.value) is cls
    assert caught.value.retryable is retryable


def test_an_unfinished_whole_response_is_malformed() -> None:
    """A whole response still ``in_progress`` is a retryable MalformedResponseError."""
    reply = json_reply(responses_json(Turn(text="x"), status="in_progress"))
    with pytest.raises(MalformedResponseError) as caught:
        run(_ask(ASK, reply, streaming=False))
    assert caught.value.retryable


# --- an agent run -----------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True], ids=["run", "run_stream"])
def test_agent_run_with_a_tool_and_reasoning(streaming: bool) -> None:
    """An agent runs the model's call and ends with its answer; the second request carries the
    reasoning item, the call and its output, in that order."""
    looked_up: list[str] = []

    @tool
    def lookup(q: str) -> str:
        """Look a word up."""
        looked_up.append(q)
        return "a state machine"

    async def scenario() -> tuple[Any, list[Any]]:
        replies = [_reply(CALLING, streaming), _reply(Turn(text="A state machine."), streaming)]
        async with ProviderServer().script(*replies) as server:
            model = _model(server.url)
            agent: Agent[None] = Agent(model, tools=[lookup], policy=Policy(max_steps=4))
            handle = RunHandle()
            if streaming:
                _ = [e async for e in agent.run_stream("What is fsm?", handle=handle)]
            else:
                await agent.run("What is fsm?", handle=handle)
            await model.aclose()
            return handle.result, [r.json for r in server.requests]

    result, bodies = run(scenario())
    assert result.ok and result.output == "A state machine."
    assert looked_up == ["fsm"]
    kinds = [i.get("type", "message") for i in bodies[1]["input"]]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output"]
    assert [responses_faults(body) for body in bodies] == [[], []]
