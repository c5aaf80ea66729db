"""OpenAI Chat Completions, and every server that speaks it (vLLM, Ollama, llama.cpp, OpenRouter).

Compatible servers bend the format in known ways; each bend is handled where the chunk is read
and listed in ``docs/providers.md``: chunks with ``choices: null`` or ``delta: null``, tool-call
deltas without ``index``, ids and names repeated on every fragment, two calls sharing one index
with different ids, arguments sent as a JSON object, error objects inside a 200 stream, reasoning
in ``reasoning_content`` or ``reasoning``, and non-standard finish reasons.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from functools import partial
from typing import Literal, Unpack

import httpx
from pydantic import JsonValue

from ..errors import MalformedResponseError, ProviderServerError
from ..values.define import builder
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
    as_count,
    as_int,
    as_list,
    as_obj,
    as_str,
    build_response,
    canonical_json,
    finish_tool_call,
    image_url,
    json_value,
    object_arguments,
    text_field,
    text_part,
)
from ._base import ProviderBase, ProviderOptions
from ._http import ErrorInfo, open_stream
from ._output import AnswerDeltas, answer_parts, answer_tool, answers_by_tool
from ._sse import SSEDecoder

__all__ = ["EmptyContent", "OpenAIChatModel", "openai_finish_reason"]

_PROVIDER = "openai"
_new_usage = builder(Usage)  # the reader's values are built on every model call
_OFFICIAL_HOST = "api.openai.com"

_FINISH: dict[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "eos_token": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
    "sensitive": FinishReason.CONTENT_FILTER,
}
# Servers that report a failed generation with HTTP 200 and one of these: nothing is committed,
# so the attempt is a retryable server error rather than a finished turn.
_FAILED = frozenset({"abort", "error", "network_error", "cancelled", "capacity"})
# Placeholders some servers put where "not finished yet" belongs.
_NOT_FINISHED = frozenset({"", "null"})


def openai_finish_reason(raw: str) -> FinishReason:
    """Normalise a Chat Completions ``finish_reason``; unknown values are ``other``."""
    return _FINISH.get(raw) or FinishReason.OTHER


def _error_info(payload: object) -> ErrorInfo:
    error = as_obj(as_obj(payload).get("error"))
    if not error and isinstance(as_obj(payload).get("error"), str):
        return ErrorInfo(message=as_str(as_obj(payload)["error"]))
    code = error.get("code")
    kind = as_str(error.get("type"))
    if isinstance(code, str) and code in ("context_length_exceeded", "insufficient_quota"):
        kind = code
    return ErrorInfo(message=as_str(error.get("message")), kind=kind, code=as_int(code))


def _usage(value: object) -> Usage | None:
    usage = as_obj(value)
    if not usage:
        return None
    prompt = usage.get("prompt_tokens_details")
    completion = usage.get("completion_tokens_details")
    # The constructor validates nothing: each count is checked to be an integer of 0 or more
    # as it is read.
    return _new_usage(
        requests=1,
        input_tokens=as_count(usage.get("prompt_tokens")) or 0,
        output_tokens=as_count(usage.get("completion_tokens")) or 0,
        cache_read_tokens=_detail(prompt, "cached_tokens"),
        reasoning_tokens=_detail(completion, "reasoning_tokens"),
    )


def _detail(details: object, name: str) -> int:
    """The count ``name`` of a usage's details object (0 when it is absent or not a count)."""
    return (as_count(details.get(name)) or 0) if isinstance(details, dict) else 0


def _user_content(message: Message) -> str | list[JSONObject]:
    if all(isinstance(p, TextPart) for p in message.parts):
        return message.text
    content: list[JSONObject] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            content.append({"type": "image_url", "image_url": {"url": image_url(part)}})
    return content


def _wire_call(call: ToolCall) -> JSONObject:
    arguments = call.arguments_json if call.arguments is not None else None
    wire: JSONObject = {
        "id": call.id,
        "type": "function",
        "function": {
            "name": call.name,
            "arguments": arguments or canonical_json(object_arguments(call)),
        },
    }
    extra = (call.provider_data or {}).get("extra_content")
    if extra is not None:
        wire["extra_content"] = extra
    return wire


EmptyContent = Literal["empty", "null", "omit"]
"""How an assistant turn without text (one that only calls tools) carries its ``content``:
``"empty"`` sends ``""`` (what strict servers require), ``"null"`` sends ``null``, ``"omit"``
leaves the field out."""


def _wire_messages(
    request: ModelRequest, system_role: str, empty: EmptyContent
) -> list[JSONObject]:
    wire: list[JSONObject] = []
    for message in request.messages:
        if message.role is Role.SYSTEM:
            wire.append({"role": system_role, "content": message.text})
        elif message.role is Role.USER:
            wire.append({"role": "user", "content": _user_content(message)})
        elif message.role is Role.ASSISTANT:
            entry: JSONObject = {"role": "assistant"}
            if message.text or empty == "empty":
                entry["content"] = message.text
            elif empty == "null":
                entry["content"] = None
            if message.tool_calls:
                entry["tool_calls"] = [_wire_call(c) for c in message.tool_calls]
            wire.append(entry)
        else:
            for result in message.parts:
                if isinstance(result, ToolResult):
                    wire.append(
                        {"role": "tool", "tool_call_id": result.call_id, "content": result.content}
                    )
    return wire


class _Slot:
    """One tool call being assembled from stream fragments."""

    __slots__ = ("arguments", "call_id", "extra", "name", "ordinal")

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal
        self.call_id: str | None = None
        self.name = ""
        self.arguments: list[str] = []
        self.extra: JsonValue = None

    def close(self) -> ToolCall:
        data: dict[str, JsonValue] | None = (
            {"extra_content": self.extra} if self.extra is not None else None
        )
        return finish_tool_call(self.call_id, self.name, "".join(self.arguments), data)


class _StreamAssembler:
    """Folds ``chat.completion.chunk`` objects into deltas and, at the end, one response."""

    def __init__(self, model: str, *, answer_tool: bool = False) -> None:
        self.model = model
        self.answer_tool = answer_tool
        self.served_model: str | None = None
        self.response_id: str | None = None
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refused = False
        self.slots: list[_Slot] = []
        self.by_index: dict[int, _Slot] = {}
        self.by_id: dict[str, _Slot] = {}
        self.raw_finish: str | None = None
        self.usage: Usage | None = None

    def feed(self, chunk: JSONObject) -> list[StreamDelta]:
        if self.response_id is None:
            self.response_id = as_str(chunk.get("id"))
        if not self.served_model:
            self.served_model = as_str(chunk.get("model"))
        usage = _usage(chunk.get("usage"))
        if usage is not None:
            self.usage = usage
        deltas: list[StreamDelta] = []
        for choice_value in as_list(chunk.get("choices")):
            choice = as_obj(choice_value)
            if as_int(choice.get("index")) not in (0, None):
                continue
            delta = as_obj(choice.get("delta"))
            content = text_field(delta.get("content"), _PROVIDER, "a delta's content")
            if content:
                self.text.append(content)
                deltas.append(TextDelta(text=content))
            refusal = text_field(delta.get("refusal"), _PROVIDER, "a delta's refusal")
            if refusal:
                self.refused = True
                self.text.append(refusal)
                deltas.append(TextDelta(text=refusal))
            thought = as_str(delta.get("reasoning_content")) or as_str(delta.get("reasoning"))
            if thought:
                self.reasoning.append(thought)
                deltas.append(ReasoningDelta(text=thought))
            for call in as_list(delta.get("tool_calls")):
                deltas.append(self._tool_fragment(as_obj(call)))
            finish = as_str(choice.get("finish_reason"))
            if finish is not None and finish not in _NOT_FINISHED:
                self.raw_finish = finish
        return deltas

    def _slot_for(self, index: int | None, call_id: str | None) -> _Slot:
        if index is not None:
            slot = self.by_index.get(index)
            if slot is None or (call_id and slot.call_id and call_id != slot.call_id):
                slot = self._open()
                self.by_index[index] = slot
            return slot
        if call_id:
            return self.by_id.get(call_id) or self._open()
        if len(self.slots) == 1:
            return self.slots[0]
        if not self.slots:
            return self._open()
        raise MalformedResponseError(
            f"{_PROVIDER}: a tool-call fragment has neither index nor id and "
            f"{len(self.slots)} calls are open",
            provider=_PROVIDER,
        )

    def _open(self) -> _Slot:
        slot = _Slot(len(self.slots))
        self.slots.append(slot)
        return slot

    def _tool_fragment(self, fragment: JSONObject) -> ToolCallDelta:
        call_id = as_str(fragment.get("id")) or None
        slot = self._slot_for(as_int(fragment.get("index")), call_id)
        new_id = None
        if call_id and slot.call_id is None:
            slot.call_id = new_id = call_id
            self.by_id[call_id] = slot
        function = as_obj(fragment.get("function"))
        name = as_str(function.get("name"))
        new_name = None
        if name and not slot.name:
            slot.name = new_name = name
        arguments = function.get("arguments")
        piece = ""
        if isinstance(arguments, str):
            piece = arguments
            slot.arguments.append(piece)
        elif isinstance(arguments, dict):
            piece = canonical_json(arguments)
            slot.arguments = [piece]
        extra = fragment.get("extra_content")
        if isinstance(extra, dict):
            slot.extra = json_value(extra)
        return ToolCallDelta(index=slot.ordinal, id=new_id, name=new_name, arguments_fragment=piece)

    def response(self) -> ModelResponse:
        raw = self.raw_finish
        if raw is None:
            raise MalformedResponseError(
                f"{_PROVIDER}: the stream ended without a finish_reason (truncated)",
                provider=_PROVIDER,
            )
        _fail_if_aborted(raw)
        parts: list[Part] = []
        if self.reasoning:
            parts.append(
                ReasoningPart(text="".join(self.reasoning), provider_data={"provider": _PROVIDER})
            )
        parts.append(text_part("".join(self.text)))
        parts.extend(slot.close() for slot in self.slots)
        reason = FinishReason.CONTENT_FILTER if self.refused else openai_finish_reason(raw)
        if self.answer_tool:
            parts, reason = answer_parts(parts, reason)
        return build_response(
            parts,
            reason,
            raw,
            self.usage or Usage(requests=1),
            self.response_id,
            self.served_model or self.model,
        )


def _fail_if_aborted(raw: str) -> None:
    if raw in _FAILED:
        raise ProviderServerError(
            f"{_PROVIDER}: the server ended the generation with finish_reason {raw!r}",
            provider=_PROVIDER,
        )


class OpenAIChatModel(ProviderBase):
    """A Chat Completions model on OpenAI or any OpenAI-compatible server.

    ``api_key`` defaults to ``OPENAI_API_KEY`` and ``base_url`` to ``OPENAI_BASE_URL`` (else the
    OpenAI endpoint). A local server without auth needs no key. Instructions go out as a
    ``developer`` message on the OpenAI endpoint and as ``system`` elsewhere (``system_role``
    overrides); the output limit is ``max_completion_tokens`` on OpenAI and ``max_tokens``
    elsewhere (``max_tokens_field`` overrides). An assistant turn that only calls tools carries
    ``"content": ""`` (``empty_content`` overrides). Pass ``client`` to share an
    ``httpx.AsyncClient``.
    """

    provider = _PROVIDER
    _key_env = ("OPENAI_API_KEY",)
    _url_env = "OPENAI_BASE_URL"
    _default_url = "https://api.openai.com/v1"
    _auth_header = "authorization"
    _auth_scheme = "Bearer "
    _parse_error = staticmethod(_error_info)

    def __init__(
        self,
        model: str,
        *,
        system_role: Literal["system", "developer"] | None = None,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None,
        empty_content: EmptyContent = "empty",
        **options: Unpack[ProviderOptions],
    ) -> None:
        super().__init__(model, **options)
        official = httpx.URL(self._base_url).host == _OFFICIAL_HOST
        self._system_role = system_role or ("developer" if official else "system")
        self._max_tokens_field = max_tokens_field or (
            "max_completion_tokens" if official else "max_tokens"
        )
        self._empty_content: EmptyContent = empty_content

    def build_body(self, request: ModelRequest, *, stream: bool) -> JSONObject:
        """The Chat Completions JSON body for ``request``.

        ``tool_choice`` and ``parallel_tool_calls`` go out only with ``tools``: OpenAI-style
        APIs reject them alone. Typed output is a ``json_schema`` response format without
        tools, and the final answer tool with them (``tool_choice`` "required" unless the
        request sets one).
        """
        body: JSONObject = {
            "model": self._model,
            "messages": _wire_messages(request, self._system_role, self._empty_content),
        }
        if request.tools:
            body.update(_tool_fields(request))
        body.update(self._sampling_fields(request))
        if request.output is not None and not request.tools:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.output.name,
                    "schema": request.output.json_schema,
                    "strict": request.output.strict,
                },
            }
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _sampling_fields(self, request: ModelRequest) -> JSONObject:
        """The fields of ``request``'s model settings that it sets, under this API's names."""
        fields: JSONObject = {}
        if request.max_tokens is not None:
            fields[self._max_tokens_field] = request.max_tokens
        if request.temperature is not None:
            fields["temperature"] = request.temperature
        if request.top_p is not None:
            fields["top_p"] = request.top_p
        if request.seed is not None:
            fields["seed"] = request.seed
        if request.stop_sequences:
            fields["stop"] = list(request.stop_sequences)
        if request.reasoning_effort is not None:
            fields["reasoning_effort"] = request.reasoning_effort
        return fields

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        call = self._call("/chat/completions")
        payload = await self._post(call, self.build_body(request, stream=False))
        return self._response(payload, answer_tool=answers_by_tool(request))

    def _response(self, payload: JSONObject, *, answer_tool: bool = False) -> ModelResponse:
        """The response of a whole ``chat.completion`` body (``answer_tool``: a final answer
        tool call in it is the answer's text)."""
        choices = as_list(payload.get("choices"))
        if not choices:
            raise MalformedResponseError(
                f"{_PROVIDER}: the response has no choices", provider=_PROVIDER
            )
        choice = as_obj(choices[0])
        message = as_obj(choice.get("message"))
        raw = as_str(choice.get("finish_reason"))
        raw = None if raw in _NOT_FINISHED else raw
        if raw is not None:
            _fail_if_aborted(raw)
        parts: list[Part] = []
        thought = as_str(message.get("reasoning_content")) or as_str(message.get("reasoning"))
        if thought:
            parts.append(ReasoningPart(text=thought, provider_data={"provider": _PROVIDER}))
        refusal = text_field(message.get("refusal"), _PROVIDER, "the message's refusal")
        content = text_field(message.get("content"), _PROVIDER, "the message's content")
        text = (content or "") + (refusal or "")
        if text:  # an empty text part would be dropped when the parts are merged
            parts.append(text_part(text))
        for value in as_list(message.get("tool_calls")):
            wire = as_obj(value)
            function = as_obj(wire.get("function"))
            arguments = function.get("arguments")
            extra = wire.get("extra_content")
            parts.append(
                finish_tool_call(
                    as_str(wire.get("id")),
                    as_str(function.get("name")) or "",
                    arguments if isinstance(arguments, str) else canonical_json(arguments or {}),
                    {"extra_content": json_value(extra)} if isinstance(extra, dict) else None,
                )
            )
        reason = (
            FinishReason.CONTENT_FILTER
            if refusal
            else openai_finish_reason(raw)
            if raw is not None
            else FinishReason.OTHER
        )
        if answer_tool:
            parts, reason = answer_parts(parts, reason)
        return build_response(
            parts,
            reason,
            raw,
            _usage(payload.get("usage")) or Usage(requests=1),
            as_str(payload.get("id")),
            as_str(payload.get("model")) or self._model,
            fragments=False,  # one reasoning part, one text part, the calls
        )

    async def _stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta | ModelResponse]:
        # The response is yielded only after ``[DONE]`` (or a clean end right after the
        # finish_reason).
        call = self._call("/chat/completions")
        by_tool = answers_by_tool(request)
        assembler = _StreamAssembler(self._model, answer_tool=by_tool)
        answer = AnswerDeltas() if by_tool else None
        async with open_stream(call, self.build_body(request, stream=True)) as reply:
            if not reply.is_stream:
                whole = partial(self._response, answer_tool=by_tool)
                for item in self._whole(reply, whole):
                    yield item
                return
            async with aclosing(self._payloads(reply, SSEDecoder(), sentinel="[DONE]")) as events:
                async for payload in events:
                    for delta in assembler.feed(payload):
                        if answer is None:
                            yield delta
                        elif (mapped := answer.map(delta)) is not None:
                            yield mapped
        yield assembler.response()


def _tool_fields(request: ModelRequest) -> JSONObject:
    """The ``tools`` offered (with the final answer tool for a typed answer) and, with them
    only, ``parallel_tool_calls`` and ``tool_choice`` ("required" for a typed answer, unless
    the request sets one)."""
    tools = request.tools
    if request.output is not None:
        tools = (*tools, answer_tool(request.output))
    fields: JSONObject = {
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    **({"strict": t.strict} if t.strict is not None else {}),
                },
            }
            for t in tools
        ]
    }
    if request.parallel_tool_calls is not None:
        fields["parallel_tool_calls"] = request.parallel_tool_calls
    choice = request.tool_choice
    if choice is None and request.output is not None:
        choice = "required"  # the answer is a call of the final answer tool
    if choice is not None:
        fields["tool_choice"] = (
            choice
            if choice in ("auto", "none", "required")
            else {"type": "function", "function": {"name": choice}}
        )
    return fields
