"""A tool call's result as what the model reads, and what typed consumers keep.

Text blocks become the result's text, in order. An image becomes an image part (sent as an
image to the providers that take one in a tool result) and a placeholder line in the text for
the others; audio and binary resources are placeholder lines. A resource link becomes a line
with its name and URI and a :class:`~fsm_agent.messages.ResourceLinkPart`. Structured content
is kept as the result's ``structured`` value, and is the text (as JSON) when no block is text.
The blocks' annotations are kept in the metadata under ``annotations``, by block index.
"""

from __future__ import annotations

import json

import mcp_types
from pydantic import JsonValue

from ...messages import ImagePart, ResourceLinkPart, ToolResultPart
from .. import ToolReturn

__all__ = ["result_text", "tool_return"]


def tool_return(result: mcp_types.CallToolResult) -> ToolReturn:
    """``result`` as a tool's return: its text, parts, structured content and annotations."""
    texts: list[str] = []
    notes: list[str] = []  # placeholders and links, after the text
    parts: list[ToolResultPart] = []
    annotations: list[JsonValue] = []
    for index, block in enumerate(result.content):
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent):
            notes.append(_placeholder(block.type, block.mime_type, block.data))
            parts.append(ImagePart(media_type=block.mime_type, data=block.data))
        elif isinstance(block, mcp_types.AudioContent):
            notes.append(_placeholder(block.type, block.mime_type, block.data))
        elif isinstance(block, mcp_types.EmbeddedResource):
            inner = block.resource
            if isinstance(inner, mcp_types.TextResourceContents):
                texts.append(inner.text)
            else:
                notes.append(f"[resource: {inner.uri}]")
                if inner.mime_type is not None and inner.mime_type.startswith("image/"):
                    parts.append(ImagePart(media_type=inner.mime_type, data=inner.blob))
        elif isinstance(block, mcp_types.ResourceLink):
            notes.append(f"[resource link: {block.name} <{block.uri}>]")
            parts.append(
                ResourceLinkPart(
                    uri=str(block.uri),
                    name=block.name,
                    title=block.title,
                    description=block.description,
                    media_type=block.mime_type,
                )
            )
        found = getattr(block, "annotations", None)
        if found is not None:
            noted = found.model_dump(mode="json", by_alias=True, exclude_none=True)
            annotations.append({"index": index, "type": block.type, **noted})
    structured = result.structured_content
    if not texts and structured is not None:
        texts.append(json.dumps(structured))
    metadata: dict[str, JsonValue] = {"annotations": annotations} if annotations else {}
    return ToolReturn(
        "\n".join(texts + notes), tuple(parts), structured=structured, metadata=metadata
    )


def result_text(result: mcp_types.CallToolResult) -> str:
    """``result`` as the text the model reads (an error's message, say)."""
    return tool_return(result).text


def _placeholder(kind: str, media_type: str, data: str) -> str:
    return f"[{kind}: {media_type}, {len(data)} base64 characters]"
