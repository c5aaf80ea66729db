"""The request half of OpenAI's Responses API: a conversation as input items, tools as function
tools, each in the shape the API's own input types describe.

User turns are messages with ``input_text`` and ``input_image`` content (an image says its
``detail``: ``auto``). An assistant turn becomes, in its own order, the reasoning items it
received, its text and one ``function_call`` item per call. Its text is a plain assistant
message, except right after a reasoning item: there it goes back as the output message the
reasoning led to, under its id (the API refuses the reasoning item without it), with the
``status`` and ``annotations`` an output message has. A tool result is a
``function_call_output`` linked by ``call_id``.

A function tool always says ``strict``: without it the API applies strict mode to the schema,
which makes every optional parameter required. It is true only for a tool that asks for strict
mode and whose schema strict mode takes as it is.
"""

from __future__ import annotations

from pydantic import JsonValue

from ..values.messages import (
    ImagePart,
    Message,
    ModelRequest,
    ReasoningPart,
    Role,
    TextPart,
    ToolCall,
    ToolDefinition,
    ToolResult,
)
from ._assembly import JSONObject, canonical_json, image_url, object_arguments

__all__ = ["PROVIDER", "function_tool", "input_items", "strict_ready"]

PROVIDER = "openai-responses"

# What a reasoning input item may hold (the API keeps more on the items it returns).
_REASONING_KEYS = frozenset({"type", "id", "summary", "content", "encrypted_content"})
# Keywords strict mode does not take; a schema with one of them goes out non-strict.
_NOT_STRICT = frozenset(
    {
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "patternProperties",
        "propertyNames",
        "unevaluatedProperties",
        "minProperties",
        "maxProperties",
    }
)


def strict_ready(schema: JsonValue) -> bool:
    """Whether OpenAI's strict mode takes ``schema`` as it is: an object at the top, every
    object closed (``additionalProperties: false``) with all its properties required, and no
    keyword strict mode lacks, in every nested schema."""
    return isinstance(schema, dict) and schema.get("type") == "object" and _closed(schema)


def _closed(schema: JsonValue) -> bool:
    if not isinstance(schema, dict) or _NOT_STRICT & schema.keys():
        return False
    children: list[JsonValue] = []
    properties = schema.get("properties")
    if properties is not None or schema.get("type") == "object":
        if not isinstance(properties, dict) or schema.get("additionalProperties") is not False:
            return False
        required = schema.get("required", [])
        if not isinstance(required, list) or set(map(str, required)) != properties.keys():
            return False
        children += properties.values()
    for key in ("$defs", "definitions"):
        found = schema.get(key)
        if isinstance(found, dict):
            children += found.values()
    for key in ("anyOf", "oneOf", "prefixItems"):
        found = schema.get(key)
        if isinstance(found, list):
            children += found
    if "items" in schema:
        children.append(schema["items"])
    return all(_closed(child) for child in children)


def function_tool(tool: ToolDefinition) -> JSONObject:
    """``tool`` as a function tool, ``strict`` always said (see the module docstring)."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": bool(tool.strict) and strict_ready(tool.parameters),
    }


def _user_item(message: Message) -> JSONObject:
    if all(isinstance(p, TextPart) for p in message.parts):
        return {"role": "user", "content": message.text}
    content: list[JSONObject] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            content.append({"type": "input_text", "text": part.text})
        elif isinstance(part, ImagePart):
            content.append({"type": "input_image", "image_url": image_url(part), "detail": "auto"})
    return {"role": "user", "content": content}


def _call_item(call: ToolCall) -> JSONObject:
    arguments = call.arguments_json if call.arguments is not None else None
    item: JSONObject = {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments or canonical_json(object_arguments(call)),
    }
    item_id = (call.provider_data or {}).get("item_id")
    if isinstance(item_id, str):
        item["id"] = item_id  # links the call to the reasoning item that led to it
    return item


def _reasoning_item(part: ReasoningPart) -> tuple[JSONObject, JsonValue] | None:
    """The reasoning item ``part`` came from, as an input item, and the id of the message it
    led to; ``None`` for reasoning from another provider (or without its item)."""
    data = part.provider_data or {}
    item = data.get("item")
    if data.get("provider") != PROVIDER or not isinstance(item, dict):
        return None
    sent: JSONObject = {k: v for k, v in item.items() if k in _REASONING_KEYS}
    if not isinstance(sent.get("content"), list):
        sent.pop("content", None)  # a server may return null; the input item takes a list
    sent.setdefault("summary", [])
    return sent, data.get("message_id")


def _text_item(text: str, message_id: JsonValue) -> JSONObject:
    """An assistant's text: the output message a reasoning item led to, under its id, or a
    plain assistant message."""
    if not isinstance(message_id, str):
        return {"type": "message", "role": "assistant", "content": text}
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {
        "type": "message",
        "role": "assistant",
        "content": content,
        "id": message_id,
        "status": "completed",
    }


def _assistant_items(message: Message) -> list[JSONObject]:
    """An assistant turn as input items, in its own order."""
    items: list[JSONObject] = []
    text: list[str] = []
    message_id: JsonValue = None  # the id of the message that followed the last reasoning item

    def flush() -> None:
        nonlocal message_id
        if text:
            items.append(_text_item("\n".join(text), message_id))
            text.clear()
        message_id = None

    for part in message.parts:
        if isinstance(part, TextPart):
            text.append(part.text)
            continue
        flush()
        if isinstance(part, ToolCall):
            items.append(_call_item(part))
        elif isinstance(part, ReasoningPart) and (found := _reasoning_item(part)) is not None:
            items.append(found[0])
            message_id = found[1]
    flush()
    return items


def input_items(request: ModelRequest) -> list[JSONObject]:
    """The request's messages as input items; the first system prompt is not among them (it
    goes out as ``instructions``), a later one is a developer message."""
    items: list[JSONObject] = []
    for index, message in enumerate(request.messages):
        if message.role is Role.SYSTEM:
            if index:
                items.append({"role": "developer", "content": message.text})
        elif message.role is Role.USER:
            items.append(_user_item(message))
        elif message.role is Role.ASSISTANT:
            items.extend(_assistant_items(message))
        else:
            items.extend(
                {"type": "function_call_output", "call_id": r.call_id, "output": r.content}
                for r in message.parts
                if isinstance(r, ToolResult)
            )
    return items
