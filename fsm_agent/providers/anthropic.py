"""Anthropic Messages API.

Instructions go in the ``system`` parameter; tool calls are ``tool_use`` blocks and results are
``tool_result`` blocks in a user message; thinking blocks come back with their signature, kept
verbatim and replayed. A ``pause_turn`` stop is continued transparently (the assistant content is
sent back as is), bounded by ``max_pause_continuations``. The wire format has no JSON-schema
response mode, so typed output is asked for with a final answer tool (see
:mod:`fsm_agent.providers._output`). A mid-stream ``error`` event is
classified by its ``error.type`` (``overloaded_error`` is retryable like a 529).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import ClassVar, Unpack

from ..errors import ConfigurationError, InvalidRequestError, MalformedResponseError, ModelError
from ..values.messages import (
    FinishReason,
    ModelRequest,
    ModelResponse,
    Part,
    ReasoningDelta,
    ReasoningPart,
    StreamDelta,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
    Usage,
    parse_arguments,
)
from ._anthropic_cache import mark_cache_breakpoints
from ._anthropic_request import MIN_BUDGET, PROVIDER, thinking_fault, tool_choice, wire_messages
from ._assembly import (
    JSONObject,
    as_count,
    as_int,
    as_list,
    as_obj,
    as_str,
    build_response,
    canonical_json,
    finish_tool_call,
    object_arguments,
    text_field,
    thinking_budget,
)
from ._base import ProviderBase, ProviderOptions, deltas_of
from ._http import Call, ErrorInfo, open_stream
from ._output import AnswerDeltas, answer_parts, answer_tool
from ._sse import SSEDecoder

__all__ = ["AnthropicModel", "anthropic_finish_reason"]

_PROVIDER = PROVIDER
_VERSION = "2023-06-01"
_DEFAULT_MAX_TOKENS = 4096
_EFFORT_BUDGET = {"low": MIN_BUDGET, "medium": 4096, "high": 16384}

_FINISH: dict[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "compaction": FinishReason.STOP,
    "tool_use": FinishReason.TOOL_CALLS,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
}


def anthropic_finish_reason(raw: str) -> FinishReason:
    """Normalise a Messages ``stop_reason``; unknown values (and ``pause_turn``) are ``other``."""
    return _FINISH.get(raw) or FinishReason.OTHER


def _error_info(payload: object) -> ErrorInfo:
    error = as_obj(as_obj(payload).get("error"))
    return ErrorInfo(message=as_str(error.get("message")), kind=as_str(error.get("type")))


def _usage(value: object, into: dict[str, int]) -> None:
    """Replace (never add) the counters present: message_delta usage is cumulative."""
    for key, number in as_obj(value).items():
        count = as_count(number)
        if count is not None:
            into[key] = count


def _to_usage(counts: dict[str, int]) -> Usage:
    cache_read = counts.get("cache_read_input_tokens", 0)
    cache_write = counts.get("cache_creation_input_tokens", 0)
    return Usage(
        requests=1,
        input_tokens=counts.get("input_tokens", 0) + cache_read + cache_write,
        output_tokens=counts.get("output_tokens", 0),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


class _Block:
    """One content block being assembled from stream events."""

    __slots__ = ("chunks", "ordinal", "raw", "signature")

    def __init__(self, raw: JSONObject, ordinal: int) -> None:
        self.raw = raw
        self.ordinal = ordinal
        self.chunks: list[str] = []
        self.signature: str | None = as_str(raw.get("signature")) or None


def _block_part(raw: JSONObject, text: str | None = None) -> Part | None:
    """The neutral part of a complete wire block (``text`` overrides streamed text/input)."""
    kind = raw.get("type")
    if kind == "text":
        return TextPart(text=text if text is not None else as_str(raw.get("text")) or "")
    if kind == "thinking":
        return ReasoningPart(
            text=text if text is not None else as_str(raw.get("thinking")) or "",
            signature=as_str(raw.get("signature")) or None,
            provider_data={"provider": _PROVIDER},
        )
    if kind == "redacted_thinking":
        return ReasoningPart(
            text="",
            redacted=True,
            provider_data={"provider": _PROVIDER, "data": as_str(raw.get("data")) or ""},
        )
    if kind == "tool_use":
        if text is None:
            text = _canonical_input(raw.get("input"))
        return finish_tool_call(as_str(raw.get("id")), as_str(raw.get("name")) or "", text)
    return None  # server-tool blocks and citations have no neutral form


def _block_text(raw: JSONObject) -> str | None:
    """The text a text or thinking block carries whole (checked to be a string)."""
    kind = raw.get("type")
    if kind == "text":
        return text_field(raw.get("text"), _PROVIDER, "a text block's text")
    if kind == "thinking":
        return text_field(raw.get("thinking"), _PROVIDER, "a thinking block's thinking")
    return None


def _canonical_input(value: object) -> str:
    return canonical_json(value if isinstance(value, dict) else {})


class _Segment:
    """The state of one streamed response (one segment of a pause_turn chain)."""

    def __init__(self, call_offset: int) -> None:
        self.started = False
        self.blocks: dict[int, _Block] = {}
        self.order: list[int] = []
        self.calls = call_offset
        self.raw_stop: str | None = None
        self.stopped = False
        self.usage: dict[str, int] = {}
        self.response_id: str | None = None
        self.model: str | None = None

    def feed(self, event: JSONObject) -> list[StreamDelta]:
        kind = event.get("type")
        if kind == "ping":
            return []
        if kind == "message_start":
            message = as_obj(event.get("message"))
            self.started = True
            self.response_id = as_str(message.get("id"))
            self.model = as_str(message.get("model"))
            _usage(message.get("usage"), self.usage)
            return []
        if not self.started:
            raise MalformedResponseError(
                f"{_PROVIDER}: {kind!r} event before message_start", provider=_PROVIDER
            )
        if kind == "content_block_start":
            return self._start(event)
        if kind == "content_block_delta":
            return self._delta(event)
        if kind == "message_delta":
            stop = as_str(as_obj(event.get("delta")).get("stop_reason"))
            if stop:
                self.raw_stop = stop
            _usage(event.get("usage"), self.usage)
        elif kind == "message_stop":
            self.stopped = True
        return []

    def _start(self, event: JSONObject) -> list[StreamDelta]:
        index = as_int(event.get("index"))
        raw = as_obj(event.get("content_block"))
        if index is None or index in self.blocks:
            raise MalformedResponseError(
                f"{_PROVIDER}: content_block_start with a bad index", provider=_PROVIDER
            )
        ordinal = -1
        if raw.get("type") == "tool_use":
            ordinal = self.calls
            self.calls += 1
        block = _Block(raw, ordinal)
        self.blocks[index] = block
        self.order.append(index)
        if ordinal >= 0:
            return [
                ToolCallDelta(index=ordinal, id=as_str(raw.get("id")), name=as_str(raw.get("name")))
            ]
        initial = _block_text(raw)
        if initial:
            block.chunks.append(initial)
            if raw.get("type") == "text":
                return [TextDelta(text=initial)]
            return [ReasoningDelta(text=initial)]
        return []

    def _delta(self, event: JSONObject) -> list[StreamDelta]:
        block = self.blocks.get(as_int(event.get("index")) or 0)
        if block is None or as_int(event.get("index")) is None:
            raise MalformedResponseError(
                f"{_PROVIDER}: content_block_delta for an unknown block", provider=_PROVIDER
            )
        delta = as_obj(event.get("delta"))
        kind = delta.get("type")
        block_kind = block.raw.get("type")
        if kind == "text_delta" and block_kind == "text":
            text = text_field(delta.get("text"), _PROVIDER, "a text delta's text") or ""
            block.chunks.append(text)
            return [TextDelta(text=text)] if text else []
        if kind == "thinking_delta" and block_kind == "thinking":
            text = text_field(delta.get("thinking"), _PROVIDER, "a thinking delta") or ""
            block.chunks.append(text)
            return [ReasoningDelta(text=text)] if text else []
        if kind == "signature_delta" and block_kind == "thinking":
            block.signature = as_str(delta.get("signature"))
            return []
        if kind == "input_json_delta" and block_kind not in ("text", "thinking"):
            # Server tools (``server_tool_use``, ...) stream their input too; it is kept so a
            # pause_turn continuation sends it back.
            piece = as_str(delta.get("partial_json")) or ""
            block.chunks.append(piece)
            if block.ordinal < 0 or not piece:
                return []
            return [ToolCallDelta(index=block.ordinal, arguments_fragment=piece)]
        if kind == "citations_delta" or block_kind not in ("text", "thinking", "tool_use"):
            return []
        raise MalformedResponseError(
            f"{_PROVIDER}: a {kind!r} delta for a {block_kind!r} block", provider=_PROVIDER
        )

    def content(self) -> list[JSONObject]:
        """The assembled blocks in wire form (for a pause_turn continuation)."""
        blocks: list[JSONObject] = []
        for index in self.order:
            block = self.blocks[index]
            raw = dict(block.raw)
            kind = raw.get("type")
            if kind == "text":
                raw["text"] = "".join(block.chunks)
            elif kind == "thinking":
                raw["thinking"] = "".join(block.chunks)
                raw["signature"] = block.signature or ""
            elif kind == "tool_use":
                part = _block_part(block.raw, "".join(block.chunks))
                assert isinstance(part, ToolCall)
                raw["input"] = object_arguments(part)
            elif block.chunks:  # a server tool's streamed input
                raw["input"] = parse_arguments("".join(block.chunks)) or {}
            blocks.append(raw)
        return blocks

    def take_whole(self, payload: JSONObject) -> None:
        """Fill the segment from one whole ``message`` body, as if it had been streamed."""
        self.started = self.stopped = True
        self.response_id = as_str(payload.get("id"))
        self.model = as_str(payload.get("model"))
        self.raw_stop = as_str(payload.get("stop_reason"))
        _usage(payload.get("usage"), self.usage)
        for index, value in enumerate(as_list(payload.get("content"))):
            raw = as_obj(value)
            ordinal = -1
            if raw.get("type") == "tool_use":
                ordinal = self.calls
                self.calls += 1
            block = _Block(raw, ordinal)
            whole = _block_text(raw)
            if whole is None and "input" in raw:
                whole = _canonical_input(raw.get("input"))
            if whole:
                block.chunks.append(whole)
            self.blocks[index] = block
            self.order.append(index)

    def parts(self) -> list[Part]:
        parts: list[Part] = []
        for index in self.order:
            block = self.blocks[index]
            raw = block.raw
            if raw.get("type") == "thinking":
                raw = {**raw, "signature": block.signature or ""}
            text = "".join(block.chunks) if raw.get("type") != "redacted_thinking" else None
            part = _block_part(raw, text)
            if part is not None:
                parts.append(part)
        return parts


class AnthropicModel(ProviderBase):
    """A Claude model on the Anthropic Messages API.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY``; ``base_url`` to ``ANTHROPIC_BASE_URL`` or the
    Anthropic endpoint. ``max_tokens`` (required by the API) defaults to 4096 when the request
    gives none. ``reasoning_budget_tokens`` (or ``reasoning_effort``) turns extended thinking on.
    ``prompt_cache`` (default on) marks cache breakpoints on the tools, the system prompt and the
    history (see ``docs/providers.md``); ``seed`` is not sent (the API
    has none).
    """

    provider = _PROVIDER
    _key_env = ("ANTHROPIC_API_KEY",)
    _url_env = "ANTHROPIC_BASE_URL"
    _default_url = "https://api.anthropic.com"
    _auth_header = "x-api-key"
    _fixed_headers: ClassVar[Mapping[str, str]] = {"anthropic-version": _VERSION}
    _parse_error = staticmethod(_error_info)

    def __init__(
        self,
        model: str,
        *,
        default_max_tokens: int = _DEFAULT_MAX_TOKENS,
        max_pause_continuations: int = 3,
        prompt_cache: bool = True,
        **options: Unpack[ProviderOptions],
    ) -> None:
        super().__init__(model, **options)
        self._default_max_tokens = default_max_tokens
        self._max_pauses = max_pause_continuations
        self._prompt_cache = prompt_cache

    def check_request(self, request: ModelRequest) -> None:
        """Raise :class:`~fsm_agent.ConfigurationError` for settings in ``request`` that the
        API refuses with extended thinking on (a forcing ``tool_choice``, a budget under 1,024
        tokens); the agent asks before a run starts."""
        fault = thinking_fault(request, thinking_budget(request, _EFFORT_BUDGET))
        if fault is not None:
            raise ConfigurationError(fault)

    def build_body(self, request: ModelRequest, *, stream: bool) -> JSONObject:
        """The Messages JSON body for ``request``; a request the API refuses with extended
        thinking on (a hook changed its settings) raises a non-retryable
        :class:`~fsm_agent.errors.InvalidRequestError`, as the API's HTTP 400 would."""
        budget = thinking_budget(request, _EFFORT_BUDGET)
        fault = thinking_fault(request, budget)
        if fault is not None:
            raise InvalidRequestError(fault, provider=_PROVIDER)
        max_tokens = request.max_tokens or self._default_max_tokens
        if budget is not None and max_tokens <= budget:
            max_tokens = budget + self._default_max_tokens
        body: JSONObject = {
            "model": self._model,
            "max_tokens": max_tokens,
            "messages": wire_messages(request),
        }
        if request.system_prompt:
            body["system"] = request.system_prompt
        tools = request.tools
        if request.output is not None:
            tools = (*tools, answer_tool(request.output))
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
            choice = tool_choice(request)  # a tool_choice without tools is rejected
            if request.output is not None and request.tool_choice is None and budget is None:
                # The answer is a tool call: the model must call a tool (extended thinking
                # allows only "auto").
                choice = {**(choice or {}), "type": "any"}
            if choice is not None:
                body["tool_choice"] = choice
        if budget is None:  # extended thinking takes neither
            if request.temperature is not None:
                body["temperature"] = request.temperature
            if request.top_p is not None:
                body["top_p"] = request.top_p
        if request.stop_sequences:
            body["stop_sequences"] = list(request.stop_sequences)
        if budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if stream:
            body["stream"] = True
        if self._prompt_cache:
            mark_cache_breakpoints(body)
        return body

    def _too_many_pauses(self) -> ModelError:
        return ModelError(
            f"{_PROVIDER}: pause_turn continued {self._max_pauses} times without finishing",
            retryable=False,
            provider=_PROVIDER,
        )

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        async with aclosing(self._chain(request, stream=False)) as items:
            async for item in items:
                if isinstance(item, ModelResponse):
                    return item
        raise AssertionError("a pause_turn chain ends with a response or an error")

    def _stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta | ModelResponse]:
        return self._chain(request, stream=True)

    async def _chain(
        self, request: ModelRequest, *, stream: bool
    ) -> AsyncGenerator[StreamDelta | ModelResponse]:
        """One call and its ``pause_turn`` continuations: deltas (when streaming), then the
        response of the whole chain."""
        body = self.build_body(request, stream=stream)
        parts: list[Part] = []
        usage = Usage()
        calls = 0
        answer = AnswerDeltas() if request.output is not None else None
        for _ in range(self._max_pauses + 1):
            segment = _Segment(calls)
            call = self._call("/v1/messages")
            if stream:
                async for delta in self._read(call, body, segment):
                    if answer is None:
                        yield delta
                    elif (mapped := answer.map(delta)) is not None:
                        yield mapped
            else:
                segment.take_whole(await self._post(call, body))
            parts.extend(segment.parts())
            usage = usage + _to_usage(segment.usage)
            calls = segment.calls
            raw = segment.raw_stop
            if raw != "pause_turn":
                finish = anthropic_finish_reason(raw) if raw else FinishReason.OTHER
                if answer is not None:
                    parts, finish = answer_parts(parts, finish)
                yield build_response(
                    parts,
                    finish,
                    raw,
                    usage,
                    segment.response_id,
                    segment.model or self._model,
                )
                return
            body = _continued(body, segment.content())
        raise self._too_many_pauses()

    async def _read(
        self, call: Call, body: JSONObject, segment: _Segment
    ) -> AsyncIterator[StreamDelta]:
        """Fill ``segment`` from one streamed answer, yielding its deltas.

        A stream must end with ``message_stop`` after a stop reason; an earlier end raises a
        retryable :class:`MalformedResponseError`.
        """
        async with open_stream(call, body) as reply:
            if not reply.is_stream:
                payload = as_obj(reply.payload)
                self._raise_if_error(payload, body=None, streamed=False)
                first_call = segment.calls
                segment.take_whole(payload)
                for delta in deltas_of(segment.parts(), first_call):
                    yield delta
                return
            events = self._payloads(reply, SSEDecoder(), until=lambda: segment.stopped)
            async with aclosing(events):
                async for payload in events:
                    for delta in segment.feed(payload):
                        yield delta
        if not segment.stopped or segment.raw_stop is None:
            raise MalformedResponseError(
                f"{_PROVIDER}: the stream ended before message_stop (truncated)",
                provider=_PROVIDER,
            )


def _continued(body: JSONObject, content: list[JSONObject]) -> JSONObject:
    """The body that continues a paused turn: the assistant content sent back as it came."""
    messages = list(as_list(body.get("messages")))
    last = as_obj(messages[-1]) if messages else {}
    if last.get("role") == "assistant":
        messages[-1] = {"role": "assistant", "content": [*as_list(last["content"]), *content]}
    else:
        messages.append({"role": "assistant", "content": content})
    return {**body, "messages": messages}
