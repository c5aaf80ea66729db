"""The provider conformance claims, shared by every suite that runs them: a backend's shape
(:class:`Backend`), readers of each provider's request bodies, and :class:`ConformanceClaims`, the
tests themselves, which a test class runs by subclassing it and providing a ``backend`` fixture
(``tests/providers/test_providers_conformance.py`` against the loopback servers and the scripted
model, ``tests/e2e/test_e2e_llmock.py`` against llmock).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

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
)
from provider_server import Turn, collect, run

__all__ = [
    "SYSTEM",
    "Backend",
    "ConformanceClaims",
    "FinishScenarios",
    "Session",
    "answer",
    "anthropic_results",
    "anthropic_system",
    "gemini_results",
    "gemini_system",
    "neutral_results",
    "neutral_system",
    "openai_results",
    "openai_system",
    "request_of",
    "responses_results",
    "responses_system",
]

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


def neutral_system(request: ModelRequest) -> str | None:
    """The system prompt of a neutral request."""
    return request.system_prompt


def neutral_results(request: ModelRequest) -> list[tuple[str, str]]:
    """The (call id, content) of each tool result of a neutral request."""
    return [(r.call_id, r.content) for m in request.messages for r in m.tool_results]


def openai_system(body: Any) -> str | None:
    """The system prompt of a Chat Completions body (a first system or developer message)."""
    first = body["messages"][0]
    return first["content"] if first["role"] in ("system", "developer") else None


def openai_results(body: Any) -> list[tuple[str, str]]:
    """The (call id, content) of each tool message of a Chat Completions body."""
    return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]


def responses_system(body: Any) -> str | None:
    """The instructions of a Responses body (no system item in its input)."""
    assert all(i.get("role") != "system" for i in body["input"])
    return body.get("instructions")


def responses_results(body: Any) -> list[tuple[str, str]]:
    """The (call id, output) of each function call output of a Responses body."""
    return [
        (i["call_id"], i["output"])
        for i in body["input"]
        if i.get("type") == "function_call_output"
    ]


def anthropic_system(body: Any) -> str | None:
    """The system text of a Messages body (no system role among its messages)."""
    assert all(m["role"] in ("user", "assistant") for m in body["messages"])
    system = body.get("system")
    if isinstance(system, list):  # text blocks (a cache breakpoint needs one)
        return "".join(block["text"] for block in system)
    return system


def anthropic_results(body: Any) -> list[tuple[str, str]]:
    """The (tool use id, content) of each tool result block of a Messages body."""
    return [
        (b["tool_use_id"], b["content"])
        for m in body["messages"]
        if m["role"] == "user"
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


def gemini_system(body: Any) -> str | None:
    """The system instruction of a Gemini body (no other role than user and model)."""
    assert all(c["role"] in ("user", "model") for c in body["contents"])
    instruction = body.get("systemInstruction")
    return instruction["parts"][0]["text"] if instruction else None


def gemini_results(body: Any) -> list[tuple[str, str]]:
    """The (id or name, result) of each function response of a Gemini body."""
    out = []
    for content in body["contents"]:
        for part in content["parts"]:
            if "functionResponse" in part:
                response = part["functionResponse"]
                out.append((response.get("id", response["name"]), response["response"]["result"]))
    return out


SYSTEM = "You are terse."


def request_of(*extra: Message, tools: bool = True) -> ModelRequest:
    """A request with :data:`SYSTEM`, a user message, ``extra`` and the ``lookup`` tool."""
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


async def answer(backend: Backend, turns: Sequence[Turn], streaming: bool) -> ModelResponse:
    """The backend's answer to ``turns``, by ``complete`` or by ``stream``."""
    async with backend.open(turns) as session:
        if streaming:
            deltas, response = await collect(session.model, request_of())
            streamed = "".join(d.text for d in deltas if isinstance(d, TextDelta))
            assert streamed == response.message.text
            return response
        response = await session.model.complete(request_of())
        assert isinstance(response, ModelResponse)
        return response


paths = pytest.mark.parametrize("streaming", [False, True], ids=["complete", "stream"])


class ConformanceClaims:
    """The claims every model implementation meets. A test class that subclasses this one and
    provides a ``backend`` fixture (a :class:`Backend`) runs them all against that backend; it may
    set a claim to ``None`` when its backend cannot be made to show it."""

    @paths
    def test_text_answer(self, backend: Backend, streaming: bool) -> None:
        """A plain answer comes back as one assistant text with finish ``stop``."""
        response = run(answer(backend, [Turn(text="Hello there, friend!")], streaming))
        assert response.message.role is Role.ASSISTANT
        assert response.message.text == "Hello there, friend!"
        assert response.message.tool_calls == []
        assert response.finish_reason is FinishReason.STOP

    @paths
    def test_one_tool_call(self, backend: Backend, streaming: bool) -> None:
        """A single tool call is assembled with its name, parsed arguments and an id."""
        turn = Turn(calls=[("call_1", "lookup", {"q": "fsm", "n": 2})])
        response = run(answer(backend, [turn], streaming))
        assert response.finish_reason is FinishReason.TOOL_CALLS
        [call] = response.message.tool_calls
        assert call.name == "lookup"
        assert call.arguments == {"q": "fsm", "n": 2}
        assert json.loads(call.arguments_json) == {"q": "fsm", "n": 2}
        assert call.id
        if backend.ids_from_server and backend.scripted_ids:
            assert call.id == "call_1"

    @paths
    def test_parallel_tool_calls(self, backend: Backend, streaming: bool) -> None:
        """Two calls in one turn come back in order, with distinct ids and their own arguments."""
        turn = Turn(
            text="Checking both.",
            calls=[("call_a", "lookup", {"q": "a"}), ("call_b", "lookup", {"q": "b" * 40})],
        )
        response = run(answer(backend, [turn], streaming))
        assert response.finish_reason is FinishReason.TOOL_CALLS
        calls = response.message.tool_calls
        assert [c.arguments for c in calls] == [{"q": "a"}, {"q": "b" * 40}]
        assert len({c.id for c in calls}) == 2
        assert response.message.text == "Checking both."

    @paths
    def test_tool_result_round_trip(self, backend: Backend, streaming: bool) -> None:
        """A tool result sent back is linked to its call's id and the model answers with text."""

        async def scenario() -> tuple[ModelResponse, list[tuple[str, str]]]:
            turns = [Turn(calls=[("call_9", "lookup", {"q": "x"})]), Turn(text="It is x.")]
            async with backend.open(turns) as session:
                first = await session.model.complete(request_of())
                [call] = first.message.tool_calls
                result = ToolResult(call_id=call.id, name=call.name, content="x means x")
                follow = request_of(first.message, Message.tool(result))
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
    def test_every_finish_reason(
        self, backend: Backend, streaming: bool, reason: FinishReason
    ) -> None:
        """Each normalised finish reason is reported for the backend's corresponding raw signal."""
        if reason not in backend.finishes:
            pytest.skip(f"{backend.name} cannot be made to report {reason.value}")
        response = run(answer(backend, [backend.finishes[reason]], streaming))
        assert response.finish_reason is reason
        assert response.raw_finish_reason is not None
        if reason is not FinishReason.TOOL_CALLS:
            assert response.message.tool_calls == []

    @paths
    def test_usage(self, backend: Backend, streaming: bool) -> None:
        """Token usage of the call is reported, counted as one request."""
        response = run(answer(backend, [Turn(text="ok", usage=(123, 45))], streaming))
        assert response.usage.requests == 1
        assert (response.usage.input_tokens, response.usage.output_tokens) == (123, 45)

    def test_system_prompt_placement(self, backend: Backend) -> None:
        """The system prompt is sent once, where the provider expects instructions."""

        async def scenario() -> str | None:
            async with backend.open([Turn(text="ok")]) as session:
                await session.model.complete(request_of())
                return backend.system_prompt_of(session.sent()[-1])

        assert run(scenario()) == SYSTEM

    def test_streaming_equals_complete(self, backend: Backend) -> None:
        """Streaming and non-streaming calls for the same turn give the same response."""
        turn = Turn(
            text="Let me look.",
            calls=[("call_1", "lookup", {"q": "é ü \u2028"}), ("call_2", "lookup", {})],
            usage=(50, 9),
        )

        async def scenario() -> tuple[ModelResponse, ModelResponse, list[Any]]:
            async with backend.open([turn, turn]) as session:
                plain = await session.model.complete(request_of())
                deltas, streamed = await collect(session.model, request_of())
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
            return [
                p.model_copy(update=blank) if isinstance(p, ToolCall) else p for p in message.parts
            ]

        assert canonical(streamed.message) == canonical(plain.message)
        assert (streamed.finish_reason, streamed.usage) == (plain.finish_reason, plain.usage)
        fragments: dict[int, str] = {}
        for delta in deltas:
            if isinstance(delta, ToolCallDelta):
                fragments[delta.index] = fragments.get(delta.index, "") + delta.arguments_fragment
        assert [fragments[i] for i in sorted(fragments)] == [
            c.arguments_json for c in streamed.message.tool_calls
        ]
