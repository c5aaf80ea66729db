"""Provider-neutral messages, content parts, tool calls and results, usage, finish reasons.

A conversation is a list of :class:`Message`. Each message has a :class:`Role` and a tuple of
parts. Providers map these to and from their wire formats; the kernel never sees a wire format.

Every type here is an immutable slotted dataclass on :class:`~fsm_agent.values.record.Record`: equal
when its fields are, hashable when they are, and refusing writes. Its constructor validates
nothing, which makes it as cheap as a plain object: the kernel builds them at every step.
pydantic validates them where data crosses a boundary (what a provider read from the network,
a checkpoint, a recording, a tool's return value) through ``Record``'s methods:
``Message.model_validate(data)`` and ``model_validate_json(text)`` check types, bounds (a
:class:`Usage` count of 0 or more) and discriminators, and refuse unknown fields;
``model_dump()``, ``model_dump_json()`` and ``model_copy(update=...)`` work as on a pydantic
model, and the JSON has the same shape as before these types were dataclasses. For a type's
fields use :func:`dataclasses.fields`; for its JSON schema,
``fsm_agent.values.record.adapter(Message).json_schema()``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import field
from enum import StrEnum
from typing import Annotated, Literal, TypeAlias

from pydantic_core import from_json

from ..errors import InvalidInputError
from .deep_json import deep_json, value_depth
from .define import builder, record
from .record import Record, field_problem
from .schema import JsonValue, Schema

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "NO_USAGE",
    "FinishReason",
    "ImagePart",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "OutputSchema",
    "Part",
    "ReasoningDelta",
    "ReasoningPart",
    "ResourceLinkPart",
    "Role",
    "StreamDelta",
    "TextDelta",
    "TextPart",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolDefinition",
    "ToolResult",
    "ToolResultPart",
    "Usage",
    "arguments_too_deep",
    "parse_arguments",
    "validate_history",
]


class Role(StrEnum):
    """Who wrote a message."""

    SYSTEM = "system"  # instructions; at most one, first
    USER = "user"  # the human, or feedback the kernel injects on their behalf
    ASSISTANT = "assistant"  # the model
    TOOL = "tool"  # a tool's result, linked to its call by id


class FinishReason(StrEnum):
    """Why the model stopped, normalised across providers."""

    STOP = "stop"  # a complete answer
    TOOL_CALLS = "tool_calls"  # the model wants tools run
    LENGTH = "length"  # output or context limit hit
    CONTENT_FILTER = "content_filter"  # the provider withheld content
    ERROR = "error"  # the provider reports the generation failed
    OTHER = "other"  # anything else; the raw reason is kept on the response


@record
class TextPart(Record):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


@record
class ReasoningPart(Record):
    """Model reasoning ("thinking"). ``signature`` and ``provider_data`` are kept verbatim so a
    provider that needs them back (Anthropic signatures, Gemini thought signatures) gets them."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    signature: str | None = None
    redacted: bool = False
    provider_data: dict[str, JsonValue] | None = None


@record
class ImagePart(Record):
    """An image, inline (base64 ``data``) or by ``url``."""

    type: Literal["image"] = "image"
    media_type: str = "image/png"
    data: str | None = None
    url: str | None = None

    @property
    def placeholder(self) -> str:
        """The line that stands for this image in a tool result's text. A provider that takes
        images in tool results sends the image in that line's place."""
        if self.url:
            return f"[image: {self.url}]"
        return f"[image: {self.media_type}, {len(self.data or '')} base64 characters]"


@record
class ResourceLinkPart(Record):
    """A link to a resource a tool pointed at (an MCP resource link): its ``uri`` and what the
    server said of it. Kept on a :class:`ToolResult`; the model reads it as text."""

    type: Literal["resource_link"] = "resource_link"
    uri: str
    name: str = ""
    title: str | None = None
    description: str | None = None
    media_type: str | None = None


ToolResultPart: TypeAlias = Annotated[ImagePart | ResourceLinkPart, Schema(discriminator="type")]
"""What a tool result may carry beside its text."""


@record
class ToolCall(Record):
    """A call the model asked for.

    ``arguments_json`` is the raw JSON text exactly as the model produced it; ``arguments`` is the
    parsed object, or ``None`` when the text is not a JSON object (the tool's validation then sees
    the raw text).
    """

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments_json: str = "{}"
    arguments: dict[str, JsonValue] | None = None
    provider_data: dict[str, JsonValue] | None = None

    @classmethod
    def create(
        cls,
        id: str,
        name: str,
        arguments: dict[str, JsonValue] | str,
        provider_data: dict[str, JsonValue] | None = None,
    ) -> ToolCall:
        """Build a call from a dict or from raw JSON text (parsed when it is a JSON object no
        deeper than :data:`MAX_ARGUMENT_DEPTH`)."""
        deep = MAX_ARGUMENT_DEPTH
        if not isinstance(arguments, str) and value_depth(arguments, deep) > deep:
            arguments = deep_json(arguments)
        if isinstance(arguments, str):
            return cls(
                id=id,
                name=name,
                arguments_json=arguments,
                arguments=parse_arguments(arguments),
                provider_data=provider_data,
            )
        return cls(
            id=id,
            name=name,
            arguments_json=json.dumps(arguments, separators=(",", ":")),
            arguments=arguments,
            provider_data=provider_data,
        )


@record
class ToolResult(Record):
    """A tool's answer to one call, linked by ``call_id``.

    ``content`` is the text every model reads. ``parts`` are images (sent as images to the
    providers that take them in a tool result; ``content`` holds a placeholder for the others)
    and resource links. ``structured`` is a structured value for typed consumers."""

    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool = False
    metadata: dict[str, JsonValue] = field(default_factory=dict)
    parts: tuple[ToolResultPart, ...] = ()
    structured: JsonValue = None


Part: TypeAlias = Annotated[
    TextPart | ReasoningPart | ImagePart | ToolCall | ToolResult, Schema(discriminator="type")
]


MAX_ARGUMENT_DEPTH = 128
"""The deepest nesting of objects and arrays accepted in tool-call arguments. Deeper arguments
are kept as raw text only (``arguments=None``) and answered with an error result: nested
structures that deep would overflow the recursive parsers, validators and serialisers they pass
through, and no tool schema needs them."""


def parse_arguments(raw: str) -> dict[str, JsonValue] | None:
    """Parse tool-call arguments: ``None`` unless ``raw`` is a JSON object no deeper than
    :data:`MAX_ARGUMENT_DEPTH`; empty text is ``{}``. Never raises, whatever the text."""
    if not raw.strip():
        return {}
    if arguments_too_deep(raw):
        return None
    try:
        # pydantic's parser gives JSON values only, valid for ``ToolCall.arguments``, at a
        # third of ``json.loads``' cost.
        value = from_json(raw)
    except ValueError:
        pass
    else:
        return value if isinstance(value, dict) else None
    # What it refuses, the standard parser may still read (a lone surrogate in a string):
    # it has the last word, as it always had.
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def arguments_too_deep(raw: str) -> bool:
    """Whether the JSON text ``raw`` nests objects and arrays deeper than
    :data:`MAX_ARGUMENT_DEPTH` (brackets inside strings do not count). A linear scan without
    recursion, made only when the text holds enough brackets to be that deep."""
    if raw.count("[") + raw.count("{") <= MAX_ARGUMENT_DEPTH:
        return False
    depth = 0
    in_string = escaped = False
    for char in raw:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "[" or char == "{":
            depth += 1
            if depth > MAX_ARGUMENT_DEPTH:
                return True
        elif char == "]" or char == "}":
            depth -= 1
    return False


@record
class Message(Record):
    """One message of a conversation."""

    role: Role
    parts: tuple[Part, ...]

    @classmethod
    def system(cls, text: str) -> Message:
        """A system (instructions) message."""
        if cls is Message:  # see builder()
            return _new_message(role=Role.SYSTEM, parts=(_new_text(text=text),))
        return cls(role=Role.SYSTEM, parts=(TextPart(text=text),))

    @classmethod
    def user(cls, text: str, *images: ImagePart) -> Message:
        """A user message with text and optional images."""
        if cls is Message:  # one per run at least: see builder()
            return _new_message(role=Role.USER, parts=(_new_text(text=text), *images))
        return cls(role=Role.USER, parts=(TextPart(text=text), *images))

    @classmethod
    def assistant(cls, text: str = "", tool_calls: Sequence[ToolCall] = ()) -> Message:
        """An assistant message with text and tool calls."""
        parts: tuple[Part, ...] = (TextPart(text=text),) if text else ()
        return cls(role=Role.ASSISTANT, parts=(*parts, *tool_calls))

    @classmethod
    def tool(cls, result: ToolResult) -> Message:
        """A tool-result message (one result per message)."""
        return cls(role=Role.TOOL, parts=(result,))

    @property
    def text(self) -> str:
        """The text parts joined with newlines."""
        parts = self.parts
        if len(parts) == 1:  # most messages: one text, or one tool call or result
            part = parts[0]
            return part.text if isinstance(part, TextPart) else ""
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))

    @property
    def reasoning(self) -> list[ReasoningPart]:
        """The reasoning parts."""
        return [p for p in self.parts if isinstance(p, ReasoningPart)]

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls, in the model's order."""
        return [p for p in self.parts if isinstance(p, ToolCall)]

    @property
    def tool_results(self) -> list[ToolResult]:
        """The tool results."""
        return [p for p in self.parts if isinstance(p, ToolResult)]


_new_message, _new_text = builder(Message), builder(TextPart)


@record
class Usage(Record):
    """Token (and optional cost) usage of one or more model calls.

    Every count is 0 or more and the cost a finite number of US dollars, 0 or more (0 when it
    is not known): a NaN or negative value would silently disable the usage limits."""

    requests: Annotated[int, Schema(ge=0)] = 0
    input_tokens: Annotated[int, Schema(ge=0)] = 0
    output_tokens: Annotated[int, Schema(ge=0)] = 0
    cache_read_tokens: Annotated[int, Schema(ge=0)] = 0
    cache_write_tokens: Annotated[int, Schema(ge=0)] = 0
    reasoning_tokens: Annotated[int, Schema(ge=0)] = 0
    cost_usd: Annotated[float, Schema(ge=0, allow_inf_nan=False)] = 0.0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return self.plus(other)

    def plus(self, other: Usage, *, requests: int = 0) -> Usage:
        """The sum of both usages, with ``requests`` more requests (``other`` itself when this
        is :data:`NO_USAGE`: a run's first answer builds no sum)."""
        if self is NO_USAGE and not requests:
            return other
        return _new_usage(  # a run adds one per answer
            requests=self.requests + other.requests + requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
        )


_new_usage = builder(Usage)
NO_USAGE = Usage()
"""No usage at all: what a run has used before its first model call (frozen, so shared)."""


def _empty_object_schema() -> dict[str, JsonValue]:
    return {"type": "object", "properties": {}}


@record
class ToolDefinition(Record):
    """What the model is told about a tool: name, description and JSON schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, JsonValue] = field(default_factory=_empty_object_schema)
    strict: bool | None = None


ToolChoice: TypeAlias = Literal["auto", "none", "required"] | str
"""``"auto"``, ``"none"``, ``"required"``, or the name of one tool the model must call."""


@record
class OutputSchema(Record):
    """The shape the final answer must have: a JSON schema with a name, for providers to ask
    for structured output (OpenAI-compatible ``response_format``, Gemini ``responseSchema``, or
    a final answer tool where the wire format has no such mode).

    ``wrapped`` says the output type's own schema is not an object (a scalar, a list): the
    schema here is then an object with one property, ``value``, and the answer is
    ``{"value": ...}``."""

    name: str
    json_schema: dict[str, JsonValue]
    wrapped: bool = False
    strict: bool = False


@record
class ModelRequest(Record):
    """Everything a model call needs, provider-neutral.

    ``messages`` starts with the system message when there is one; providers that take
    instructions separately (Anthropic ``system``, Gemini ``systemInstruction``) lift it out.
    The fields from ``tool_choice`` to ``reasoning_budget_tokens`` are the call's
    :class:`~fsm_agent.ModelSettings` (``None``: the provider's default).
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop_sequences: tuple[str, ...] = ()
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    reasoning_budget_tokens: int | None = None
    output: OutputSchema | None = None  # typed output: the schema the final answer must match

    @property
    def system_prompt(self) -> str | None:
        """The system message's text, when the first message is one."""
        if self.messages and self.messages[0].role is Role.SYSTEM:
            return self.messages[0].text
        return None


@record
class ModelResponse(Record):
    """A complete model turn: the assistant message, why it ended, and what it cost."""

    message: Message
    finish_reason: FinishReason
    raw_finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    response_id: str | None = None
    model_name: str | None = None


@record
class TextDelta(Record):
    """A fragment of assistant text, while streaming."""

    type: Literal["text_delta"] = "text_delta"
    text: str


@record
class ReasoningDelta(Record):
    """A fragment of reasoning, while streaming."""

    type: Literal["reasoning_delta"] = "reasoning_delta"
    text: str


@record
class ToolCallDelta(Record):
    """A fragment of a tool call, while streaming: the index of the call in the response, and
    whatever of id, name and argument text arrived in this chunk."""

    type: Literal["tool_call_delta"] = "tool_call_delta"
    index: int
    id: str | None = None
    name: str | None = None
    arguments_fragment: str = ""


StreamDelta: TypeAlias = TextDelta | ReasoningDelta | ToolCallDelta


_HOW = (
    "a history must be a valid conversation, such as the messages of an earlier RunResult: the "
    "system message first if any, and every assistant tool call followed by exactly one tool "
    "result (Message.tool(ToolResult(call_id=..., name=..., content=...)))"
)


def validate_history(history: Sequence[object]) -> None:
    """Check a history given to a run before anything is sent to a model. Raises
    :class:`~fsm_agent.InvalidInputError` naming the first problem (an item that is not a
    :class:`Message` or whose role is not a :class:`Role`, a field that does not hold its
    declared type, a system message that is not first, a tool call with no result, a result
    that answers no call, a call answered twice) and how to fix it."""
    waiting: dict[str, str] = {}  # the open tool turn's unanswered calls: id -> tool name
    answered: set[str] = set()
    for index, message in enumerate(history):
        if not isinstance(message, Message):
            raise InvalidInputError(
                f"history[{index}] is a {type(message).__name__}, not a fsm_agent.Message; {_HOW}"
            )
        if type(message.role) is not Role:  # the constructor converts nothing
            raise InvalidInputError(
                f"history[{index}] has the role {message.role!r}, not a fsm_agent.Role; build "
                "it with Role.USER (...), or validate it: Message.model_validate(data)"
            )
        problem = field_problem(message)
        if problem is not None:
            raise InvalidInputError(
                f"history[{index}].{problem}; build messages with their constructors and the "
                "types their fields declare (Message.user(text), TextPart(text=...), a tuple of "
                "parts), or validate them: Message.model_validate(data)"
            )
        if message.role is Role.TOOL:
            for result in message.tool_results:
                if result.call_id in answered:
                    problem = f"answers tool call {result.call_id!r} a second time"
                elif result.call_id not in waiting:
                    problem = (
                        f"answers tool call {result.call_id!r}, which no message before it made"
                    )
                else:
                    answered.add(result.call_id)
                    del waiting[result.call_id]
                    continue
                raise InvalidInputError(f"history[{index}] {problem}; {_HOW}")
            continue
        if waiting:
            raise InvalidInputError(_unanswered(f"before history[{index}]", waiting))
        if message.role is Role.SYSTEM and index != 0:
            raise InvalidInputError(
                f"history[{index}] is a system message, but only the first message may be one; "
                f"{_HOW}"
            )
        answered = set()
        for call in message.tool_calls if message.role is Role.ASSISTANT else ():
            if call.id in waiting:
                raise InvalidInputError(
                    f"history[{index}] makes two tool calls with the id {call.id!r}; {_HOW}"
                )
            waiting[call.id] = call.name
    if waiting:
        raise InvalidInputError(_unanswered("at the end of the history", waiting))


def _unanswered(where: str, waiting: dict[str, str]) -> str:
    calls = ", ".join(f"{call_id!r} ({name})" for call_id, name in waiting.items())
    return f"the tool call(s) {calls} have no result {where}; {_HOW}"
