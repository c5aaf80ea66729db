"""Provider-neutral assembly: reading wire JSON safely, finishing tool calls, and reconciling the
normalised finish reason with what was actually assembled."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence

from pydantic import JsonValue, ValidationError

from ..errors import MalformedResponseError
from ..values.define import builder
from ..values.messages import (
    FinishReason,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    Part,
    ReasoningPart,
    Role,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    parse_arguments,
)
from ..values.record import adapter

__all__ = [
    "JSONObject",
    "append_turn",
    "as_count",
    "as_int",
    "as_list",
    "as_obj",
    "as_str",
    "build_response",
    "canonical_json",
    "decode_json",
    "finish_tool_call",
    "image_url",
    "json_value",
    "new_call_id",
    "object_arguments",
    "reconcile",
    "text_field",
    "text_part",
    "thinking_budget",
]

# Enum members read on every step, bound once: on Python 3.11 each read of one goes through
# the enum's class attribute lookup (docs/performance.md, the traps).
_STOP, _TOOL_CALLS = FinishReason.STOP, FinishReason.TOOL_CALLS
_ASSISTANT = Role.ASSISTANT
# What a response is built of, built on every model call: see :func:`builder`.
_new_response, _new_message = builder(ModelResponse), builder(Message)
_new_call, _new_text = builder(ToolCall), builder(TextPart)

JSONObject = dict[str, object]
"""A decoded JSON object whose values are checked where they are read."""


def as_obj(value: object) -> JSONObject:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[object]:
    """``value`` if it is a JSON array, else an empty list."""
    return value if isinstance(value, list) else []


def as_str(value: object) -> str | None:
    """``value`` if it is a string, else ``None``."""
    return value if isinstance(value, str) else None


def as_int(value: object) -> int | None:
    """``value`` if it is an integer (not a bool), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_JSON_TYPES = {dict: "object", list: "array", bool: "boolean", int: "number", float: "number"}


def text_field(value: object, provider: str, what: str) -> str | None:
    """``value`` when it is a string, ``None`` when it is absent or null; any other JSON type is
    a :class:`MalformedResponseError` naming ``what``, so that text of the wrong type is never
    read as no text."""
    if value is None or type(value) is str:
        return value
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    raise MalformedResponseError(
        f"{provider}: {what} is a JSON {kind}, not a string", provider=provider
    )


def as_count(value: object) -> int | None:
    """``value`` if it is an integer of 0 or more (not a bool), else ``None``: a token count
    that is negative is no count at all."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def append_turn(turns: list[JSONObject], role: str, key: str, items: list[JSONObject]) -> None:
    """Append ``items`` as a turn of ``role`` (their list under ``key``), merged into the last turn
    when it has the same role: APIs that require alternating roles reject two in a row."""
    if not items:
        return
    if turns and turns[-1]["role"] == role:
        previous = turns[-1][key]
        assert isinstance(previous, list)
        previous.extend(items)
    else:
        turns.append({"role": role, key: items})


def thinking_budget(request: ModelRequest, by_effort: Mapping[str, int]) -> int | None:
    """The thinking budget the request asks for: its token budget, else its effort's."""
    if request.reasoning_budget_tokens:
        return request.reasoning_budget_tokens
    return by_effort[request.reasoning_effort] if request.reasoning_effort else None


def decode_json(data: str, provider: str) -> object:
    """Decode one event's JSON, turning a decode failure into a retryable typed error (whose
    body the provider's error boundary redacts and cuts)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # nested past the parser's depth: not usable JSON
        raise MalformedResponseError(
            f"{provider}: a stream event is not valid JSON", body=data, provider=provider
        ) from None


def canonical_json(value: object) -> str:
    """Compact JSON text, as sent on the wire for arguments given as objects. A value nested
    too deep to encode (it barely decoded) is a :class:`MalformedResponseError`, like a body
    nested too deep to decode."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:
        raise MalformedResponseError(
            "the response nests its tool arguments too deeply to encode"
        ) from None


def text_part(text: str) -> TextPart:
    """A text part of what came off the wire, a string (checked here): nothing else to
    validate."""
    if type(text) is str:
        return _new_text(text=text)
    return adapter(TextPart).validate_python({"text": text})


def new_call_id(prefix: str = "call") -> str:
    """A fresh tool-call id for providers that do not send one."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def finish_tool_call(
    call_id: str | None,
    name: str,
    arguments: str,
    provider_data: dict[str, JsonValue] | None = None,
) -> ToolCall:
    """A closed tool call: empty arguments become ``{}``; invalid JSON keeps the raw text and
    ``arguments=None`` so the call is answered with a validation error, never run blindly."""
    raw = arguments if arguments.strip() else "{}"
    if provider_data is None and type(name) is str and type(raw) is str:
        # Every field is checked here or by the parser, which validates the arguments as
        # JSON values while it reads them: validating the call again would repeat that work.
        return _new_call(
            id=call_id if type(call_id) is str and call_id else new_call_id(),
            name=name,
            arguments_json=raw,
            arguments=parse_arguments(raw),
        )
    try:
        return adapter(ToolCall).validate_python(
            {
                "id": call_id or new_call_id(),
                "name": name,
                "arguments_json": raw,
                "arguments": parse_arguments(raw),
                "provider_data": provider_data,
            }
        )
    except ValidationError as exc:  # e.g. provider data nested past what a message may hold
        raise MalformedResponseError(
            f"tool call {name!r} of the response cannot be kept: "
            f"{exc.errors(include_url=False)[0]['msg']}"
        ) from None


def image_url(image: ImagePart) -> str:
    """The image's URL, or its inline data as a ``data:`` URL."""
    return image.url or f"data:{image.media_type};base64,{image.data or ''}"


def json_value(value: object) -> JsonValue:
    """Round-trip a decoded JSON value into pydantic's JsonValue type."""
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_value(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def object_arguments(call: ToolCall) -> dict[str, JsonValue]:
    """The arguments to replay to a backend that requires an object: the parsed object, or a
    ``{"_raw": text}`` placeholder when the model's text was not a JSON object."""
    if call.arguments is not None:
        return call.arguments
    return {"_raw": call.arguments_json}


_CALLS_STAND = (FinishReason.STOP, FinishReason.OTHER, FinishReason.TOOL_CALLS)
"""The finish reasons under which a turn's tool calls stand (the turn becomes ``tool_calls``)."""


def reconcile(reason: FinishReason, parts: Sequence[Part]) -> tuple[FinishReason, list[Part]]:
    """Reconcile a normalised finish reason with the assembled parts.

    Tool calls survive only in a ``tool_calls`` turn: calls present with ``stop`` or ``other``
    make it ``tool_calls``; ``tool_calls`` with none is ``error``; with ``length``,
    ``content_filter`` or ``error`` every call is dropped (a cut-off or refused call is never
    dispatched). A ``stop`` with nothing visible (no text, no call) is ``other``.
    """
    # One pass over the parts, dispatching on their discriminator.
    calls = visible = False
    for part in parts:
        if part.type == "tool_call":
            calls = True
        elif part.type == "text" and part.text:
            visible = True
    if calls and reason in _CALLS_STAND:
        return _TOOL_CALLS, list(parts)
    if calls:
        return reason, [p for p in parts if p.type != "tool_call"]
    if reason is _TOOL_CALLS:
        return FinishReason.ERROR, list(parts)
    if reason is _STOP and not visible:
        return FinishReason.OTHER, list(parts)
    return reason, list(parts)


def build_response(
    parts: Sequence[Part],
    reason: FinishReason,
    raw_reason: str | None,
    usage: Usage,
    response_id: str | None,
    model_name: str | None,
    *,
    fragments: bool = True,
) -> ModelResponse:
    """Reconcile and wrap the assembled parts into the final response (``fragments``: the
    parts may hold adjacent text or reasoning fragments to join, as a stream's do; a reader
    that builds at most one text part and one reasoning part passes ``False``)."""
    final_reason, kept = reconcile(reason, parts)
    merged = _merge_text(kept) if fragments else kept
    if (
        _PARTS.issuperset(map(type, merged))
        and type(usage) is Usage
        and type(raw_reason) in _OPTIONAL_STR
        and type(response_id) in _OPTIONAL_STR
        and type(model_name) in _OPTIONAL_STR
    ):
        # The parts and usage are built values and the rest is checked above: validating the
        # wrappers would only re-check that.
        return _new_response(
            message=_new_message(role=_ASSISTANT, parts=tuple(merged)),
            finish_reason=final_reason,
            raw_finish_reason=raw_reason,
            usage=usage,
            response_id=response_id,
            model_name=model_name,
        )
    return adapter(ModelResponse).validate_python(
        {
            "message": {"role": Role.ASSISTANT, "parts": tuple(merged)},
            "finish_reason": final_reason,
            "raw_finish_reason": raw_reason,
            "usage": usage,
            "response_id": response_id,
            "model_name": model_name,
        }
    )


_PARTS = frozenset({TextPart, ReasoningPart, ImagePart, ToolCall, ToolResult})
_OPTIONAL_STR = frozenset({str, type(None)})


def _merge_text(parts: Sequence[Part]) -> list[Part]:
    """Join adjacent text parts and adjacent unsigned reasoning parts (stream fragments)."""
    merged: list[Part] = []
    last: Part | None = None
    for part in parts:  # by the discriminator, as in ``reconcile``
        if part.type == "text" and not part.text:
            continue
        if part.type == "text" and last is not None and last.type == "text":
            merged[-1] = last = TextPart(text=last.text + part.text)
        elif (
            part.type == "reasoning"
            and last is not None
            and last.type == "reasoning"
            and last.signature is None
            and not last.redacted
            and not part.redacted
            and last.provider_data == part.provider_data
        ):
            merged[-1] = last = ReasoningPart(
                text=last.text + part.text,
                signature=part.signature,
                provider_data=part.provider_data,
            )
        else:
            merged.append(part)
            last = part
    return merged
