"""Test doubles that fsm_agent's own tests use: a scripted model, its builders, a virtual clock.

``ScriptedModel`` replays a list of turns, one per model call, and records every request it
receives. Build turns with :func:`text`, :func:`tool_call`, :func:`tool_calls`, :func:`finish`
and :func:`fail`::

    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from .errors import MissingExtraError, ProviderServerError
from .messages import (
    FinishReason,
    Message,
    ModelResponse,
    ReasoningPart,
    TextPart,
    ToolCall,
    Usage,
)
from .scripted import Failure, ScriptExhaustedError, StreamingScriptPlayer, Turn

if TYPE_CHECKING:
    from .fuzzing import FuzzReport
    from .kernel.agent import Agent
    from .models import Model

__all__ = [
    "Failure",
    "ScriptExhaustedError",
    "ScriptedModel",
    "Turn",
    "VirtualClock",
    "fail",
    "finish",
    "fuzz_agent",
    "text",
    "tool_call",
    "tool_calls",
]

DEFAULT_USAGE = Usage(requests=1, input_tokens=10, output_tokens=5)


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


def fuzz_agent(
    make_agent: Callable[[Model], Agent[Any]],
    *,
    examples: int | None = None,
    seed: int | None = None,
    max_seconds: float | None = None,
) -> FuzzReport:
    """Fuzz your agent in your own test suite: one line, ``fuzz_agent(make_agent)``.

    ``make_agent(model)`` builds your agent (tools, hooks, verifier, policy) around the model
    it is given. Generated scripts run on the real kernel and every run invariant is
    checked after every run (see :mod:`fsm_agent.fuzzing`). Raises ``AssertionError`` with
    the shrunk case, as a ready-to-paste test, on a violation. ``examples`` defaults to the
    loaded hypothesis profile's ``max_examples``; ``seed`` to 0 when that profile is
    derandomized (as hypothesis's ``ci`` profile is), else random: this helper follows your
    suite's hypothesis profile, so it needs the ``[testing]`` extra.
    """
    try:
        from hypothesis import settings
    except ImportError:
        raise MissingExtraError("fuzz_agent", extra="testing", module="hypothesis") from None

    from .fuzzing import fuzz

    profile = settings.default
    assert profile is not None, "hypothesis always has a current profile"
    if seed is None and profile.derandomize:
        seed = 0
    report = fuzz(
        make_agent,
        examples=examples if examples is not None else profile.max_examples,
        seed=seed,
        max_seconds=max_seconds,
    )
    if report.failure is not None:
        raise AssertionError(report.format())
    return report
