"""OpenAI's Responses API (``POST /v1/responses``), streaming and not.

The request carries the conversation as *input items*: the system prompt becomes
``instructions``; user turns are ``message`` items (``input_text``, ``input_image``); an assistant
turn becomes, in its own order, the ``reasoning`` items it received, one ``message`` with its text
and one ``function_call`` item per tool call; a tool result is a ``function_call_output`` item
linked by ``call_id``. The answer is a list of *output items* of the same kinds.

Reasoning items are kept across turns: each one becomes a
:class:`~fsm_agent.values.messages.ReasoningPart`
whose ``provider_data`` holds the item as received (its id, its summary and, when the store is
off, its ``encrypted_content``), and is sent back verbatim before the calls it led to. A stream is
a sequence of typed events (``response.created``, ``response.output_item.added``,
``response.output_text.delta``, ``response.function_call_arguments.delta``, ...) ending with
``response.completed``, ``response.incomplete`` or ``response.failed``; the final response is
read from the terminal event's output items when it lists them, else from the items assembled
on the way.

``previous_response_id`` is not used: the kernel owns the history (it compacts it, resumes it
from a checkpoint, hands it to a fallback model), so every request carries the whole input.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from functools import partial
from typing import Literal, Unpack

from pydantic import JsonValue

from ..errors import MalformedResponseError, ProviderServerError
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
    ToolCallDelta,
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
    json_value,
    text_field,
)
from ._base import ProviderBase, ProviderOptions
from ._http import ErrorInfo, open_stream
from ._output import AnswerDeltas, answer_parts, answer_tool, answers_by_tool
from ._responses_input import PROVIDER, function_tool, input_items
from ._sse import SSEDecoder

__all__ = ["OpenAIResponsesModel", "responses_finish_reason"]

_PROVIDER = PROVIDER

# ``incomplete_details.reason`` → the neutral finish reason.
_INCOMPLETE: dict[str, FinishReason] = {
    "max_output_tokens": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
# A response in one of these states has no answer to commit: the attempt failed on the server.
_FAILED = frozenset({"failed", "cancelled"})


def responses_finish_reason(status: str, incomplete_reason: str | None) -> FinishReason:
    """Normalise a response's ``status`` (and, when ``incomplete``, its reason): ``completed``
    is ``stop`` (``tool_calls`` once calls are assembled), ``max_output_tokens`` is ``length``,
    ``content_filter`` is ``content_filter``; anything else is ``other``."""
    if status == "completed":
        return FinishReason.STOP
    if status == "incomplete":
        return _INCOMPLETE.get(incomplete_reason or "") or FinishReason.OTHER
    return FinishReason.OTHER


def _error_info(payload: object) -> ErrorInfo:
    """An error body (``{"error": {...}}``), a stream's ``error`` event or a failed response's
    ``error``: its ``type`` or ``code`` names the class."""
    error = as_obj(as_obj(payload).get("error"))
    if not error and isinstance(as_obj(payload).get("error"), str):
        return ErrorInfo(message=as_str(as_obj(payload)["error"]))
    code = error.get("code")
    kind = as_str(error.get("type"))
    if isinstance(code, str) and (kind in (None, "error") or code == "context_length_exceeded"):
        # A failed response names its cause in ``code`` only ("server_error",
        # "rate_limit_exceeded", "invalid_prompt", ...).
        kind = "invalid_request_error" if code.startswith("invalid_") else code
    return ErrorInfo(message=as_str(error.get("message")), kind=kind, code=as_int(code))


def _usage(value: object) -> Usage | None:
    usage = as_obj(value)
    if not usage:
        return None
    given = as_obj(usage.get("input_tokens_details"))
    produced = as_obj(usage.get("output_tokens_details"))
    return Usage(
        requests=1,
        input_tokens=as_count(usage.get("input_tokens")) or 0,
        output_tokens=as_count(usage.get("output_tokens")) or 0,
        cache_read_tokens=as_count(given.get("cached_tokens")) or 0,
        cache_write_tokens=as_count(given.get("cache_write_tokens")) or 0,
        reasoning_tokens=as_count(produced.get("reasoning_tokens")) or 0,
    )


# --- response ---------------------------------------------------------------------------------


def _reasoning_part(item: JSONObject, message_id: str | None = None) -> ReasoningPart:
    """A reasoning item as a part: its summary (or reasoning) text, the item itself to send back
    (``summary`` is required there, if only empty), and the id of the message it led to: the
    API refuses a reasoning item sent back without the item that followed it."""
    texts = [as_str(as_obj(s).get("text")) or "" for s in as_list(item.get("summary"))]
    if not any(texts):
        texts = [as_str(as_obj(c).get("text")) or "" for c in as_list(item.get("content"))]
    kept = {k: json_value(v) for k, v in item.items() if k != "status"}
    kept.setdefault("summary", [])
    data: dict[str, JsonValue] = {"provider": _PROVIDER, "item": kept}
    if message_id:
        data["message_id"] = message_id
    return ReasoningPart(text="\n\n".join(t for t in texts if t), provider_data=data)


def _message_text(item: JSONObject) -> tuple[str, bool]:
    """The text of a ``message`` output item, and whether it holds a refusal."""
    text: list[str] = []
    refused = False
    for value in as_list(item.get("content")):
        content = as_obj(value)
        kind = content.get("type")
        if kind == "output_text":
            text.append(text_field(content.get("text"), _PROVIDER, "an output text") or "")
        elif kind == "refusal":
            refused = True
            text.append(text_field(content.get("refusal"), _PROVIDER, "a refusal") or "")
    return "".join(text), refused


def _parts(items: list[JSONObject]) -> tuple[list[Part], bool]:
    """The parts of a response's output items, and whether the model refused."""
    parts: list[Part] = []
    refused = False
    for index, item in enumerate(items):
        kind = item.get("type")
        if kind == "message":
            text, refusal = _message_text(item)
            refused = refused or refusal
            if text:
                parts.append(TextPart(text=text))
        elif kind == "reasoning":
            after = items[index + 1] if index + 1 < len(items) else {}
            message_id = as_str(after.get("id")) if after.get("type") == "message" else None
            parts.append(_reasoning_part(item, message_id))
        elif kind == "function_call":
            arguments = item.get("arguments")
            item_id = as_str(item.get("id"))
            parts.append(
                finish_tool_call(
                    as_str(item.get("call_id")) or item_id,
                    as_str(item.get("name")) or "",
                    arguments if isinstance(arguments, str) else canonical_json(arguments or {}),
                    {"item_id": item_id} if item_id else None,
                )
            )
    return parts, refused


def _fail_if_failed(response: JSONObject) -> None:
    status = as_str(response.get("status"))
    if status in _FAILED:
        raise ProviderServerError(
            f"{_PROVIDER}: the response ended with status {status!r}", provider=_PROVIDER
        )


def _build(
    response: JSONObject, items: list[JSONObject], model: str, *, answer_tool: bool
) -> ModelResponse:
    """The final response of a ``response`` object whose output items are ``items``."""
    _fail_if_failed(response)
    status = as_str(response.get("status"))
    if status not in ("completed", "incomplete"):
        raise MalformedResponseError(
            f"{_PROVIDER}: the response has status {status!r}, not a finished one",
            provider=_PROVIDER,
        )
    reason_raw = as_str(as_obj(response.get("incomplete_details")).get("reason"))
    parts, refused = _parts(items)
    reason = FinishReason.CONTENT_FILTER if refused else responses_finish_reason(status, reason_raw)
    if answer_tool:
        parts, reason = answer_parts(parts, reason)
    return build_response(
        parts,
        reason,
        reason_raw if status == "incomplete" and reason_raw else status,
        _usage(response.get("usage")) or Usage(requests=1),
        as_str(response.get("id")),
        as_str(response.get("model")) or model,
    )


class _Item:
    """One output item being assembled from stream events."""

    __slots__ = ("arguments", "call", "item", "text")

    def __init__(self, item: JSONObject, call: int | None) -> None:
        self.item = item
        self.call = call  # the ordinal of a function call among the response's calls
        self.text: list[str] = []
        self.arguments: list[str] = []

    def whole(self) -> JSONObject:
        """The item, with what was streamed into it when it never arrived done."""
        item = dict(self.item)
        if item.get("type") == "function_call" and self.arguments and not item.get("arguments"):
            item["arguments"] = "".join(self.arguments)
        if item.get("type") == "message" and self.text and not as_list(item.get("content")):
            item["content"] = [{"type": "output_text", "text": "".join(self.text)}]
        return item


class _StreamAssembler:
    """Folds Responses stream events into deltas and, at the terminal event, one response."""

    def __init__(self, model: str, *, answer_tool: bool) -> None:
        self.model = model
        self.answer_tool = answer_tool
        self.items: dict[int, _Item] = {}
        self.calls = 0
        self.final: JSONObject | None = None

    @property
    def done(self) -> bool:
        """Whether the terminal event arrived."""
        return self.final is not None

    def _slot(self, event: JSONObject) -> _Item | None:
        index = as_int(event.get("output_index"))
        return self.items.get(index) if index is not None else None

    def feed(self, event: JSONObject) -> list[StreamDelta]:
        kind = as_str(event.get("type")) or ""
        if kind in _TERMINAL:
            self.final = as_obj(event.get("response"))
            return []
        if kind == "response.output_item.added":
            return self._added(event)
        if kind == "response.output_item.done":
            return self._item_done(event)
        slot = self._slot(event)
        delta = event.get("delta")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            text = text_field(delta, _PROVIDER, "a text delta")
            if not text:
                return []
            if slot is not None:
                slot.text.append(text)
            return [TextDelta(text=text)]
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            text = as_str(delta)
            if not text:
                return []
            if slot is not None:
                slot.text.append(text)
            return [ReasoningDelta(text=text)]
        if kind == "response.function_call_arguments.delta" and slot is not None:
            piece = as_str(delta)
            if piece and slot.call is not None:
                slot.arguments.append(piece)
                return [ToolCallDelta(index=slot.call, arguments_fragment=piece)]
        return []

    def _added(self, event: JSONObject) -> list[StreamDelta]:
        index = as_int(event.get("output_index"))
        item = as_obj(event.get("item"))
        if index is None:
            index = len(self.items)
        slot = _Item(item, None)
        self.items[index] = slot
        if item.get("type") != "function_call":
            return []
        slot.call = self.calls
        self.calls += 1
        arguments = as_str(item.get("arguments")) or ""
        if arguments:
            slot.arguments.append(arguments)
        return [
            ToolCallDelta(
                index=slot.call,
                id=as_str(item.get("call_id")) or as_str(item.get("id")),
                name=as_str(item.get("name")),
                arguments_fragment=arguments,
            )
        ]

    def _item_done(self, event: JSONObject) -> list[StreamDelta]:
        item = as_obj(event.get("item"))
        slot = self._slot(event)
        if slot is None:  # done without added: take it whole
            deltas = self._added(event)
            slot = self._slot(event) or self.items[len(self.items) - 1]
        else:
            deltas = []
        deltas += self._unstreamed(slot, item)
        slot.item = item
        return deltas

    @staticmethod
    def _unstreamed(slot: _Item, item: JSONObject) -> list[StreamDelta]:
        """Deltas for what a done item holds that no delta carried (a server that sends items
        whole)."""
        if slot.call is not None and not slot.arguments:
            arguments = as_str(item.get("arguments"))
            if arguments:
                slot.arguments.append(arguments)
                return [ToolCallDelta(index=slot.call, arguments_fragment=arguments)]
        if item.get("type") == "message" and not slot.text:
            text, _ = _message_text(item)
            if text:
                slot.text.append(text)
                return [TextDelta(text=text)]
        if item.get("type") == "reasoning":
            part = _reasoning_part(item)
            return [ReasoningDelta(text=part.text)] if part.text and not slot.text else []
        return []

    def response(self) -> ModelResponse:
        final = self.final
        if final is None:
            raise MalformedResponseError(
                f"{_PROVIDER}: the stream ended without response.completed (truncated)",
                provider=_PROVIDER,
            )
        listed = [as_obj(i) for i in as_list(final.get("output"))]
        items = listed or [self.items[i].whole() for i in sorted(self.items)]
        return _build(final, items, self.model, answer_tool=self.answer_tool)


class OpenAIResponsesModel(ProviderBase):
    """A model on OpenAI's Responses API (``POST /v1/responses``).

    ``api_key`` defaults to ``OPENAI_API_KEY`` and ``base_url`` to ``OPENAI_BASE_URL`` (else the
    OpenAI endpoint). ``store=False`` asks OpenAI not to keep the responses; the reasoning items
    then come back encrypted (``include: ["reasoning.encrypted_content"]``) and are sent back so.
    ``reasoning_summary`` asks a reasoning model for a summary of its reasoning (``"auto"``,
    ``"concise"`` or ``"detailed"``), which becomes the reasoning parts' text. Pass ``client`` to
    share an ``httpx.AsyncClient``.
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
        store: bool | None = None,
        reasoning_summary: Literal["auto", "concise", "detailed"] | None = None,
        **options: Unpack[ProviderOptions],
    ) -> None:
        super().__init__(model, **options)
        self._store = store
        self._reasoning_summary = reasoning_summary

    def build_body(self, request: ModelRequest, *, stream: bool) -> JSONObject:
        """The Responses JSON body for ``request``.

        Typed output is a ``json_schema`` text format without tools, and the final answer tool
        with them (``tool_choice`` "required" unless the request sets one). The API has no stop
        sequences and no seed: those settings are not sent (a fallback chain shares one request,
        so refusing them would break it).
        """
        body: JSONObject = {"model": self._model, "input": input_items(request)}
        system = request.system_prompt
        if system is not None:
            body["instructions"] = system
        if request.tools:
            body.update(_tool_fields(request))
        body.update(self._sampling_fields(request))
        if request.output is not None and not request.tools:
            body["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": request.output.name,
                    "schema": request.output.json_schema,
                    "strict": request.output.strict,
                }
            }
        if self._store is not None:
            body["store"] = self._store
            if not self._store:
                body["include"] = ["reasoning.encrypted_content"]
        if stream:
            body["stream"] = True
        return body

    def _sampling_fields(self, request: ModelRequest) -> JSONObject:
        """The fields of ``request``'s model settings that it sets, under this API's names,
        with the reasoning summary this provider asks for."""
        fields: JSONObject = {}
        if request.max_tokens is not None:
            fields["max_output_tokens"] = request.max_tokens
        if request.temperature is not None:
            fields["temperature"] = request.temperature
        if request.top_p is not None:
            fields["top_p"] = request.top_p
        reasoning: JSONObject = {}
        if request.reasoning_effort is not None:
            reasoning["effort"] = request.reasoning_effort
        if self._reasoning_summary is not None:
            reasoning["summary"] = self._reasoning_summary
        if reasoning:
            fields["reasoning"] = reasoning
        return fields

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        call = self._call("/responses")
        payload = await self._post(call, self.build_body(request, stream=False))
        return self._response(payload, answer_tool=answers_by_tool(request))

    def _response(self, payload: JSONObject, *, answer_tool: bool = False) -> ModelResponse:
        """The response of a whole ``response`` object."""
        items = [as_obj(i) for i in as_list(payload.get("output"))]
        return _build(payload, items, self._model, answer_tool=answer_tool)

    async def _stream(self, request: ModelRequest) -> AsyncGenerator[StreamDelta | ModelResponse]:
        call = self._call("/responses")
        by_tool = answers_by_tool(request)
        assembler = _StreamAssembler(self._model, answer_tool=by_tool)
        answer = AnswerDeltas() if by_tool else None
        async with open_stream(call, self.build_body(request, stream=True)) as reply:
            if not reply.is_stream:
                whole = partial(self._response, answer_tool=by_tool)
                for item in self._whole(reply, whole):
                    yield item
                return
            events = self._payloads(reply, SSEDecoder(), until=lambda: assembler.done)
            async with aclosing(events) as payloads:
                async for payload in payloads:
                    self._raise_if_failed(payload)
                    for delta in assembler.feed(payload):
                        if answer is None:
                            yield delta
                        elif (mapped := answer.map(delta)) is not None:
                            yield mapped
        yield assembler.response()

    def _raise_if_failed(self, event: JSONObject) -> None:
        """Raise the typed error of an ``error`` event, or of a ``response.failed`` event that
        names its cause."""
        kind = event.get("type")
        if kind == "error":
            cause: JsonValue = json_value(event)
        elif kind == "response.failed":
            cause = json_value(as_obj(event.get("response")).get("error"))
        else:
            return
        if isinstance(cause, dict) and cause:
            self._raise_if_error({"error": cause}, body=canonical_json(event), streamed=True)
        raise ProviderServerError(
            f"{_PROVIDER}: stream error: the response failed without saying why",
            provider=_PROVIDER,
        )


def _tool_fields(request: ModelRequest) -> JSONObject:
    """The ``tools`` offered (with the final answer tool for a typed answer) and, with them
    only, ``parallel_tool_calls`` and ``tool_choice`` ("required" for a typed answer, unless
    the request sets one)."""
    tools = request.tools
    if request.output is not None:
        tools = (*tools, answer_tool(request.output))
    fields: JSONObject = {"tools": [function_tool(t) for t in tools]}
    if request.parallel_tool_calls is not None:
        fields["parallel_tool_calls"] = request.parallel_tool_calls
    choice = request.tool_choice
    if choice is None and request.output is not None:
        choice = "required"  # the answer is a call of the final answer tool
    if choice is not None:
        fields["tool_choice"] = (
            choice
            if choice in ("auto", "none", "required")
            else {"type": "function", "name": choice}
        )
    return fields
