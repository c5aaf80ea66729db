"""TextToolCalls: tool calls a model wrote as text are read (only for declared tools, only when
the response has none), run, and shown as recovered; under httpx.MockTransport and the loopback
OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import httpx
import pytest

from fsm_agent import Agent, ConfigurationError, OpenAIChatModel, Policy, StopReason, tool
from fsm_agent.cli.trace import Trace, labels
from fsm_agent.events import (
    FinalEvent,
    ModelResponseEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from fsm_agent.messages import FinishReason, Message, ModelRequest, ToolDefinition
from fsm_agent.providers.text_calls import TextToolCalls, is_recovered, read_text_calls
from provider_server import ProviderServer, json_reply, openai_json
from provider_server import Turn as WireTurn

ADD = frozenset({"add"})
ADD_DEFINITION = ToolDefinition(
    name="add",
    description="Add two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}}},
)


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _replies(*texts: str) -> Any:
    """A Chat Completions handler answering each request with the next text, no tool_calls."""
    bodies: list[dict[str, Any]] = []
    queue = list(texts)

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=openai_json(WireTurn(text=queue.pop(0)), model="local"))

    handler.bodies = bodies  # type: ignore[attr-defined]
    return handler


def _model(client: httpx.AsyncClient, base_url: str = "http://local.test/v1") -> OpenAIChatModel:
    return OpenAIChatModel("local", base_url=base_url, client=client, env={})


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "add", "arguments": {"a": 17, "b": 58}}',
        '```json\n{"name": "add", "arguments": {"a": 17, "b": 58}}\n```',
        '<tool_call>\n{"name": "add", "arguments": {"a": 17, "b": 58}}\n</tool_call>',
        '{"function": {"name": "add", "arguments": "{\\"a\\": 17, \\"b\\": 58}"}}',
        '[{"name": "add", "parameters": {"a": 17, "b": 58}}]',
        '{{"name": "add", "arguments": {"a": 17, "b": 58}}}}',
    ],
)
def test_a_call_written_bare_fenced_or_tagged_is_read(text: str) -> None:
    """Bare JSON, a code fence, <tool_call> tags, the nested, string-arguments and list forms,
    and doubled braces all give one call of the declared tool, and nothing of the call is left
    as text."""
    calls, rest = read_text_calls(text, ADD)
    assert [(c.name, c.arguments) for c in calls] == [("add", {"a": 17, "b": 58})]
    assert rest == ""
    assert is_recovered(calls[0])


def test_prose_around_the_call_stays_and_other_json_is_left_alone() -> None:
    """Text around a call stays; JSON that names an undeclared tool or is not a call is not
    read."""
    calls, rest = read_text_calls('I will add them.\n{"name": "add", "arguments": {"a": 1}}', ADD)
    assert [c.name for c in calls] == ["add"] and rest == "I will add them."
    for text in (
        '{"name": "delete_everything", "arguments": {}}',
        '{"a": 1, "b": 2}',
        '{"name": "add", "arguments": [1, 2]}',
        "The sum is {a + b}.",
    ):
        assert read_text_calls(text, ADD) == ([], text), text


def test_under_mock_transport_a_run_executes_the_recovered_call_and_marks_it() -> None:
    """Over Chat Completions, a call written in the content runs the tool; the response event,
    the run's messages and the raw finish reason show that it was read from text."""
    handler = _replies(
        'Sure.\n```json\n{"name": "add", "arguments": {"a": 17, "b": 58}}\n```', "It is 75."
    )

    async def main() -> list[Any]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            agent = Agent(TextToolCalls(_model(client)), tools=[add], policy=Policy(max_steps=4))
            return [e async for e in agent.run_stream("What is 17 + 58? Use the tool.")]

    events = asyncio.run(main())
    final = events[-1]
    assert isinstance(final, FinalEvent)
    assert (final.stop_reason, final.output) == (StopReason.COMPLETED, "It is 75.")
    first = next(e for e in events if isinstance(e, ModelResponseEvent)).response
    (call,) = first.message.tool_calls
    assert is_recovered(call) and call.provider_data == {"recovered_from": "text"}
    assert first.finish_reason is FinishReason.TOOL_CALLS and first.raw_finish_reason == "stop"
    assert first.message.text == "Sure."
    (ran,) = [e for e in events if isinstance(e, ToolCallEvent)]
    assert (ran.call_id, ran.tool_name, ran.args) == (call.id, "add", {"a": 17, "b": 58})
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert (result.call_id, result.content, result.is_error) == (call.id, "75", False)
    # The command line's trace says so before the call's line.
    out = io.StringIO()
    trace = Trace(out, labels(Policy(max_steps=4), verifier=False), stream_text=False)
    for event in events:
        trace.show(event)
    shown = out.getvalue().splitlines()
    said = shown.index("      model  wrote 1 tool call(s) as text, read by TextToolCalls")
    assert said < shown.index("      tool   add(a=17, b=58)")
    # The call went back to the server as a structured call of the history.
    sent = handler.bodies[1]["messages"]
    assert sent[1]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a":17,"b":58}'}


def test_without_the_reader_the_same_reply_is_a_text_answer() -> None:
    """The reader is opt-in: the bare provider ends the run with the JSON as its answer."""
    handler = _replies('{"name": "add", "arguments": {"a": 17, "b": 58}}')

    async def main() -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await Agent(_model(client), tools=[add]).run("What is 17 + 58?")

    result = asyncio.run(main())
    assert result.tool_executions == 0 and result.output.startswith('{"name"')


def test_a_structured_call_or_tool_choice_none_is_never_read_again() -> None:
    """A response that already carries calls is passed through as it is, and so is a reply to
    a request that forbids tools."""
    text = '{"name": "add", "arguments": {"a": 1, "b": 2}}'

    def handler(request: httpx.Request) -> httpx.Response:
        calls = [] if json.loads(request.content).get("tool_choice") else [("c1", "add", {"a": 5})]
        return httpx.Response(200, json=openai_json(WireTurn(text=text, calls=calls), model="m"))

    async def main(choice: Any) -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            request = ModelRequest(
                messages=(Message.user("?"),), tools=(ADD_DEFINITION,), tool_choice=choice
            )
            return await TextToolCalls(_model(client)).complete(request)

    with_calls = asyncio.run(main(None))
    assert [c.id for c in with_calls.message.tool_calls] == ["c1"]
    assert with_calls.message.text == text
    forbidden = asyncio.run(main("none"))
    assert not forbidden.message.tool_calls and forbidden.message.text == text


def test_streamed_from_the_loopback_server_the_final_response_carries_the_call() -> None:
    """Against the loopback server, a streamed reply whose content is a tagged call ends in a
    response with the recovered call."""
    text = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'

    def handler(request: Any) -> Any:
        return json_reply(openai_json(WireTurn(text=text), model="local"))

    async def main() -> Any:
        async with ProviderServer(handler) as server, httpx.AsyncClient() as client:
            model = TextToolCalls(_model(client, f"{server.url}/v1"))
            request = ModelRequest(messages=(Message.user("2 + 3?"),), tools=(ADD_DEFINITION,))
            return [item async for item in model.stream(request)][-1]

    response = asyncio.run(main())
    (call,) = response.message.tool_calls
    assert (call.name, call.arguments, is_recovered(call)) == ("add", {"a": 2, "b": 3}, True)
    assert response.message.text in (None, "")


def test_wrapping_something_that_is_not_a_model_is_refused() -> None:
    """A clear ConfigurationError names what TextToolCalls expects."""
    with pytest.raises(ConfigurationError, match=r"fsm_agent\.Model"):
        TextToolCalls("openai:gpt-4o")  # type: ignore[arg-type]
