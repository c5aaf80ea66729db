"""The provider conformance suite: the same claims, checked against every model implementation.

Each test runs over every backend in :data:`BACKENDS` and over both paths (``complete`` and
``stream``). A backend turns a neutral :class:`~provider_server.Turn` into a model answering it
(a provider talking HTTP to a :class:`~provider_server.ProviderServer`, or the in-process
``ScriptedModel``) and reads back what the model sent. A new backend added to :data:`BACKENDS`
runs every conformance test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from conformance import (
    Backend,
    ConformanceClaims,
    Session,
    anthropic_results,
    anthropic_system,
    gemini_results,
    gemini_system,
    neutral_results,
    neutral_system,
    openai_results,
    openai_system,
    responses_results,
    responses_system,
)
from conftest_network import no_external_network  # noqa: F401
from fsm_agent.messages import (
    FinishReason,
    Message,
    ModelResponse,
    ToolCall,
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
    gemini_json,
    gemini_sse,
    json_reply,
    openai_json,
    openai_sse,
    sse_reply,
)
from responses_wire import responses_json, responses_sse


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
        system_prompt_of=openai_system,
        tool_results_of=openai_results,
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
        system_prompt_of=responses_system,
        tool_results_of=responses_results,
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
        system_prompt_of=anthropic_system,
        tool_results_of=anthropic_results,
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
        system_prompt_of=gemini_system,
        tool_results_of=gemini_results,
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
        system_prompt_of=neutral_system,
        tool_results_of=neutral_results,
        finishes={reason: Turn(text="x", finish=reason.value) for reason in FinishReason},
    ),
]


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn."""
    result: Backend = request.param
    return result


class TestConformance(ConformanceClaims):
    """Every conformance claim, against every backend of :data:`BACKENDS`."""
