"""Scripted test doubles: a model that replays turns, its turn builders, a virtual clock.

:mod:`fsm_agent.testing` offers them to your tests (with ``fuzz_agent``); replay, the fuzzer
and the demo import them from here, a module that sits with the models, below all three in the
import graph (the package's lazy ``__init__`` loads nothing when this module is imported).

``ScriptedModel`` replays a list of turns, one per model call, and records every request it
receives (it is a :class:`ScriptPlayer`, as the fuzzer's and the replay's models are). Build
turns with :func:`text`, :func:`answer` (a typed-output agent's answer), :func:`tool_call`,
:func:`tool_calls`, :func:`finish` and :func:`fail`::

    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue, TypeAdapter

from ..errors import ModelError, ProviderServerError
from ..values.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningPart,
    StreamDelta,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
    Usage,
)

__all__ = [
    "DEFAULT_USAGE",
    "Failure",
    "ScriptExhaustedError",
    "ScriptPlayer",
    "ScriptedModel",
    "StreamingScriptPlayer",
    "Turn",
    "VirtualClock",
    "answer",
    "fail",
    "finish",
    "text",
    "tool_call",
    "tool_calls",
    "with_call_ids",
]

DEFAULT_USAGE = Usage(requests=1, input_tokens=10, output_tokens=5)


@dataclass(frozen=True, slots=True)
class Failure:
    """A scripted turn that raises ``error`` instead of answering."""

    error: BaseException


Turn = ModelResponse | Failure


class ScriptExhaustedError(ModelError):
    """The model was called more often than its script has turns (never retried)."""


def text(content: str, *, reasoning: str | None = None, usage: Usage = DEFAULT_USAGE) -> Turn:
    """A final answer (finish reason ``stop``), optionally with reasoning."""
    parts: list[TextPart | ReasoningPart] = []
    if reasoning is not None:
        parts.append(ReasoningPart(text=reasoning))
    parts.append(TextPart(text=content))
    message = Message(role=Message.assistant().role, parts=tuple(parts))
    return ModelResponse(
        message=message, finish_reason=FinishReason.STOP, raw_finish_reason="stop", usage=usage
    )


def answer(value: Any, *, usage: Usage = DEFAULT_USAGE) -> Turn:
    """A typed-output answer: ``value`` (a pydantic model, a dataclass, a dict, a scalar, ...)
    as the JSON text a provider's structured output gives. A scalar or a list must be given as
    the wrapped object, ``{"value": ...}``, as a model asked for it would answer."""
    return text(TypeAdapter(Any).dump_json(value).decode(), usage=usage)


def tool_call(
    name: str,
    args: Mapping[str, Any] | str | None = None,
    *,
    id: str | None = None,
    text: str = "",
    usage: Usage = DEFAULT_USAGE,
) -> Turn:
    """One tool call (finish reason ``tool_calls``); ``args`` as a dict, or a raw string to
    script malformed JSON. Without ``id``, the model assigns ``call_<turn>_<index>``."""
    return tool_calls((name, args if args is not None else {}, id), text=text, usage=usage)


def tool_calls(
    *calls: tuple[str, Mapping[str, Any] | str] | tuple[str, Mapping[str, Any] | str, str | None],
    text: str = "",
    usage: Usage = DEFAULT_USAGE,
) -> Turn:
    """Several tool calls in one turn: ``(name, args)`` or ``(name, args, id)`` each."""
    built = [
        ToolCall.create(call[2] if len(call) > 2 and call[2] else "", call[0], _args(call[1]))
        for call in calls
    ]
    return ModelResponse(
        message=Message.assistant(text, built),
        finish_reason=FinishReason.TOOL_CALLS,
        raw_finish_reason="tool_calls",
        usage=usage,
    )


def _args(args: Mapping[str, Any] | str) -> dict[str, JsonValue] | str:
    # Scripts take any mapping (mixed literals type-check as written), calls hold a dict.
    return args if isinstance(args, str) else dict(args)


def finish(
    reason: FinishReason | str,
    text: str = "",
    *,
    tool_calls: Sequence[tuple[str, Mapping[str, Any] | str]] = (),
    raw_reason: str | None = None,
    usage: Usage = DEFAULT_USAGE,
) -> Turn:
    """A turn with any finish reason (``stop``, ``tool_calls``, ``length``,
    ``content_filter``, ``error``, ``other``; an unknown string maps to ``other``)."""
    try:
        normalised = FinishReason(reason)
    except ValueError:
        normalised = FinishReason.OTHER
    calls = [ToolCall.create("", name, _args(args)) for name, args in tool_calls]
    return ModelResponse(
        message=Message.assistant(text, calls),
        finish_reason=normalised,
        raw_finish_reason=raw_reason or str(reason),
        usage=usage,
    )


def fail(error: BaseException | str = "scripted server error") -> Turn:
    """A turn that raises: a given exception, or a retryable :class:`ProviderServerError`."""
    if isinstance(error, str):
        error = ProviderServerError(error, status_code=500)
    return Failure(error)


def with_call_ids(response: ModelResponse, index: int) -> ModelResponse:
    """``response`` with each unnamed tool call named ``call_<index>_<position>`` (``index``:
    the request's number), so that every call of a run has an id the history can answer."""
    if all(c.id for c in response.message.tool_calls):
        return response
    parts = tuple(
        p.model_copy(update={"id": f"call_{index}_{i}"})
        if isinstance(p, ToolCall) and not p.id
        else p
        for i, p in enumerate(response.message.parts)
    )
    message = response.message.model_copy(update={"parts": parts})
    return response.model_copy(update={"message": message})


class ScriptPlayer:
    """A model that answers request ``n`` with :meth:`next_turn` ``(n)``: the one player behind
    :class:`ScriptedModel`, the fuzzer's models and the replay model, each of which only says
    where its next turn comes from.

    ``requests`` keeps every request (unless ``keep_requests`` is false: benchmarks and soak runs,
    where the record would dominate memory); ``calls`` counts them.
    """

    def __init__(
        self, *, name: str, context_window: int | None = None, keep_requests: bool = True
    ) -> None:
        self._name = name
        self._context_window = context_window
        self.keep_requests = keep_requests
        self.requests: list[ModelRequest] = []
        self.calls = 0

    @property
    def name(self) -> str:
        """The model's name in events and traces."""
        return self._name

    @property
    def context_window(self) -> int | None:
        """The declared context window (``None``: unknown)."""
        return self._context_window

    def next_turn(self, index: int) -> Turn:
        """The turn that answers request ``index`` (from 0); raise to refuse the request."""
        raise NotImplementedError

    def play(self, request: ModelRequest) -> ModelResponse:
        """Record ``request`` and answer it with the next turn (raising a scripted failure)."""
        index = self.calls
        self.calls += 1
        if self.keep_requests:
            self.requests.append(request)
        turn = self.next_turn(index)
        if isinstance(turn, Failure):
            raise turn.error
        return with_call_ids(turn, index)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Play the next turn."""
        await asyncio.sleep(0)
        return self.play(request)


class StreamingScriptPlayer(ScriptPlayer):
    """A :class:`ScriptPlayer` that also streams: the text in ``chunk_size`` fragments, then each
    tool call's id and name and its arguments in ``argument_fragments`` pieces, then the
    response."""

    chunk_size: int = 8
    argument_fragments: int = 1

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Play the next turn as fragments, then the response."""
        response = self.play(request)
        await asyncio.sleep(0)
        text = response.message.text
        for start in range(0, len(text), self.chunk_size):
            yield TextDelta(text=text[start : start + self.chunk_size])
        pieces = self.argument_fragments
        for index, call in enumerate(response.message.tool_calls):
            yield ToolCallDelta(index=index, id=call.id, name=call.name)
            arguments = call.arguments_json
            cuts = [len(arguments) * i // pieces for i in range(pieces + 1)]
            for start, end in itertools.pairwise(cuts):
                yield ToolCallDelta(index=index, arguments_fragment=arguments[start:end])
        yield response


class ScriptedModel(StreamingScriptPlayer):
    """A model that replays ``turns`` in order and records every request in ``requests``.

    ``stream`` yields the answer in ``chunk_size``-character text deltas and per-call
    argument deltas, then the response, so streaming paths are exercised offline.
    ``calls`` counts the requests; ``keep_requests=False`` counts them without keeping them
    (``requests`` stays empty): for benchmarks and soak runs, where the record would dominate
    memory.
    """

    def __init__(
        self,
        turns: Sequence[Turn],
        *,
        name: str = "scripted",
        context_window: int | None = None,
        chunk_size: int = 8,
        keep_requests: bool = True,
    ) -> None:
        super().__init__(name=name, context_window=context_window, keep_requests=keep_requests)
        self.turns = list(turns)
        self.chunk_size = chunk_size

    @property
    def remaining(self) -> int:
        """Turns not yet played."""
        return len(self.turns) - self.calls

    def next_turn(self, index: int) -> Turn:
        """The script's turn ``index``; past its end, :class:`ScriptExhaustedError`."""
        if index >= len(self.turns):
            raise ScriptExhaustedError(
                f"the script has {len(self.turns)} turn(s) but the model was called "
                f"{index + 1} times; add turns to the ScriptedModel"
            )
        return self.turns[index]


class VirtualClock:
    """A clock whose ``sleep`` advances time instantly: pass ``clock.now`` and ``clock.sleep``
    to the agent's :class:`~fsm_agent.Runtime` and retry backoff takes no real time."""

    def __init__(self, start: float = 0.0) -> None:
        self.time = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        """The current virtual time in seconds."""
        return self.time

    async def sleep(self, seconds: float) -> None:
        """Advance the clock by ``seconds`` and yield to the loop once."""
        self.sleeps.append(seconds)
        self.time += max(0.0, seconds)
        await asyncio.sleep(0)
