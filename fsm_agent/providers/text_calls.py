"""Tool calls that a model wrote as text: an opt-in reader for small local models.

Many small models served by llama.cpp, Ollama or vLLM write a call as JSON in the message's
content (``{"name": ..., "arguments": ...}``, bare, in a code fence or in ``<tool_call>`` tags)
instead of the server's structured ``tool_calls`` field, so the agent would see a text answer.
:class:`TextToolCalls` wraps any model and, when a response carries no tool call, reads such calls
from its text, keeps only those that name a tool the request declared with a JSON object of
arguments, and marks each one as recovered.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

from pydantic import JsonValue

from ..errors import ConfigurationError
from ..models import Model
from ..values.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    Part,
    StreamDelta,
    TextPart,
    ToolCall,
)
from .fallback import stream_of

__all__ = ["RECOVERED_KEY", "TextToolCalls", "is_recovered", "read_text_calls"]

RECOVERED_KEY = "recovered_from"
"""The key of a recovered call's ``provider_data``; its value is ``"text"``."""

_LOG = logging.getLogger("fsm_agent")
_DECODER = json.JSONDecoder()
_START = re.compile(r"[{\[]")
# What wraps a call once its JSON is taken out: tags, code fences (with a language) and blanks.
_WRAPPING = re.compile(r"</?tool_call>|```[A-Za-z]*", re.IGNORECASE)


def is_recovered(call: ToolCall) -> bool:
    """Whether ``call`` was read from the text of a response by :class:`TextToolCalls`."""
    return (call.provider_data or {}).get(RECOVERED_KEY) == "text"


def _json_values(text: str) -> Iterator[tuple[int, int, object]]:
    """Each top-level JSON object or array in ``text``: its start, its end and its value."""
    position = 0
    while (found := _START.search(text, position)) is not None:
        try:
            value, end = _DECODER.raw_decode(text, found.start())
        except json.JSONDecodeError:
            position = found.start() + 1
            continue
        yield found.start(), end, value
        position = end


def _as_call(value: object, declared: frozenset[str]) -> ToolCall | None:
    """``value`` as a call of a declared tool, or ``None`` when it is not one."""
    if not isinstance(value, dict):
        return None
    fields: dict[str, object] = value
    nested = fields.get("function")
    if isinstance(nested, dict):  # {"function": {"name": ..., "arguments": ...}}
        fields = nested
    name = fields.get("name")
    arguments = fields.get("arguments", fields.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(name, str) or name not in declared or not isinstance(arguments, dict):
        return None
    typed: dict[str, JsonValue] = arguments
    return ToolCall.create(
        f"call_text_{uuid.uuid4().hex[:12]}", name, typed, {RECOVERED_KEY: "text"}
    )


def read_text_calls(text: str, declared: frozenset[str]) -> tuple[list[ToolCall], str]:
    """The calls of declared tools written in ``text``, and the text left once they and their
    wrapping (tags, code fences) are taken out. No call found: ``([], text)``."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    position = 0
    for start, end, value in _json_values(text):
        items = value if isinstance(value, list) else [value]
        found = [_as_call(item, declared) for item in items]
        if not found or any(call is None for call in found):
            continue  # JSON that is not (only) calls stays text
        calls.extend(call for call in found if call is not None)
        kept.append(text[position:start])
        position = end
    if not calls:
        return [], text
    kept.append(text[position:])
    rest = _WRAPPING.sub("", "".join(kept)).strip()
    # Stray braces around a call (some templates show the format as {{"name": ...}}) are not text.
    return calls, "" if not rest.strip("{}[] \n") else rest


def _recovered(response: ModelResponse, request: ModelRequest) -> ModelResponse:
    """``response`` with the calls its text holds, when it has no call and may have one."""
    message = response.message
    if (
        not request.tools
        or request.tool_choice == "none"
        or message.tool_calls
        or response.finish_reason not in (FinishReason.STOP, FinishReason.OTHER)
    ):
        return response
    declared = frozenset(t.name for t in request.tools)
    calls, rest = read_text_calls(message.text or "", declared)
    if not calls:
        return response
    _LOG.info(
        "recovered %d tool call(s) from the text of a %s response: %s",
        len(calls),
        response.model_name or "model",
        ", ".join(call.name for call in calls),
    )
    parts: list[Part] = [p for p in message.parts if not isinstance(p, TextPart)]
    if rest:
        parts.append(TextPart(text=rest))
    parts.extend(calls)
    return replace(
        response,
        message=Message(role=message.role, parts=tuple(parts)),
        finish_reason=FinishReason.TOOL_CALLS,
    )


class TextToolCalls:
    """``model``, with tool calls read from the text of responses that carry none.

    Opt in for a local model that writes its calls as JSON in its answer; a hosted API that
    fills the structured field needs no reader. A recovered call names a tool the request
    declared and has a JSON object of arguments (the tool still validates them); its
    ``provider_data`` is ``{"recovered_from": "text"}`` (see :func:`is_recovered`), so it shows
    as recovered in the response event, the run's messages and its trace. The response's
    ``finish_reason`` becomes ``tool_calls``; ``raw_finish_reason`` keeps the server's. The
    JSON of the calls is taken out of the text; any other text stays. Streamed deltas pass
    through as the model sent them: only the final response carries the calls.

    >>> from fsm_agent.testing import ScriptedModel
    >>> TextToolCalls(ScriptedModel([])).name
    'text-calls(scripted)'
    """

    def __init__(self, model: Model) -> None:
        if not callable(getattr(model, "complete", None)):
            raise ConfigurationError(
                f"TextToolCalls wraps a model implementing fsm_agent.Model (with complete()); "
                f"got {type(model).__name__}"
            )
        self._model = model

    @property
    def model(self) -> Model:
        """The wrapped model."""
        return self._model

    @property
    def name(self) -> str:
        """``text-calls(<the wrapped model's name>)``."""
        return f"text-calls({getattr(self._model, 'name', type(self._model).__name__)})"

    @property
    def context_window(self) -> int | None:
        """The wrapped model's context window."""
        window: int | None = getattr(self._model, "context_window", None)
        return window

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One call of the wrapped model, with the calls its text holds."""
        return _recovered(await self._model.complete(request), request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """The wrapped model's stream; its final response carries the calls its text holds."""
        async for item in stream_of(self._model, request):
            yield _recovered(item, request) if isinstance(item, ModelResponse) else item
