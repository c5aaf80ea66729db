"""Anthropic prompt caching: cache breakpoints on what the next request repeats.

An agent loop sends the same tools, the same system prompt and a history that only grows, call
after call. Anthropic caches a request's prefix up to each block marked with ``cache_control``
(at most four per request): a later request that starts with a cached prefix pays a tenth of the
input price for it, and writing a prefix costs a quarter more than sending it once (five-minute
entries). Three breakpoints are marked:

- the last tool: the tools are the first part of every request;
- the system prompt: tools and instructions are the same for every call of the agent, across
  runs too;
- the last block of the last message: the next call of the run repeats the whole history and
  reads it back (its blocks after this one are new). Thinking blocks cannot be marked, so the
  last block that can is.

A prefix shorter than the model's minimum (1,024 tokens or more, by model) is not cached and
costs nothing extra.
"""

from __future__ import annotations

from ._assembly import JSONObject

__all__ = ["mark_cache_breakpoints"]

_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def _ephemeral() -> JSONObject:
    return {"type": "ephemeral"}


def mark_cache_breakpoints(body: JSONObject) -> None:
    """Mark the cache breakpoints of a freshly built Messages ``body``, in place: the last
    tool, the system prompt (as one text block) and the last block of the last message."""
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        tools[-1] = {**tools[-1], "cache_control": _ephemeral()}
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": _ephemeral()}]
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return
    content = messages[-1].get("content")
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
