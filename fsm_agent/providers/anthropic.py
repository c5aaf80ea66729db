"""Anthropic Messages API.

Instructions go in the ``system`` parameter; tool calls are ``tool_use`` blocks and results are
``tool_result`` blocks in a user message; thinking blocks come back with their signature, kept
verbatim and replayed. A ``pause_turn`` stop is continued transparently (the assistant content is
sent back as is), bounded by ``max_pause_continuations``. A mid-stream ``error`` event is
classified by its ``error.type`` (``overloaded_error`` is retryable like a 529).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping

import httpx
from pydantic import SecretStr

from ..errors import ConfigurationError, MalformedResponseError, ModelError
from ..messages import (
    FinishReason,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    Part,
    ReasoningDelta,
    ReasoningPart,
    Role,
    StreamDelta,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Usage,
)
from ._assembly import (
    JSONObject,
    as_int,
    as_list,
    as_obj,
    as_str,
    build_response,
    canonical_json,
    decode_json,
    finish_tool_call,
    object_arguments,
)
from ._http import (
    DEFAULT_MAX_RETRY_AFTER,
    Call,
    ClientHolder,
    ErrorInfo,
    Timeouts,
    classify_error,
    open_stream,
    post_json,
    resolve_api_key,
)
from ._sse import SSEDecoder

__all__ = ["AnthropicModel", "anthropic_finish_reason"]

_PROVIDER = "anthropic"
_VERSION = "2023-06-01"
_DEFAULT_MAX_TOKENS = 4096
_EFFORT_BUDGET = {"low": 1024, "medium": 4096, "high": 16384}

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
    return _FINISH.get(raw, FinishReason.OTHER)


def _error_info(payload: object) -> ErrorInfo:
    error = as_obj(as_obj(payload).get("error"))
    return ErrorInfo(message=as_str(error.get("message")), kind=as_str(error.get("type")))


def _image_block(image: ImagePart) -> JSONObject:
    if image.url:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image.media_type, "data": image.data or ""},
    }


def _assistant_blocks(message: Message) -> list[JSONObject]:
    blocks: list[JSONObject] = []
    for part in message.parts:
        if isinstance(part, ReasoningPart):
            origin = (part.provider_data or {}).get("provider")
            if part.redacted and origin == _PROVIDER:
                blocks.append(
                    {"type": "redacted_thinking", "data": (part.provider_data or {}).get("data")}
                )
            elif part.signature and origin == _PROVIDER:
                blocks.append(
                    {"type": "thinking", "thinking": part.text, "signature": part.signature}
                )
            # Unsigned reasoning (or another provider's) cannot be replayed: Anthropic rejects it.
        elif isinstance(part, TextPart) and part.text:
            blocks.append({"type": "text", "text": part.text})
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


def _user_blocks(message: Message) -> list[JSONObject]:
    blocks: list[JSONObject] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append(_image_block(part))
        elif isinstance(part, ToolResult):
            blocks.append(
                {
                    "type": "tool_result",
                    "tool_use_id": part.call_id,
                    "content": part.content,
                    **({"is_error": True} if part.is_error else {}),
                }
            )
    return blocks


def _wire_messages(request: ModelRequest) -> list[JSONObject]:
    """Messages with roles alternating: consecutive user-side messages (tool results of a
    parallel batch, then a user nudge) are merged into one user message."""
    wire: list[JSONObject] = []
    for message in request.messages:
        if message.role is Role.SYSTEM:
            continue
        role = "assistant" if message.role is Role.ASSISTANT else "user"
        blocks = _assistant_blocks(message) if role == "assistant" else _user_blocks(message)
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            previous = wire[-1]["content"]
            assert isinstance(previous, list)
            previous.extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    return wire


def _usage(value: object, into: dict[str, int]) -> None:
    """Replace (never add) the counters present: message_delta usage is cumulative."""
    for key, number in as_obj(value).items():
        count = as_int(number)
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
        if kind == "error":
            raise classify_error(provider=_PROVIDER, status=None, info=_error_info(event))
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
        initial = as_str(raw.get("text")) or as_str(raw.get("thinking"))
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
            text = as_str(delta.get("text")) or ""
            block.chunks.append(text)
            return [TextDelta(text=text)] if text else []
        if kind == "thinking_delta" and block_kind == "thinking":
            text = as_str(delta.get("thinking")) or ""
            block.chunks.append(text)
            return [ReasoningDelta(text=text)] if text else []
        if kind == "signature_delta" and block_kind == "thinking":
            block.signature = as_str(delta.get("signature"))
            return []
        if kind == "input_json_delta" and block_kind == "tool_use":
            piece = as_str(delta.get("partial_json")) or ""
            block.chunks.append(piece)
            return [ToolCallDelta(index=block.ordinal, arguments_fragment=piece)] if piece else []
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
            blocks.append(raw)
        return blocks

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


class AnthropicModel:
    """A Claude model on the Anthropic Messages API.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY``; ``base_url`` to ``ANTHROPIC_BASE_URL`` or the
    Anthropic endpoint. ``max_tokens`` (required by the API) defaults to 4096 when the request
    gives none. ``reasoning_budget_tokens`` (or ``reasoning_effort``) turns extended thinking on.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | SecretStr | None = None,
        base_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeouts: Timeouts | None = None,
        context_window: int | None = None,
        max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
        default_max_tokens: int = _DEFAULT_MAX_TOKENS,
        max_pause_continuations: int = 3,
        extra_headers: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        environ = os.environ if env is None else env
        if not model:
            raise ConfigurationError("AnthropicModel needs a model name")
        self._model = model
        self._api_key = resolve_api_key(api_key, environ, "ANTHROPIC_API_KEY")
        url = base_url or environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        self._base_url = url.rstrip("/")
        self._timeouts = timeouts or Timeouts()
        self._clients = ClientHolder(client, self._timeouts)
        self._context_window = context_window
        self._max_retry_after = max_retry_after
        self._default_max_tokens = default_max_tokens
        self._max_pauses = max_pause_continuations
        self._extra_headers = dict(extra_headers or {})

    @property
    def name(self) -> str:
        """``"anthropic:<model>"``."""
        return f"{_PROVIDER}:{self._model}"

    @property
    def context_window(self) -> int | None:
        """The context window given at construction, or ``None``."""
        return self._context_window

    def __repr__(self) -> str:
        return f"AnthropicModel(model={self._model!r}, base_url={self._base_url!r})"

    async def aclose(self) -> None:
        """Close the HTTP client this model created (a client passed in stays open)."""
        await self._clients.aclose()

    async def __aenter__(self) -> AnthropicModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _call(self) -> Call:
        headers = {
            "content-type": "application/json",
            "anthropic-version": _VERSION,
            **self._extra_headers,
        }
        if self._api_key is not None:
            headers["x-api-key"] = self._api_key.get_secret_value()
        return Call(
            client=self._clients.get(),
            url=f"{self._base_url}/v1/messages",
            headers=headers,
            provider=_PROVIDER,
            parse_error=_error_info,
            timeouts=self._timeouts,
            max_retry_after=self._max_retry_after,
            secret=self._api_key,
        )

    def build_body(self, request: ModelRequest, *, stream: bool) -> JSONObject:
        """The Messages JSON body for ``request``."""
        budget = request.reasoning_budget_tokens or (
            _EFFORT_BUDGET[request.reasoning_effort] if request.reasoning_effort else None
        )
        max_tokens = request.max_tokens or self._default_max_tokens
        if budget is not None and max_tokens <= budget:
            max_tokens = budget + self._default_max_tokens
        body: JSONObject = {
            "model": self._model,
            "max_tokens": max_tokens,
            "messages": _wire_messages(request),
        }
        if request.system_prompt:
            body["system"] = request.system_prompt
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        choice: JSONObject | None = None
        if request.tool_choice in ("auto", "none"):
            choice = {"type": request.tool_choice}
        elif request.tool_choice == "required":
            choice = {"type": "any"}
        elif request.tool_choice is not None:
            choice = {"type": "tool", "name": request.tool_choice}
        if request.parallel_tool_calls is False and request.tools:
            choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
        if choice is not None:
            body["tool_choice"] = choice
        if request.temperature is not None and budget is None:
            body["temperature"] = request.temperature
        if request.stop_sequences:
            body["stop_sequences"] = list(request.stop_sequences)
        if budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if stream:
            body["stream"] = True
        return body

    def _too_many_pauses(self) -> ModelError:
        return ModelError(
            f"{_PROVIDER}: pause_turn continued {self._max_pauses} times without finishing",
            retryable=False,
            provider=_PROVIDER,
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One non-streaming call (plus any ``pause_turn`` continuations)."""
        body = self.build_body(request, stream=False)
        parts: list[Part] = []
        usage = Usage()
        for _ in range(self._max_pauses + 1):
            payload = as_obj(await post_json(self._call(), body))
            if payload.get("type") == "error":
                raise classify_error(provider=_PROVIDER, status=None, info=_error_info(payload))
            content = [as_obj(b) for b in as_list(payload.get("content"))]
            parts.extend(p for p in (_block_part(b) for b in content) if p is not None)
            counts: dict[str, int] = {}
            _usage(payload.get("usage"), counts)
            usage = usage + _to_usage(counts)
            raw = as_str(payload.get("stop_reason"))
            if raw != "pause_turn":
                reason = anthropic_finish_reason(raw) if raw else FinishReason.OTHER
                return build_response(
                    parts,
                    reason,
                    raw,
                    usage,
                    as_str(payload.get("id")),
                    as_str(payload.get("model")) or self._model,
                )
            body = _continued(body, content)
        raise self._too_many_pauses()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Stream one call (and any ``pause_turn`` continuations), then the final response.

        The response is yielded only after ``message_stop`` with a stop reason; a stream that
        ends before raises a retryable :class:`MalformedResponseError`.
        """
        body = self.build_body(request, stream=True)
        parts: list[Part] = []
        usage = Usage()
        calls = 0
        for _ in range(self._max_pauses + 1):
            segment = _Segment(calls)
            async with open_stream(self._call(), body) as response:
                decoder = SSEDecoder()
                async for chunk in response.aiter_bytes():
                    for event in decoder.feed(chunk):
                        payload = as_obj(decode_json(event.data, _PROVIDER))
                        for delta in segment.feed(payload):
                            yield delta
                        if segment.stopped:
                            break
                    if segment.stopped:
                        break
            if not segment.stopped or segment.raw_stop is None:
                raise MalformedResponseError(
                    f"{_PROVIDER}: the stream ended before message_stop (truncated)",
                    provider=_PROVIDER,
                )
            parts.extend(segment.parts())
            usage = usage + _to_usage(segment.usage)
            calls = segment.calls
            if segment.raw_stop != "pause_turn":
                yield build_response(
                    parts,
                    anthropic_finish_reason(segment.raw_stop),
                    segment.raw_stop,
                    usage,
                    segment.response_id,
                    segment.model or self._model,
                )
                return
            body = _continued(body, segment.content())
        raise self._too_many_pauses()


def _continued(body: JSONObject, content: list[JSONObject]) -> JSONObject:
    """The body that continues a paused turn: the assistant content sent back as it came."""
    messages = list(as_list(body.get("messages")))
    last = as_obj(messages[-1]) if messages else {}
    if last.get("role") == "assistant":
        messages[-1] = {"role": "assistant", "content": [*as_list(last["content"]), *content]}
    else:
        messages.append({"role": "assistant", "content": content})
    return {**body, "messages": messages}
