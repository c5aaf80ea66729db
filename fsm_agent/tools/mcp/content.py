"""A tool call's result as what the model reads, and what typed consumers keep.

The result's text is one line (or more) per content block, in the server's order. A text block
is its text. An image becomes an image part and, in its place in the text, the image's
placeholder line: a provider that takes images in tool results sends the image there instead of
the line, and the others read the line. Audio and binary resources are placeholder lines (a
binary image resource is an image part too, after its line). A resource link becomes a line with
its name and URI and a :class:`~fsm_agent.values.messages.ResourceLinkPart`. Structured content is
kept as the result's ``structured`` value, and is the text (as JSON, first) when no block is text.

A block whose ``audience`` leaves out the assistant (``["user"]``) is not the model's: it is kept,
whole, in the metadata under ``for_user`` (with its index) and nowhere else. The blocks'
annotations are kept in the metadata under ``annotations``, by block index.
"""

from __future__ import annotations

import json

import mcp_types
from pydantic import JsonValue

from ...values.messages import ImagePart, ResourceLinkPart, ToolResultPart
from .. import ToolReturn

__all__ = ["tool_return"]


def _for_user_only(block: mcp_types.ContentBlock) -> bool:
    """Whether the server meant ``block`` for the user and not for the model."""
    annotations = getattr(block, "annotations", None)
    audience = annotations.audience if annotations is not None else None
    return bool(audience) and "assistant" not in (audience or ())


def _read(block: mcp_types.ContentBlock, lines: list[str], parts: list[ToolResultPart]) -> bool:
    """Add ``block``'s lines and parts, in order; whether it was text."""
    if isinstance(block, mcp_types.TextContent):
        lines.append(block.text)
        return True
    if isinstance(block, mcp_types.ImageContent):
        image = ImagePart(media_type=block.mime_type, data=block.data)
        lines.append(image.placeholder)
        parts.append(image)
    elif isinstance(block, mcp_types.AudioContent):
        lines.append(f"[{block.type}: {block.mime_type}, {len(block.data)} base64 characters]")
    elif isinstance(block, mcp_types.EmbeddedResource):
        inner = block.resource
        if isinstance(inner, mcp_types.TextResourceContents):
            lines.append(inner.text)
            return True
        lines.append(f"[resource: {inner.uri}]")
        if inner.mime_type is not None and inner.mime_type.startswith("image/"):
            image = ImagePart(media_type=inner.mime_type, data=inner.blob)
            lines.append(image.placeholder)
            parts.append(image)
    elif isinstance(block, mcp_types.ResourceLink):
        lines.append(f"[resource link: {block.name} <{block.uri}>]")
        parts.append(
            ResourceLinkPart(
                uri=str(block.uri),
                name=block.name,
                title=block.title,
                description=block.description,
                media_type=block.mime_type,
            )
        )
    return False


def tool_return(result: mcp_types.CallToolResult) -> ToolReturn:
    """``result`` as a tool's return: its text, parts, structured content and annotations."""
    lines: list[str] = []
    parts: list[ToolResultPart] = []
    annotations: list[JsonValue] = []
    for_user: list[JsonValue] = []
    texts = 0
    for index, block in enumerate(result.content):
        found = getattr(block, "annotations", None)
        if found is not None:
            noted = found.model_dump(mode="json", by_alias=True, exclude_none=True)
            annotations.append({"index": index, "type": block.type, **noted})
        if _for_user_only(block):
            whole = block.model_dump(mode="json", by_alias=True, exclude_none=True)
            for_user.append({"index": index, **whole})
        elif _read(block, lines, parts):
            texts += 1
    structured = result.structured_content
    if not texts and structured is not None:
        lines.insert(0, json.dumps(structured))
    metadata: dict[str, JsonValue] = {"annotations": annotations} if annotations else {}
    if for_user:
        metadata["for_user"] = for_user
    return ToolReturn("\n".join(lines), tuple(parts), structured=structured, metadata=metadata)
