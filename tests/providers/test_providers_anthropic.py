"""Anthropic Messages specifics: thinking signatures, pause_turn, refusal, mid-stream errors,
cumulative usage and block-order checks, over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest_network import no_external_network  # noqa: F401
from fsm_agent import Agent, ModelSettings, RunResult, SQLiteCheckpointer, StopReason, tool
from fsm_agent.errors import (
    ConfigurationError,
    InvalidRequestError,
    MalformedResponseError,
    ModelError,
    ProviderServerError,
)
from fsm_agent.messages import FinishReason, Message, ModelRequest, ModelResponse
from fsm_agent.providers import AnthropicModel, FallbackModel
from fsm_agent.testing import ScriptedModel
from invariants import check_history
from provider_server import (
    FAST,
    ProviderServer,
    Reply,
    Turn,
    anthropic_events,
    anthropic_json,
    collect,
    json_reply,
    run,
    sse,
    sse_reply,
)

REQUEST = ModelRequest(messages=(Message.system("sys"), Message.user("hi")))


async def talk(*replies: Reply, streaming: bool = True) -> tuple[ModelResponse, list[Any]]:
    async with ProviderServer().script(*replies) as server:
        model = AnthropicModel("c", base_url=server.url, api_key="sk-ant-test", timeouts=FAST)
        try:
            if streaming:
                _, response = await collect(model, REQUEST)
            else:
                response = await model.complete(REQUEST)
            return response, [r.json for r in server.requests]
        finally:
            await model.aclose()


def events_reply(events: list[dict[str, Any]]) -> Reply:
    return sse_reply(sse(*events, names=[e["type"] for e in events]))


def test_thinking_signature_kept_and_replayed_verbatim() -> None:
    """A thinking block's text and signature come back and are replayed unchanged."""
    turn = Turn(reasoning="let me think", signature="EqQBCkYIAxgC", text="42")
    response, _ = run(talk(events_reply(anthropic_events(turn))))
    [thought] = response.message.reasoning
    assert (thought.text, thought.signature) == ("let me think", "EqQBCkYIAxgC")
    request = ModelRequest(messages=(Message.user("q"), response.message, Message.user("more")))
    body = AnthropicModel("c", api_key="k").build_body(request, stream=False)
    assert body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "let me think",
        "signature": "EqQBCkYIAxgC",
    }


def test_pause_turn_is_continued_and_merged() -> None:
    """``pause_turn`` sends the content back and continues; parts and usage are merged."""
    first = anthropic_events(Turn(text="Searching... ", finish="pause_turn", usage=(10, 3)))
    second = anthropic_events(Turn(text="found it.", usage=(20, 4)))
    response, sent = run(talk(events_reply(first), events_reply(second)))
    assert response.message.text == "Searching... found it."
    assert response.finish_reason is FinishReason.STOP
    assert (response.usage.requests, response.usage.input_tokens) == (2, 30)
    assert sent[1]["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Searching... "}],
    }


def test_pause_turn_bound() -> None:
    """More ``pause_turn`` stops than the bound allows is a non-retryable error."""
    paused = json_reply(anthropic_json(Turn(text="..", finish="pause_turn")))
    with pytest.raises(ModelError, match="pause_turn") as caught:
        run(talk(*[paused] * 4, streaming=False))
    assert not caught.value.retryable


def test_refusal_with_tool_use_runs_no_tool() -> None:
    """A ``refusal`` stop with tool_use blocks is content_filter and carries no tool calls."""
    turn = Turn(text="I won't", calls=[("t1", "rm", {"path": "/"})], finish="refusal")
    response, _ = run(talk(events_reply(anthropic_events(turn))))
    assert response.finish_reason is FinishReason.CONTENT_FILTER
    assert response.message.tool_calls == []


def test_max_tokens_mid_tool_input_is_length_and_not_dispatched() -> None:
    """``max_tokens`` with a partial tool input drops the call (never dispatched)."""
    events = anthropic_events(Turn(calls=[("t1", "grep", {"p": "abcdef"})], finish="max_tokens"))
    for event in events:
        if event.get("delta", {}).get("type") == "input_json_delta":
            event["delta"]["partial_json"] = event["delta"]["partial_json"][:3]
    response, _ = run(talk(events_reply(events)))
    assert response.finish_reason is FinishReason.LENGTH
    assert response.message.tool_calls == []


def test_overloaded_error_event_mid_stream_is_retryable() -> None:
    """``event: error`` ``overloaded_error`` after text deltas on HTTP 200 is retryable."""
    events = anthropic_events(Turn(text="some text here"), stop=False)[:4]
    events.append({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    with pytest.raises(ProviderServerError, match="Overloaded") as caught:
        run(talk(events_reply(events)))
    assert caught.value.retryable


def test_invalid_request_error_event_is_not_retryable() -> None:
    """A mid-stream ``invalid_request_error`` is classified by type: not retryable."""
    events = [{"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}]
    with pytest.raises(ModelError) as caught:
        run(talk(events_reply(events)))
    assert not caught.value.retryable


def test_cumulative_usage_replaces_not_adds() -> None:
    """Several ``message_delta`` usages: the last values win; message_start's is a placeholder."""
    events = anthropic_events(Turn(text="hi", usage=(100, 9)))
    stop = events.index(next(e for e in events if e["type"] == "message_delta"))
    extra = {"type": "message_delta", "delta": {"stop_reason": None}, "usage": {"output_tokens": 5}}
    events.insert(stop, extra)
    response, _ = run(talk(events_reply(events)))
    assert (response.usage.input_tokens, response.usage.output_tokens) == (100, 9)


def test_a_negative_token_count_reads_as_absent() -> None:
    """A negative count on the wire is no count: it reads as 0, never as a negative usage."""
    response, _ = run(talk(events_reply(anthropic_events(Turn(text="hi", usage=(-100, 9))))))
    assert (response.usage.input_tokens, response.usage.output_tokens) == (0, 9)


def test_event_before_message_start_is_a_protocol_error() -> None:
    """A content event before ``message_start`` is a typed protocol error."""
    events = anthropic_events(Turn(text="hi"))[2:]
    with pytest.raises(MalformedResponseError, match="before message_start"):
        run(talk(events_reply(events)))


def test_delta_for_unknown_block_is_a_protocol_error() -> None:
    """A delta for a block index that was never started is a typed protocol error."""
    events = anthropic_events(Turn(text="hi"))
    events.insert(2, {"type": "content_block_delta", "index": 5, "delta": {"type": "text_delta"}})
    with pytest.raises(MalformedResponseError, match="unknown block"):
        run(talk(events_reply(events)))


def test_empty_end_turn_is_other() -> None:
    """``end_turn`` with no content is an empty turn: ``other``, not a successful ``stop``."""
    response, _ = run(talk(json_reply(anthropic_json(Turn())), streaming=False))
    assert response.finish_reason is FinishReason.OTHER


def test_request_mapping() -> None:
    """System goes to ``system``; results are user ``tool_result`` blocks merged per turn;
    tool_choice, thinking and the required ``max_tokens`` are mapped."""
    from fsm_agent.messages import ToolCall, ToolDefinition, ToolResult

    calls = [ToolCall.create("a", "grep", {"p": 1}), ToolCall.create("b", "grep", {"p": 2})]
    request = ModelRequest(
        messages=(
            Message.system("be brief"),
            Message.user("hi"),
            Message.assistant("checking", calls),
            Message.tool(ToolResult(call_id="a", name="grep", content="1")),
            Message.tool(ToolResult(call_id="b", name="grep", content="2", is_error=True)),
        ),
        tools=(ToolDefinition(name="grep"),),
        tool_choice="required",
        parallel_tool_calls=False,
    )
    body = AnthropicModel("c", api_key="k").build_body(request, stream=False)
    assert body["system"] == [
        {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}
    ]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    results = body["messages"][2]["content"]
    assert [(r["tool_use_id"], r.get("is_error", False)) for r in results] == [
        ("a", False),
        ("b", True),
    ]
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    thinking = request.model_copy(update={"tool_choice": "auto", "reasoning_budget_tokens": 2048})
    body = AnthropicModel("c", api_key="k").build_body(thinking, stream=False)
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] > 2048


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"tool_choice": "required", "reasoning_budget_tokens": 2048}, "tool_choice='required'"),
        ({"tool_choice": "grep", "reasoning_effort": "high"}, "tool_choice='grep'"),
        ({"reasoning_budget_tokens": 1023}, "reasoning_budget_tokens=1023"),
    ],
    ids=["required", "a-tools-name", "small-budget"],
)
def test_settings_extended_thinking_refuses_are_refused_before_anything_is_sent(
    settings: dict[str, Any], named: str
) -> None:
    """A tool_choice that forces a call, or a thinking budget under 1,024 tokens, with extended
    thinking on is a ConfigurationError naming the setting and the rule, and no request goes
    out (Anthropic would answer HTTP 400)."""

    @tool
    def grep(p: str) -> str:
        """Search."""
        return p

    async def scenario() -> list[Any]:
        async with ProviderServer() as server:
            model = AnthropicModel("c", base_url=server.url, api_key="k", timeouts=FAST)
            agent = Agent(model, tools=[grep], model_settings=ModelSettings(**settings))
            try:
                with pytest.raises(ConfigurationError) as caught:
                    await agent.run("Find it.")
            finally:
                await model.aclose()
            assert named in str(caught.value)
            assert "thinking" in str(caught.value)
            return server.requests

    assert run(scenario()) == []


def test_auto_and_none_and_the_smallest_budget_go_with_extended_thinking() -> None:
    """``auto``, ``none`` and a budget of exactly 1,024 tokens (the ``low`` effort's) are
    accepted with thinking on."""
    from fsm_agent.messages import ToolDefinition

    model = AnthropicModel("c", api_key="k")
    for choice in ("auto", "none", None):
        request = REQUEST.model_copy(
            update={
                "tools": (ToolDefinition(name="grep"),),
                "tool_choice": choice,
                "reasoning_budget_tokens": 1024,
            }
        )
        body = model.build_body(request, stream=False)
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    low = model.build_body(REQUEST.model_copy(update={"reasoning_effort": "low"}), stream=True)
    assert low["thinking"]["budget_tokens"] == 1024


def _grep_tool() -> Any:
    @tool
    def grep(p: str) -> str:
        """Search."""
        return p

    return grep


@pytest.mark.parametrize("where", ["agent", "run", "chain"])
def test_settings_extended_thinking_refuses_leave_no_stored_run(tmp_path: Path, where: str) -> None:
    """Settings Anthropic refuses with thinking on (on the agent, on the run, or for a chain's
    later model) are refused when the run starts: nothing is sent and no run is stored."""
    bad = ModelSettings(tool_choice="required", reasoning_budget_tokens=2048)
    store = SQLiteCheckpointer(tmp_path / "runs.db")

    async def scenario() -> list[Any]:
        async with ProviderServer() as server:
            claude = AnthropicModel("c", base_url=server.url, api_key="k", timeouts=FAST)
            model = FallbackModel(ScriptedModel([]), claude) if where == "chain" else claude
            agent = Agent(
                model,
                tools=[_grep_tool()],
                checkpointer=store,
                model_settings=bad if where != "run" else None,
            )
            try:
                with pytest.raises(ConfigurationError, match="tool_choice='required'"):
                    await agent.run("Find it.", model_settings=bad if where == "run" else None)
            finally:
                await claude.aclose()
            return server.requests

    assert run(scenario()) == []
    assert store.runs() == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"tool_choice": "required", "reasoning_effort": "high"}, "tool_choice='required'"),
        ({"reasoning_budget_tokens": 500}, "reasoning_budget_tokens=500"),
    ],
    ids=["forced-choice", "small-budget"],
)
def test_a_hook_that_makes_the_request_one_thinking_refuses_ends_the_run(
    tmp_path: Path, change: dict[str, Any], named: str
) -> None:
    """A before_model_call hook that turns a request into one Anthropic refuses with thinking on
    ends the run with model_error (a non-retryable InvalidRequestError saying the rule), a
    stored ending and a valid history; nothing is sent."""

    class Think:
        def before_model_call(self, *, request: ModelRequest, **future_kwargs: Any) -> ModelRequest:
            return request.model_copy(update=change)

    store = SQLiteCheckpointer(tmp_path / "runs.db")

    async def scenario() -> tuple[RunResult[str], list[Any]]:
        async with ProviderServer() as server:
            model = AnthropicModel("c", base_url=server.url, api_key="sk-ant-test", timeouts=FAST)
            agent = Agent(model, tools=[_grep_tool()], hooks=[Think()], checkpointer=store)
            try:
                result = await agent.run("Find it.")
            finally:
                await model.aclose()
            return result, server.requests

    result, sent = run(scenario())
    assert sent == []
    assert result.stop_reason is StopReason.MODEL_ERROR
    assert isinstance(result.error, InvalidRequestError) and not result.error.retryable
    assert named in str(result.error) and "thinking" in str(result.error)
    check_history(result.messages)
    stored = store.load(result.run_id).state
    assert stored.stop_reason is StopReason.MODEL_ERROR
    assert stored.messages == list(result.messages)
