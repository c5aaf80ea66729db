"""Request bodies judged by the official ``openai`` SDK's own request types (its ``TypedDict``s),
for the Responses and the Chat Completions APIs.

The SDK describes every request it can send as typed dictionaries generated from the API's
specification; a body that fits none of them is one the SDK could not have built. Each check
validates with pydantic, strictly (no coercion) and refusing keys the types do not list, and
reads through the ``Iterable`` fields pydantic validates lazily, so every nested item is judged.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from pydantic import ConfigDict, TypeAdapter, ValidationError

__all__ = ["chat_faults", "responses_faults"]

_STRICT = ConfigDict(extra="forbid", strict=True)


@cache
def _adapters() -> tuple[TypeAdapter[Any], TypeAdapter[Any], TypeAdapter[Any], TypeAdapter[Any]]:
    """Adapters for a whole body (not streamed, streamed), one input item and one tool."""
    pytest.importorskip("openai", reason="the SDK's types come with the [dev] extra")
    from openai.types.responses import FunctionToolParam, ResponseInputItemParam
    from openai.types.responses.response_create_params import (
        ResponseCreateParamsNonStreaming,
        ResponseCreateParamsStreaming,
    )

    # A TypedDict keeps its own config: wrapped in a list, the strict config reaches it and
    # every TypedDict nested in it.
    return (
        TypeAdapter(list[ResponseCreateParamsNonStreaming], config=_STRICT),
        TypeAdapter(list[ResponseCreateParamsStreaming], config=_STRICT),
        TypeAdapter(list[ResponseInputItemParam], config=_STRICT),  # type: ignore[valid-type]
        TypeAdapter(list[FunctionToolParam], config=_STRICT),
    )


@cache
def _chat_adapters() -> tuple[TypeAdapter[Any], TypeAdapter[Any], TypeAdapter[Any]]:
    """Adapters for a whole Chat Completions body (not streamed, streamed) and one message."""
    pytest.importorskip("openai", reason="the SDK's types come with the [dev] extra")
    from openai.types.chat import ChatCompletionMessageParam
    from openai.types.chat.completion_create_params import (
        CompletionCreateParamsNonStreaming,
        CompletionCreateParamsStreaming,
    )

    return (
        TypeAdapter(list[CompletionCreateParamsNonStreaming], config=_STRICT),
        TypeAdapter(list[CompletionCreateParamsStreaming], config=_STRICT),
        TypeAdapter(list[ChatCompletionMessageParam], config=_STRICT),  # type: ignore[valid-type]
    )


def _read_through(value: object) -> None:
    """Iterate every lazily validated ``Iterable`` in ``value`` (which validates its items)."""
    if isinstance(value, dict):
        for item in value.values():
            _read_through(item)
    elif isinstance(value, list | tuple) or type(value).__name__ == "ValidatorIterator":
        for item in value:  # type: ignore[attr-defined]
            _read_through(item)


def _fault(adapter: TypeAdapter[Any], value: object) -> str | None:
    try:
        _read_through(adapter.validate_python([value]))
    except ValidationError as exc:
        return f"{exc.error_count()} errors, the first: {exc.errors()[0]['msg']}"
    return None


def responses_faults(body: dict[str, Any]) -> list[str]:
    """What the SDK's types find wrong in a Responses request ``body``: each input item and
    each tool that fits none of its types (named by index), then the body as a whole."""
    whole, streamed, item, tool = _adapters()
    faults = [
        f"input[{i}] {value!r}: {fault}"
        for i, value in enumerate(body.get("input", []))
        if (fault := _fault(item, value))
    ]
    faults += [
        f"tools[{i}] {value!r}: {fault}"
        for i, value in enumerate(body.get("tools", []))
        if value.get("type") == "function" and (fault := _fault(tool, value))
    ]
    fault = _fault(streamed if body.get("stream") else whole, body)
    return [*faults, f"the body: {fault}"] if fault else faults


def chat_faults(body: dict[str, Any]) -> list[str]:
    """What the SDK's types find wrong in a Chat Completions request ``body``: each message
    that fits none of its types (named by index), then the body as a whole."""
    whole, streamed, message = _chat_adapters()
    faults = [
        f"messages[{i}] {value!r}: {fault}"
        for i, value in enumerate(body.get("messages", []))
        if (fault := _fault(message, value))
    ]
    fault = _fault(streamed if body.get("stream") else whole, body)
    return [*faults, f"the body: {fault}"] if fault else faults
