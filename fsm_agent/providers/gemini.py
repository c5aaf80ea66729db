"""Google Gemini API: ``generateContent`` and ``streamGenerateContent?alt=sse``.

A streaming request answered with Gemini's own non-SSE shape, a JSON array of the chunks, is read
as that stream.

Instructions go in ``systemInstruction``; tool calls are whole ``functionCall`` parts (no argument
deltas) usually without an id, so a stable id is synthesised and kept on the call; results go back
as ``functionResponse`` parts. ``thoughtSignature`` values are kept verbatim and replayed in the
part they came with. A 429 carries its delay in the body (``google.rpc.RetryInfo.retryDelay``); a
per-day quota is not retryable. Usage arrives as cumulative snapshots whose fields may drop out,
so snapshots are merged field by field.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import Unpack

from pydantic import JsonValue

from ..errors import MalformedResponseError
from ..values.messages import (
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
    append_turn,
    as_count,
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
    text_field,
    thinking_budget,
)
from ._base import ProviderBase, ProviderOptions
from ._http import ErrorInfo, open_stream
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
    "MALFORMED_RESPONSE": FinishReason.ERROR,
    "MISSING_THOUGHT_SIGNATURE": FinishReason.ERROR,
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
    return _FINISH.get(raw) or FinishReason.OTHER


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
        append_turn(contents, role, "parts", parts)
    return contents


def _calling_config(choice: str) -> JSONObject:
    if choice in ("auto", "none"):
        return {"mode": choice.upper()}
    if choice == "required":
        return {"mode": "ANY"}
    return {"mode": "ANY", "allowedFunctionNames": [choice]}


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
            count = as_count(value)
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
        text = text_field(part.get("text"), _PROVIDER, "a part's text")
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


class GeminiModel(ProviderBase):
    """A Gemini model on the Gemini API (``generativelanguage``).

    ``api_key`` defaults to ``GEMINI_API_KEY``, then ``GOOGLE_API_KEY``; it is sent in the
    ``x-goog-api-key`` header, never in the URL. ``parallel_tool_calls`` has no Gemini equivalent
    and is ignored. ``reasoning_budget_tokens`` (or ``reasoning_effort``) sets ``thinkingBudget``
    and asks for thought summaries.
    """

    provider = _PROVIDER
    _key_env = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    _default_url = "https://generativelanguage.googleapis.com/v1beta"
    _auth_header = "x-goog-api-key"
    _parse_error = staticmethod(_error_info)

    def __init__(self, model: str, **options: Unpack[ProviderOptions]) -> None:
        super().__init__(model.removeprefix("models/"), **options)

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
            if request.tool_choice is not None:  # a toolConfig without tools is rejected
                body["toolConfig"] = {"functionCallingConfig": _calling_config(request.tool_choice)}
        generation: JSONObject = {}
        if request.max_tokens is not None:
            generation["maxOutputTokens"] = request.max_tokens
        if request.temperature is not None:
            generation["temperature"] = request.temperature
        if request.top_p is not None:
            generation["topP"] = request.top_p
        if request.seed is not None:
            generation["seed"] = request.seed
        if request.stop_sequences:
            generation["stopSequences"] = list(request.stop_sequences)
        budget = thinking_budget(request, _EFFORT_BUDGET)
        if budget is not None:
            generation["thinkingConfig"] = {"thinkingBudget": budget, "includeThoughts": True}
        if request.output is not None:
            generation["responseMimeType"] = "application/json"
            generation["responseJsonSchema"] = request.output.json_schema
        if generation:
            body["generationConfig"] = generation
        return body

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        call = self._call(f"/models/{self._model}:generateContent")
        return self._response(await self._post(call, self.build_body(request)))

    def _response(self, payload: JSONObject) -> ModelResponse:
        """The response of one whole ``GenerateContentResponse``."""
        assembler = _Assembler(self._model)
        assembler.feed(payload)
        if not assembler.finished and as_list(payload.get("candidates")):
            assembler.raw_finish = "FINISH_REASON_UNSPECIFIED"
        return assembler.response()

    async def _stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta | ModelResponse]:
        # The response is yielded only once a chunk carried a ``finishReason`` (or the prompt
        # was blocked).
        call = self._call(f"/models/{self._model}:streamGenerateContent", {"alt": "sse"})
        assembler = _Assembler(self._model)
        # Gemini may write an error object without a ``data:`` prefix, over several lines.
        decoder = SSEDecoder(keep_unknown_lines=True)
        async with open_stream(call, self.build_body(request)) as reply:
            if isinstance(reply.payload, list):
                # Gemini's own stream shape without ``alt=sse``: a JSON array of the chunks.
                for value in reply.payload:
                    payload = as_obj(value)
                    self._raise_if_error(payload, body=None, streamed=True)
                    for delta in assembler.feed(payload):
                        yield delta
            elif not reply.is_stream:
                for item in self._whole(reply, self._response):
                    yield item
                return
            else:
                async with aclosing(self._payloads(reply, decoder)) as events:
                    async for payload in events:
                        for delta in assembler.feed(payload):
                            yield delta
        if not assembler.finished and decoder.unknown_lines:
            bare = "\n".join(decoder.unknown_lines)
            self._raise_if_error(as_obj(decode_json(bare, _PROVIDER)), body=bare, streamed=True)
        yield assembler.response()
