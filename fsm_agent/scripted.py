"""Script players: models that answer each request from a list of turns, with no network.

One player serves every offline model of the package: the scripted model of
:mod:`fsm_agent.testing`, the fuzzer's models and the replay model. Each says only where its
next turn comes from (:meth:`ScriptPlayer.next_turn`); the player records the request, raises a
scripted failure, names the tool calls the script left unnamed, and, for a streaming player,
plays the answer as text and argument fragments before the response.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass

from .errors import ModelError
from .messages import (
    ModelRequest,
    ModelResponse,
    StreamDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
)

__all__ = [
    "Failure",
    "ScriptExhaustedError",
    "ScriptPlayer",
    "StreamingScriptPlayer",
    "Turn",
    "with_call_ids",
]


@dataclass(frozen=True, slots=True)
class Failure:
    """A scripted turn that raises ``error`` instead of answering."""

    error: BaseException


Turn = ModelResponse | Failure
"""One scripted answer: a response, or a failure the model call raises."""


class ScriptExhaustedError(ModelError):
    """The model was called more often than its script has turns (never retried)."""


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
    """A model that answers request ``n`` with :meth:`next_turn` ``(n)``.

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
