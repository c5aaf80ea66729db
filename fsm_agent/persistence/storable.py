"""Text a durable run can store: what JSON cannot carry is replaced, and the history says so.

A model or a tool may produce text with lone surrogates (a file name decoded with
``os.fsdecode``, a ``"\\udcff"`` escape from the wire). Python strings hold them, but neither
JSON nor UTF-8 can: a run that kept one could never be checkpointed. A durable run replaces each
with U+FFFD (the replacement character) as the answer enters the run, and adds a note saying
how many were replaced, so that what the model reads, what is stored and what a resumed run
sees are the same text.
"""

from __future__ import annotations

import re
from typing import Any

from ..run.state import RunState
from ..values.messages import Message, ModelResponse, ToolResult

__all__ = [
    "NOTE",
    "storable_data",
    "storable_message",
    "storable_response",
    "storable_result",
    "storable_state",
    "storable_text",
]

_LONE = re.compile("[\ud800-\udfff]")

NOTE = (
    "[fsm_agent: {n} character(s) that cannot be stored (lone surrogates) were replaced "
    "with U+FFFD]"
)
"""The note added to a text whose characters were replaced."""


def storable_text(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD, and how many were."""
    if text.isascii():
        return text, 0
    return _LONE.subn("\ufffd", text)


def _walk(value: Any) -> tuple[Any, int]:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        total = 0
        fixed: dict[Any, Any] = {}
        for key, item in value.items():
            new_key, n_key = _walk(key)
            new_item, n_item = _walk(item)
            fixed[new_key] = new_item
            total += n_key + n_item
        return fixed, total
    if isinstance(value, list | tuple):
        items = [_walk(item) for item in value]
        return type(value)(item for item, _ in items), sum(n for _, n in items)
    return value, 0


def storable_data(value: Any) -> Any:
    """``value`` (plain data: dicts, lists, tuples, strings, numbers) with every lone surrogate
    in its strings and keys replaced, and no note: for what is written once, as it is."""
    return _walk(value)[0]


def storable_result(result: ToolResult) -> ToolResult:
    """``result`` unchanged when it can be stored; else with its text replaced and the note
    appended to its content."""
    content, replaced = storable_text(result.content)
    metadata, in_metadata = _walk(result.metadata) if result.metadata else ({}, 0)
    total = replaced + in_metadata
    rich = bool(result.parts) or result.structured is not None
    data, in_rich = _walk(result.model_dump(include={"parts", "structured"})) if rich else ({}, 0)
    total += in_rich
    if not total:
        return result
    note = NOTE.format(n=total)
    if not in_rich:
        return result.model_copy(update={"content": f"{content}\n{note}", "metadata": metadata})
    whole = {**result.model_dump(), **data, "content": f"{content}\n{note}", "metadata": metadata}
    return ToolResult.model_validate(whole)


def storable_response(response: ModelResponse) -> ModelResponse:
    """``response`` with every lone surrogate replaced, and the note added to its text (or as a
    text of its own when it has none)."""
    data, total = _walk(response.model_dump())
    if not total:
        return response
    note = NOTE.format(n=total)
    parts = data["message"]["parts"]
    for part in parts:
        if part.get("type") == "text":
            part["text"] = f"{part['text']}\n{note}"
            break
    else:  # only tool calls (the text was in their arguments): the note is a text of its own
        data["message"]["parts"] = [*parts, {"type": "text", "text": note}]
    return ModelResponse.model_validate(data)


def storable_message(message: Message) -> Message:
    """``message`` (a prompt) with every lone surrogate replaced, and the note added."""
    data, total = _walk(message.model_dump())
    if not total:
        return message
    data["parts"] = [*data["parts"], {"type": "text", "text": NOTE.format(n=total)}]
    return Message.model_validate(data)


def storable_state(state: RunState) -> RunState:
    """A copy of ``state`` with every lone surrogate replaced: the last resort of a store, for
    text that reached the run state another way than a model's answer or a tool's result (an
    exception's message kept as the run's error, say)."""
    data, _ = _walk(state.model_dump())
    return RunState.model_validate(data)
