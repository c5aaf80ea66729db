"""Google Gemini API: ``generateContent`` and ``streamGenerateContent?alt=sse``.

Instructions go in ``systemInstruction``; tool calls are whole ``functionCall`` parts (no argument
deltas) usually without an id, so a stable id is synthesised and kept on the call; results go back
as ``functionResponse`` parts. ``thoughtSignature`` values are kept verbatim and replayed in the
part they came with. A 429 carries its delay in the body (``google.rpc.RetryInfo.retryDelay``); a
per-day quota is not retryable. Usage arrives as cumulative snapshots whose fields may drop out,
so snapshots are merged field by field.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping

import httpx
from pydantic import JsonValue, SecretStr

from ..errors import ConfigurationError, MalformedResponseError
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
    new_call_id,
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
from ._retry_after import parse_duration
from ._sse import SSEDecoder

__all__ = ["GeminiModel", "gemini_finish_reason"]

_PROVIDER = "gemini"
# Documented bypass value for a function call whose history came from another provider.
_SKIP_SIGNATURE = "skip_thought_signature_validator"
_EFFORT_BUDGET = {"low": 1024, "medium": 8192, "high": 24576}

_FINISH: dict[str, FinishReason] = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "MALFORMED_FUNCTION_CALL": FinishReason.ERROR,
    "UNEXPECTED_TOOL_CALL": FinishReason.ERROR,
    "TOO_MANY_TOOL_CALLS": FinishReason.ERROR,
    "LANGUAGE": FinishReason.ERROR,
    "NO_IMAGE": FinishReason.ERROR,
    **dict.fromkeys(
        (
            "SAFETY",
            "RECITATION",
            "BLOCKLIST",
            "PROHIBITED_CONTENT",
            "SPII",
            "IMAGE_SAFETY",
            "IMAGE_PROHIBITED_CONTENT",
            "IMAGE_RECITATION",
            "MODEL_ARMOR",
        ),
        FinishReason.CONTENT_FILTER,
    ),
}


def gemini_finish_reason(raw: str) -> FinishReason:
    """Normalise a Gemini ``finishReason``; unknown values (``OTHER`` included) are ``other``."""
    return _FINISH.get(raw, FinishReason.OTHER)


def _error_info(payload: object) -> ErrorInfo:
    error = as_obj(as_obj(payload).get("error"))
    delay: float | None = None
    retryable: bool | None = None
    for detail_value in as_list(error.get("details")):
        detail = as_obj(detail_value)
        kind = as_str(detail.get("@type")) or ""
        if kind.endswith("google.rpc.RetryInfo"):
            delay = parse_duration(as_str(detail.get("retryDelay")) or "")
        elif kind.endswith("google.rpc.QuotaFailure"):
            for violation in as_list(detail.get("violations")):
                quota = as_str(as_obj(violation).get("quotaId")) or ""
                if "perday" in quota.lower():
                    retryable = False
    return ErrorInfo(
        message=as_str(error.get("message")),
        kind=as_str(error.get("status")),
        code=as_int(error.get("code")),
        retry_after=delay,
        retryable=retryable,
    )


def _model_parts(message: Message) -> list[JSONObject]:
    parts: list[JSONObject] = []
    stamped = False
    for part in message.parts:
        data = (part.provider_data if isinstance(part, ReasoningPart | ToolCall) else None) or {}
        ours = data.get("provider") == _PROVIDER
        if isinstance(part, ReasoningPart):
            if ours and part.signature:
                wire: JSONObject = {"text": part.text, "thoughtSignature": part.signature}
                if data.get("thought"):
                    wire["thought"] = True
                parts.append(wire)
        elif isinstance(part, TextPart) and part.text:
            parts.append({"text": part.text})
        elif isinstance(part, ToolCall):
            call: JSONObject = {"name": part.name, "args": object_arguments(part)}
            if ours and data.get("server_id"):
                call["id"] = part.id
            wire = {"functionCall": call}
            signature = as_str(data.get("thought_signature"))
            if signature:
                wire["thoughtSignature"] = signature
            elif not ours and not stamped:
                wire["thoughtSignature"] = _SKIP_SIGNATURE
                stamped = True
            parts.append(wire)
    return parts


def _user_parts(message: Message, calls: Mapping[str, ToolCall]) -> list[JSONObject]:
    parts: list[JSONObject] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            parts.append({"text": part.text})
        elif isinstance(part, ImagePart):
            if part.url:
                parts.append({"fileData": {"mimeType": part.media_type, "fileUri": part.url}})
            else:
                parts.append({"inlineData": {"mimeType": part.media_type, "data": part.data}})
        elif isinstance(part, ToolResult):
            response: JSONObject = {
                "name": part.name,
                "response": {("error" if part.is_error else "result"): part.content},
            }
            call = calls.get(part.call_id)
            if call is not None and (call.provider_data or {}).get("server_id"):
                response["id"] = part.call_id
            parts.append({"functionResponse": response})
    return parts


def _contents(request: ModelRequest) -> list[JSONObject]:
    calls = {c.id: c for m in request.messages for c in m.tool_calls}
    contents: list[JSONObject] = []
    for message in request.messages:
        if message.role is Role.SYSTEM:
            continue
        role = "model" if message.role is Role.ASSISTANT else "user"
        parts = _model_parts(message) if role == "model" else _user_parts(message, calls)
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            previous = contents[-1]["parts"]
            assert isinstance(previous, list)
            previous.extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    return contents


class _Assembler:
    """Folds ``GenerateContentResponse`` objects (one, or a stream of them) into a response."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.parts: list[Part] = []
        self.calls = 0
        self.raw_finish: str | None = None
        self.blocked: str | None = None
        self.usage: dict[str, int] = {}
        self.response_id: str | None = None
        self.model_version: str | None = None

    @property
    def finished(self) -> bool:
        return self.raw_finish is not None or self.blocked is not None

    def feed(self, payload: JSONObject) -> list[StreamDelta]:
        self.response_id = self.response_id or as_str(payload.get("responseId"))
        self.model_version = self.model_version or as_str(payload.get("modelVersion"))
        for key, value in as_obj(payload.get("usageMetadata")).items():
            count = as_int(value)
            if count is not None:
                self.usage[key] = count
        candidates = as_list(payload.get("candidates"))
        if not candidates:
            block = as_str(as_obj(payload.get("promptFeedback")).get("blockReason"))
            if block:
                self.blocked = block
            return []
        candidate = as_obj(candidates[0])
        deltas: list[StreamDelta] = []
        for value in as_list(as_obj(candidate.get("content")).get("parts")):
            deltas.extend(self._part(as_obj(value)))
        finish = as_str(candidate.get("finishReason"))
        if finish:
            self.raw_finish = finish
        return deltas

    def _part(self, part: JSONObject) -> list[StreamDelta]:
        signature = as_str(part.get("thoughtSignature"))
        function = as_obj(part.get("functionCall"))
        if function:
            server_id = as_str(function.get("id"))
            call_id = server_id or (
                f"gemini_{self.response_id}_{self.calls}" if self.response_id else new_call_id()
            )
            data: dict[str, JsonValue] = {"provider": _PROVIDER, "server_id": bool(server_id)}
            if signature:
                data["thought_signature"] = signature
            arguments = canonical_json(function.get("args") or {})
            name = as_str(function.get("name")) or ""
            self.parts.append(finish_tool_call(call_id, name, arguments, data))
            delta = ToolCallDelta(
                index=self.calls, id=call_id, name=name, arguments_fragment=arguments
            )
            self.calls += 1
            return [delta]
        text = as_str(part.get("text"))
        if text is None:
            return []  # executable code, inline output data, ...: no neutral form
        if part.get("thought") is True:
            self.parts.append(
                ReasoningPart(
                    text=text,
                    signature=signature,
                    provider_data={"provider": _PROVIDER, "thought": True},
                )
            )
            return [ReasoningDelta(text=text)] if text else []
        if text:
            self.parts.append(TextPart(text=text))
        if signature:
            self.parts.append(
                ReasoningPart(
                    text="",
                    signature=signature,
                    provider_data={"provider": _PROVIDER, "thought": False},
                )
            )
        return [TextDelta(text=text)] if text else []

    def response(self) -> ModelResponse:
        if self.blocked is not None:
            reason, raw = FinishReason.CONTENT_FILTER, self.blocked
        elif self.raw_finish is not None:
            reason, raw = gemini_finish_reason(self.raw_finish), self.raw_finish
        else:
            raise MalformedResponseError(
                f"{_PROVIDER}: the response ended without a finishReason (truncated)",
                provider=_PROVIDER,
            )
        thoughts = self.usage.get("thoughtsTokenCount", 0)
        usage = Usage(
            requests=1,
            input_tokens=self.usage.get("promptTokenCount", 0),
            output_tokens=self.usage.get("candidatesTokenCount", 0) + thoughts,
            cache_read_tokens=self.usage.get("cachedContentTokenCount", 0),
            reasoning_tokens=thoughts,
        )
        return build_response(
            self.parts, reason, raw, usage, self.response_id, self.model_version or self.model
        )


class GeminiModel:
    """A Gemini model on the Gemini API (``generativelanguage``).

    ``api_key`` defaults to ``GEMINI_API_KEY``, then ``GOOGLE_API_KEY``; it is sent in the
    ``x-goog-api-key`` header, never in the URL. ``parallel_tool_calls`` has no Gemini equivalent
    and is ignored. ``reasoning_budget_tokens`` (or ``reasoning_effort``) sets ``thinkingBudget``
    and asks for thought summaries.
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
        extra_headers: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        environ = os.environ if env is None else env
        model = model.removeprefix("models/")
        if not model:
            raise ConfigurationError("GeminiModel needs a model name")
        self._model = model
        self._api_key = resolve_api_key(api_key, environ, "GEMINI_API_KEY", "GOOGLE_API_KEY")
        url = base_url or "https://generativelanguage.googleapis.com/v1beta"
        self._base_url = url.rstrip("/")
        self._timeouts = timeouts or Timeouts()
        self._clients = ClientHolder(client, self._timeouts)
        self._context_window = context_window
        self._max_retry_after = max_retry_after
        self._extra_headers = dict(extra_headers or {})

    @property
    def name(self) -> str:
        """``"gemini:<model>"``."""
        return f"{_PROVIDER}:{self._model}"

    @property
    def context_window(self) -> int | None:
        """The context window given at construction, or ``None``."""
        return self._context_window

    def __repr__(self) -> str:
        return f"GeminiModel(model={self._model!r}, base_url={self._base_url!r})"

    async def aclose(self) -> None:
        """Close the HTTP client this model created (a client passed in stays open)."""
        await self._clients.aclose()

    async def __aenter__(self) -> GeminiModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _call(self, method: str, params: Mapping[str, str] | None = None) -> Call:
        headers = {"content-type": "application/json", **self._extra_headers}
        if self._api_key is not None:
            headers["x-goog-api-key"] = self._api_key.get_secret_value()
        return Call(
            client=self._clients.get(),
            url=f"{self._base_url}/models/{self._model}:{method}",
            headers=headers,
            provider=_PROVIDER,
            parse_error=_error_info,
            timeouts=self._timeouts,
            max_retry_after=self._max_retry_after,
            secret=self._api_key,
            params=params,
        )

    def build_body(self, request: ModelRequest) -> JSONObject:
        """The ``generateContent`` JSON body for ``request`` (the same for streaming)."""
        body: JSONObject = {"contents": _contents(request)}
        if request.system_prompt:
            body["systemInstruction"] = {"parts": [{"text": request.system_prompt}]}
        if request.tools:
            body["tools"] = [
                {
                    "functionDeclarations": [
                        {
                            "name": t.name,
                            "description": t.description,
                            "parametersJsonSchema": t.parameters,
                        }
                        for t in request.tools
                    ]
                }
            ]
        if request.tool_choice is not None:
            config: JSONObject
            if request.tool_choice in ("auto", "none"):
                config = {"mode": request.tool_choice.upper()}
            elif request.tool_choice == "required":
                config = {"mode": "ANY"}
            else:
                config = {"mode": "ANY", "allowedFunctionNames": [request.tool_choice]}
            body["toolConfig"] = {"functionCallingConfig": config}
        generation: JSONObject = {}
        if request.max_tokens is not None:
            generation["maxOutputTokens"] = request.max_tokens
        if request.temperature is not None:
            generation["temperature"] = request.temperature
        if request.stop_sequences:
            generation["stopSequences"] = list(request.stop_sequences)
        budget = request.reasoning_budget_tokens or (
            _EFFORT_BUDGET[request.reasoning_effort] if request.reasoning_effort else None
        )
        if budget is not None:
            generation["thinkingConfig"] = {"thinkingBudget": budget, "includeThoughts": True}
        if generation:
            body["generationConfig"] = generation
        return body

    def _raise_if_error(self, payload: JSONObject, body: str | None = None) -> None:
        if payload.get("error"):
            raise classify_error(
                provider=_PROVIDER,
                status=None,
                info=_error_info(payload),
                body=body,
                max_retry_after=self._max_retry_after,
                secret=self._api_key,
            )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One non-streaming ``generateContent`` call."""
        payload = as_obj(await post_json(self._call("generateContent"), self.build_body(request)))
        self._raise_if_error(payload)
        assembler = _Assembler(self._model)
        assembler.feed(payload)
        if not assembler.finished and as_list(payload.get("candidates")):
            assembler.raw_finish = "FINISH_REASON_UNSPECIFIED"
        return assembler.response()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Stream one call: deltas as they arrive, then the final response.

        The response is yielded only once a chunk carried a ``finishReason`` (or the prompt was
        blocked); a stream that ends before raises a retryable :class:`MalformedResponseError`.
        """
        call = self._call("streamGenerateContent", {"alt": "sse"})
        assembler = _Assembler(self._model)
        # Gemini may write an error object without a ``data:`` prefix, over several lines.
        decoder = SSEDecoder(keep_unknown_lines=True)
        async with open_stream(call, self.build_body(request)) as response:
            async for chunk in response.aiter_bytes():
                for event in decoder.feed(chunk):
                    payload = as_obj(decode_json(event.data, _PROVIDER))
                    self._raise_if_error(payload, event.data)
                    for delta in assembler.feed(payload):
                        yield delta
        if not assembler.finished and decoder.unknown_lines:
            bare = "\n".join(decoder.unknown_lines)
            payload = as_obj(decode_json(bare, _PROVIDER))
            self._raise_if_error(payload, bare)
        yield assembler.response()
