"""A tool call's result as what the model reads."""

from __future__ import annotations

import json

import mcp_types

__all__ = ["result_text"]


def result_text(result: mcp_types.CallToolResult) -> str:
    """A call's result as the text the model reads: the text blocks in order, other blocks
    described in a line each; structured content alone is shown as JSON."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}, {len(block.data)} base64 characters]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            inner = block.resource
            if isinstance(inner, mcp_types.TextResourceContents):
                parts.append(inner.text)
            else:
                parts.append(f"[resource: {inner.uri}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "\n".join(parts)
