"""The request half of the Anthropic Messages API: a conversation as alternating user and
assistant messages of content blocks, the tool choice, and the settings extended thinking refuses.

Thinking blocks are replayed with their signature (redacted thinking with its data); reasoning
from another provider, or unsigned, is not sent, because the API rejects it. Tool calls are
``tool_use`` blocks and results ``tool_result`` blocks in a user message; a result's images go
inside it, each in the place of its placeholder line. Without tools, past calls and results are
sent as text: the API rejects those blocks in a request that defines no tools.
"""

from __future__ import annotations

from ..values.messages import (
    ImagePart,
    Message,
    ModelRequest,
    ReasoningPart,
    Role,
    TextPart,
    ToolCall,
    ToolResult,
)
from ._assembly import JSONObject, append_turn, canonical_json, object_arguments

__all__ = ["MIN_BUDGET", "PROVIDER", "thinking_fault", "tool_choice", "wire_messages"]

PROVIDER = "anthropic"
MIN_BUDGET = 1024
"""The smallest thinking budget the API takes."""


def _image_block(image: ImagePart) -> JSONObject:
    if image.url:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.media_type, "data": image.data or ""},
    }


def _assistant_blocks(message: Message, tools: bool) -> list[JSONObject]:
    blocks: list[JSONObject] = []
    for part in message.parts:
        if isinstance(part, ReasoningPart):
            origin = (part.provider_data or {}).get("provider")
            if part.redacted and origin == PROVIDER:
                blocks.append(
                    {"type": "redacted_thinking", "data": (part.provider_data or {}).get("data")}
                )
            elif part.signature and origin == PROVIDER:
                blocks.append(
                    {"type": "thinking", "thinking": part.text, "signature": part.signature}
                )
            # Unsigned reasoning (or another provider's) cannot be replayed: Anthropic rejects it.
        elif isinstance(part, TextPart) and part.text:
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ToolCall) and not tools:
            text = f"[called {part.name} with {canonical_json(object_arguments(part))}]"
            blocks.append({"type": "text", "text": text})
        elif isinstance(part, ToolCall):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": part.id,
                    "name": part.name,
                    "input": object_arguments(part),
                }
            )
    return blocks


def _user_blocks(message: Message, tools: bool) -> list[JSONObject]:
    blocks: list[JSONObject] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append(_image_block(part))
        elif isinstance(part, ToolResult) and not tools:
            outcome = "failed" if part.is_error else "returned"
            blocks.append({"type": "text", "text": f"[{part.name} {outcome}: {part.content}]"})
        elif isinstance(part, ToolResult):
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": part.call_id,
                    "content": _result_content(part),
                    **({"is_error": True} if part.is_error else {}),
                }
            )
    return blocks


def _result_content(result: ToolResult) -> str | list[JSONObject]:
    """A tool result's content: its text, and its images as image blocks (Anthropic takes
    them in a ``tool_result``), each in the place of its placeholder line in the text, or after
    the text when the text has none; other parts are in the text already."""
    images = [p for p in result.parts if isinstance(p, ImagePart)]
    if not images:
        return result.content
    blocks: list[JSONObject] = []
    lines: list[str] = []

    def flush() -> None:
        text = "\n".join(lines)
        if text.strip():  # the API refuses an empty text block
            blocks.append({"type": "text", "text": text})
        lines.clear()

    for line in result.content.split("\n"):
        placed = next((i for i in images if i.placeholder == line), None)
        if placed is None:
            lines.append(line)
            continue
        flush()
        blocks.append(_image_block(placed))
        images.remove(placed)
    flush()
    return [*blocks, *map(_image_block, images)]


def wire_messages(request: ModelRequest) -> list[JSONObject]:
    """Messages with roles alternating: consecutive user-side messages (tool results of a
    parallel batch, then a user nudge) are merged into one user message.

    Anthropic rejects ``tool_use``/``tool_result`` blocks in a request that defines no tools, so
    without tools past calls and results are sent as text."""
    wire: list[JSONObject] = []
    tools = bool(request.tools)
    for message in request.messages:
        if message.role is Role.SYSTEM:
            continue
        role = "assistant" if message.role is Role.ASSISTANT else "user"
        if role == "assistant":
            blocks = _assistant_blocks(message, tools)
        else:
            blocks = _user_blocks(message, tools)
        append_turn(wire, role, "content", blocks)
    return wire


def thinking_fault(request: ModelRequest, budget: int | None) -> str | None:
    """What Anthropic refuses in ``request`` with extended thinking on (``budget`` tokens, or
    ``None`` when off), said with the fix; ``None`` when it takes the request."""
    if budget is None:
        return None
    if budget < MIN_BUDGET:
        return (
            f"{PROVIDER}: reasoning_budget_tokens={budget} is below the {MIN_BUDGET} tokens "
            f"extended thinking takes at least: give {MIN_BUDGET} or more, or leave it unset"
        )
    if request.tools and request.tool_choice not in (None, "auto", "none"):
        return (
            f"{PROVIDER}: tool_choice={request.tool_choice!r} cannot go with extended "
            "thinking, which lets the model choose (only 'auto' or 'none'): drop tool_choice "
            "or turn thinking off (no reasoning_budget_tokens or reasoning_effort)"
        )
    return None


def tool_choice(request: ModelRequest) -> JSONObject | None:
    choice: JSONObject | None = None
    if request.tool_choice in ("auto", "none"):
        choice = {"type": request.tool_choice}
    elif request.tool_choice == "required":
        choice = {"type": "any"}
    elif request.tool_choice is not None:
        choice = {"type": "tool", "name": request.tool_choice}
    if request.parallel_tool_calls is False:
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    return choice
