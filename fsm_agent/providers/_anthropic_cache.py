"""Anthropic prompt caching: cache breakpoints on what the next request repeats.

An agent loop sends the same tools, the same system prompt and a history that only grows, call
after call. Anthropic caches a request's prefix up to each block marked with ``cache_control``
(at most four per request): a later request that starts with a cached prefix pays a tenth of the
input price for it, and writing a prefix costs a quarter more than sending it once (five-minute
entries). A breakpoint finds an earlier entry only at its own block or at one of the 20 or so
block boundaries before it. Four breakpoints are marked:

- the last tool: the tools are the first part of every request;
- the system prompt: tools and instructions are the same for every call of the agent, across
  runs too;
- the last block of the last message: the next call of the run repeats the whole history and
  reads it back (its blocks after this one are new);
- the last block of the message before the last assistant turn, where the previous call's
  request ended: that call wrote its entry there, so this one reads it however many blocks the
  turn since added (a turn of 12 parallel calls adds 24, beyond the lookback).

Thinking blocks cannot be marked, so the last block of a message that can is.
A prefix shorter than the model's minimum (1,024 tokens or more, by model) is not cached and
costs nothing extra.
"""

from __future__ import annotations

from ._assembly import JSONObject

__all__ = ["mark_cache_breakpoints"]

_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def _ephemeral() -> JSONObject:
    return {"type": "ephemeral"}


def _mark_last_block(message: object) -> None:
    """Mark the last block of ``message`` that can carry a breakpoint, in place."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return
    for index in range(len(content) - 1, -1, -1):
        block = content[index]
        if not isinstance(block, dict) or block.get("type") in _UNMARKABLE:
            continue
        if block.get("type") == "text" and not block.get("text"):
            continue  # an empty text block cannot be marked
        content[index] = {**block, "cache_control": _ephemeral()}
        return


def _previous_end(messages: list[object]) -> int | None:
    """The index of the message the previous call's request ended with: the one before the
    last assistant turn (``None`` before the first answer)."""
    for index in range(len(messages) - 1, 0, -1):
        message = messages[index]
        if isinstance(message, dict) and message.get("role") == "assistant":
            return index - 1
    return None


def mark_cache_breakpoints(body: JSONObject) -> None:
    """Mark the cache breakpoints of a freshly built Messages ``body``, in place: the last
    tool, the system prompt (as one text block), the last block of the last message and of the
    message the previous call's request ended with."""
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        tools[-1] = {**tools[-1], "cache_control": _ephemeral()}
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": _ephemeral()}]
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return
    previous = _previous_end(messages)
    if previous is not None:
        _mark_last_block(messages[previous])
    _mark_last_block(messages[-1])
