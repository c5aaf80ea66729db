"""Tool output limits.

A result longer than ``Policy.tool_output.max_chars`` enters the history cut to that length,
with a marker that says how much is missing and how to read it; the full text stays in the
run's store (:attr:`~fsm_agent.RunState.tool_outputs`). Once the store holds something, the
model is offered the built-in ``read_tool_output`` tool, which pages through it. With
``keep_recent`` set, before each model call the results older than the newest ``keep_recent``
are cut to ``old_max_chars`` the same way. Only contents change: every call keeps its result.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..values.messages import Message, Role, ToolResult
from . import Tool, ToolContext

if TYPE_CHECKING:
    from ..run.state import RunState

__all__ = ["PAGER_NAME", "cut_result", "pager_tool", "trim_old_outputs"]

PAGER_NAME = "read_tool_output"
"""The name of the built-in paging tool."""


def _marker(call_id: str, shown: int, total: int) -> str:
    return (
        f"\n\n[output cut: showing {shown} of {total} characters. Call {PAGER_NAME}"
        f'(call_id="{call_id}", offset={shown}) to read more.]'
    )


def cut_result(
    store: dict[str, str], result: ToolResult, max_chars: int, *, old: bool = False
) -> ToolResult:
    """``result`` cut to ``max_chars`` characters plus a marker, its full text kept in
    ``store``; unchanged when it is short enough."""
    content = result.content
    full = store.get(result.call_id, content) if result.metadata.get("cut") else content
    if len(content) <= max_chars or (old and result.metadata.get("old")):
        return result
    store.setdefault(result.call_id, full)
    metadata = {**result.metadata, "cut": True, "total_chars": len(full)}
    if old:
        metadata["old"] = True
    return result.model_copy(
        update={
            "content": full[:max_chars] + _marker(result.call_id, max_chars, len(full)),
            "metadata": metadata,
        }
    )


def trim_old_outputs(
    rs: RunState, count_tokens: Callable[[Message], int], keep_recent: int, old_max_chars: int
) -> None:
    """Cut every tool result of ``rs`` older than the newest ``keep_recent`` to
    ``old_max_chars``, keeping ``rs.context_tokens`` as ``count_tokens`` counts.

    Walks back from the newest message and stops at the first result an earlier call already
    cut this way, so a long history is not rescanned once its old outputs are trimmed.
    """
    messages = rs.messages
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role is not Role.TOOL:
            continue
        seen += 1
        if seen <= keep_recent:
            continue
        parts = message.parts
        if any(isinstance(p, ToolResult) and p.metadata.get("old") for p in parts):
            return
        new_parts = tuple(
            cut_result(rs.tool_outputs, p, old_max_chars, old=True)
            if isinstance(p, ToolResult)
            else p
            for p in parts
        )
        if any(a is not b for a, b in zip(new_parts, parts, strict=True)):
            replacement = Message(role=Role.TOOL, parts=new_parts)
            rs.context_tokens += count_tokens(replacement) - count_tokens(message)
            messages[index] = replacement


@functools.lru_cache(maxsize=8)
def pager_tool(page_chars: int) -> Tool:
    """The built-in ``read_tool_output`` tool, reading pages of at most ``page_chars``.
    (Cached: building a tool's schema costs milliseconds, and every agent offers one.)"""

    def read_tool_output(context: ToolContext[object], call_id: str, offset: int = 0) -> str:
        """Read the full output of an earlier tool call whose result was cut, one page at a
        time, starting at character ``offset``."""
        text = context.tool_outputs.get(call_id)
        if text is None:
            stored = ", ".join(sorted(context.tool_outputs)) or "none"
            raise LookupError(f"no stored output for call id {call_id!r} (stored: {stored})")
        if not 0 <= offset < len(text):
            raise ValueError(f"offset must be between 0 and {len(text) - 1}")
        end = min(len(text), offset + page_chars)
        trailer = (
            f"\n\n[characters {offset}–{end} of {len(text)}; next: offset={end}]"
            if end < len(text)
            else f"\n\n[characters {offset}–{end} of {len(text)}; end of output]"
        )
        return text[offset:end] + trailer

    return Tool(read_tool_output, name=PAGER_NAME)
