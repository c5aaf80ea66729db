"""A real HTTP/1.1 server on 127.0.0.1 for the provider tests, and wire fixtures for it.

The server is plain asyncio (no framework): it parses each request, hands it to a handler, and
writes the :class:`Reply` the handler returns, chunk by chunk, with faults in between: a pause
(:class:`Sleep`), a TCP reset (:class:`Reset`) or a close without the chunked terminator
(:class:`Close`). Handlers are either a function of the request or a script of replies played
in order (:meth:`ProviderServer.script`).

The fixture builders write each provider's wire format (JSON body or SSE stream) for one
:class:`Turn`, in the shapes of recorded captures: OpenAI chunks with a role chunk, argument
fragments, a finish chunk, a ``choices: []`` usage chunk and ``[DONE]``; Anthropic
``message_start`` … ``message_stop`` with ``ping`` and cumulative usage; Gemini CRLF-framed
``GenerateContentResponse`` chunks with cumulative ``usageMetadata``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fsm_agent.messages import ModelRequest, ModelResponse, StreamDelta
from fsm_agent.providers import Timeouts

__all__ = [
    "FAST",
    "Close",
    "ProviderServer",
    "Reply",
    "Request",
    "Reset",
    "Sleep",
    "Turn",
    "anthropic_json",
    "anthropic_sse",
    "collect",
    "gemini_json",
    "gemini_sse",
    "json_reply",
    "openai_json",
    "openai_sse",
    "run",
    "schema_faults",
    "server_in_thread",
    "sse",
    "sse_reply",
]


FAST = Timeouts(connect=1.0, read=2.0, write=2.0, pool=2.0, stream_idle=0.5)
"""Short timeouts for tests: a stall is detected in half a second."""


def run(coro: Awaitable[Any]) -> Any:
    """Run a coroutine to completion in a fresh event loop (the tests use no asyncio plugin)."""

    async def main() -> Any:
        return await coro

    return asyncio.run(main())


async def collect(model: Any, request: ModelRequest) -> tuple[list[StreamDelta], ModelResponse]:
    """Drain ``model.stream(request)``; the last item must be the response, and only it."""
    items = [item async for item in model.stream(request)]
    assert items, "the stream yielded nothing"
    *deltas, last = items
    assert isinstance(last, ModelResponse)
    assert not any(isinstance(d, ModelResponse) for d in deltas)
    return deltas, last


@dataclass(frozen=True)
class Sleep:
    """Pause the response for ``seconds`` (a stall when longer than the client's idle timeout)."""

    seconds: float


@dataclass(frozen=True)
class Reset:
    """Abort the connection with a TCP RST, whatever has been written so far."""


@dataclass(frozen=True)
class Close:
    """Close the connection cleanly but without finishing the chunked body."""


Action = bytes | Sleep | Reset | Close


@dataclass
class Reply:
    """What the server answers: status, headers, then the body pieces and faults in order.

    With ``chunked`` the body is sent with chunked transfer encoding, one chunk per piece;
    otherwise the pieces are joined and sent with a ``content-length``.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: list[Action] = field(default_factory=list)
    chunked: bool = False


@dataclass(frozen=True)
class Request:
    """One request as the server saw it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        """The target without its query string."""
        return self.target.split("?", 1)[0]

    @property
    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


Handler = Callable[[Request], Reply]

_REASONS = {200: "OK", 400: "Bad Request", 429: "Too Many Requests", 500: "Internal Server Error"}


def schema_faults(request: Request) -> list[str]:
    """What a strict server rejects in ``request``, judged by the API its path belongs to.

    The checks are the ones real servers enforce and that a lenient test server would let pass:
    OpenAI-style servers with a strict request schema (llama-cpp-python's, for one) require every
    message ``content`` to be a string (``""`` is fine, ``null`` and absence are not) and reject
    ``tool_choice``/``parallel_tool_calls`` without ``tools`` (in Chat Completions and in
    Responses, whose instructions go in ``instructions``, never in a system input item);
    Anthropic rejects ``tool_choice`` without ``tools`` and ``tool_use``/``tool_result`` blocks
    in a request that defines no tools;
    Gemini rejects a ``toolConfig`` without ``tools``.
    """
    if request.method != "POST" or not request.body:
        return []
    try:
        body = request.json
    except ValueError:
        return ["the body is not JSON"]
    faults: list[str] = []
    has_tools = bool(body.get("tools"))
    if request.path.endswith("/chat/completions"):
        for index, message in enumerate(body.get("messages", [])):
            if not isinstance(message.get("content"), str | list):
                faults.append(f"messages[{index}].content must be a string")
        faults += [
            f"{k} without tools"
            for k in ("tool_choice", "parallel_tool_calls")
            if k in body and not has_tools
        ]
    elif request.path.endswith("/responses"):
        faults += [
            f"{k} without tools"
            for k in ("tool_choice", "parallel_tool_calls")
            if k in body and not has_tools
        ]
        faults += [
            f"input[{i}] has role system"
            for i, item in enumerate(body.get("input", []))
            if item.get("role") == "system"
        ]
    elif request.path.endswith("/v1/messages"):
        if "tool_choice" in body and not has_tools:
            faults.append("tool_choice without tools")
        blocks = [
            b
            for m in body.get("messages", [])
            if isinstance(m.get("content"), list)
            for b in m["content"]
        ]
        if not has_tools and any(b.get("type") in ("tool_use", "tool_result") for b in blocks):
            faults.append("Requests which include tool_use or tool_result blocks must define tools")
        faults += _cache_faults(body, blocks)
    elif (
        request.path.lower().endswith("generatecontent") and "toolConfig" in body and not has_tools
    ):
        faults.append("toolConfig without tools")
    return faults


class ProviderServer:
    """An HTTP server on an ephemeral loopback port; use as ``async with ProviderServer(...)``.

    Strict by default: a request that :func:`schema_faults` finds fault with is answered with
    HTTP 400 (an ``invalid_request_error`` naming the faults), whatever was scripted, so a
    regression in a request's shape fails the test that sent it.
    """

    def __init__(self, handler: Handler | None = None, *, strict: bool = True) -> None:
        self.handler = handler
        self.strict = strict
        self.requests: list[Request] = []
        self.connections = 0
        self.open_connections = 0
        self._script: list[Reply] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def script(self, *replies: Reply) -> ProviderServer:
        """Answer the next requests with ``replies``, in order."""
        self._script.extend(replies)
        return self

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aenter__(self) -> ProviderServer:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _reply(self, request: Request) -> Reply:
        faults = schema_faults(request) if self.strict else []
        if faults:
            error = {"message": "; ".join(faults), "type": "invalid_request_error"}
            return Reply(status=400, body=[json.dumps({"error": error}).encode()])
        if self._script:
            return self._script.pop(0)
        if self.handler is not None:
            return self.handler(request)
        return Reply(status=500, body=[b'{"error": {"message": "no reply scripted"}}'])

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        self.open_connections += 1
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                self.requests.append(request)
                if not await _write_reply(reader, writer, self._reply(request)):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            return  # shutdown: end quietly (asyncio logs a cancelled connection task as an error)
        finally:
            self.open_connections -= 1
            self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(method=method, target=target, headers=headers, body=body)


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _write_reply(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: Reply
) -> bool:
    """Write ``reply``; ``False`` when the connection must not be reused."""
    if reply.body and isinstance(reply.body[0], Reset):
        _reset(writer)
        return False
    reason = _REASONS.get(reply.status, "Status")
    head = [f"HTTP/1.1 {reply.status} {reason}"]
    headers = {k.lower(): v for k, v in reply.headers.items()}
    payload = b""
    if reply.chunked:
        headers["transfer-encoding"] = "chunked"
    else:
        payload = b"".join(p for p in reply.body if isinstance(p, bytes))
        headers["content-length"] = str(len(payload))
    head.extend(f"{k}: {v}" for k, v in headers.items())
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    if not reply.chunked:
        writer.write(payload)
        await writer.drain()
        return True
    for piece in reply.body:
        if isinstance(piece, Sleep):
            await writer.drain()
            try:  # stall, but notice at once when the client hangs up
                if not await asyncio.wait_for(reader.read(1), piece.seconds):
                    return False
            except TimeoutError:
                pass
        elif isinstance(piece, Reset):
            await writer.drain()
            _reset(writer)
            return False
        elif isinstance(piece, Close):
            await writer.drain()
            writer.close()
            return False
        elif piece:
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


@contextlib.contextmanager
def server_in_thread(handler: Handler) -> Iterator[str]:
    """Run a server in its own thread and event loop (for benchmarks); yields its URL."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        async def main() -> None:
            async with ProviderServer(handler) as server:
                box["url"] = server.url
                box["stop"] = stop = asyncio.Event()
                box["loop"] = asyncio.get_running_loop()
                ready.set()
                await stop.wait()

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield box["url"]
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(10)


# --- wire fixtures ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One model turn, provider-neutral, to be written in a provider's wire format.

    ``finish`` is the provider's *raw* finish value (``None``: the default for the content);
    ``calls`` are ``(id, name, arguments)``.
    """

    text: str = ""
    reasoning: str = ""
    signature: str = "sig-1"
    calls: Sequence[tuple[str, str, dict[str, Any]]] = ()
    finish: str | None = None
    usage: tuple[int, int] = (11, 7)
    pieces: int = 3


def _split(text: str, pieces: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def sse(*events: Any, names: Sequence[str | None] | None = None, eol: str = "\n") -> list[bytes]:
    """Frame each event as an SSE message (JSON-encoded unless already a string)."""
    out: list[bytes] = []
    for i, event in enumerate(events):
        data = event if isinstance(event, str) else json.dumps(event)
        name = names[i] if names is not None else None
        head = f"event: {name}{eol}" if name else ""
        out.append(f"{head}data: {data}{eol}{eol}".encode())
    return out


def sse_reply(pieces: Sequence[Action], status: int = 200, **headers: str) -> Reply:
    """A chunked ``text/event-stream`` reply."""
    return Reply(
        status=status,
        headers={"content-type": "text/event-stream", **headers},
        body=list(pieces),
        chunked=True,
    )


def json_reply(payload: Any, status: int = 200, **headers: str) -> Reply:
    """A JSON reply; header names use ``_`` for ``-``."""
    named = {k.replace("_", "-"): v for k, v in headers.items()}
    return Reply(
        status=status,
        headers={"content-type": "application/json", **named},
        body=[json.dumps(payload).encode()],
    )


# OpenAI ---------------------------------------------------------------------------------------


def _openai_finish(turn: Turn) -> str:
    return turn.finish or ("tool_calls" if turn.calls else "stop")


def _openai_usage(turn: Turn) -> dict[str, Any]:
    i, o = turn.usage
    return {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o}


def openai_json(turn: Turn, model: str = "gpt-test") -> dict[str, Any]:
    """A non-streaming Chat Completions body."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.reasoning:
        message["reasoning_content"] = turn.reasoning
    if turn.calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in turn.calls
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _openai_finish(turn)}],
        "usage": _openai_usage(turn),
    }


def openai_chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict:
    """One ``chat.completion.chunk`` with a single choice."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def openai_events(turn: Turn) -> list[Any]:
    """The chunk objects of a streamed turn, without the ``[DONE]`` sentinel."""
    events: list[Any] = [openai_chunk({"role": "assistant", "content": ""})]
    events += [openai_chunk({"reasoning_content": p}) for p in _split(turn.reasoning, turn.pieces)]
    events += [openai_chunk({"content": p}) for p in _split(turn.text, turn.pieces)]
    for index, (call_id, name, args) in enumerate(turn.calls):
        first = {"index": index, "id": call_id, "type": "function"}
        first["function"] = {"name": name, "arguments": ""}
        events.append(openai_chunk({"tool_calls": [first]}))
        for piece in _split(json.dumps(args), turn.pieces):
            frag = {"index": index, "function": {"arguments": piece}}
            events.append(openai_chunk({"tool_calls": [frag]}))
    events.append(openai_chunk({}, _openai_finish(turn)))
    events.append({"id": "chatcmpl-1", "choices": [], "usage": _openai_usage(turn)})
    return events


def openai_sse(turn: Turn) -> list[bytes]:
    """A whole streamed turn, ``[DONE]`` included."""
    return sse(*openai_events(turn), "[DONE]")


# Anthropic ------------------------------------------------------------------------------------


def _anthropic_finish(turn: Turn) -> str:
    return turn.finish or ("tool_use" if turn.calls else "end_turn")


def _cache_faults(body: dict[str, Any], blocks: list[dict[str, Any]]) -> list[str]:
    """What Anthropic rejects in a request's cache breakpoints: more than four, one on a
    thinking block, one on an empty text block."""
    system = body.get("system")
    marked = [
        b
        for b in [*body.get("tools", []), *(system if isinstance(system, list) else []), *blocks]
        if "cache_control" in b
    ]
    faults = [f"A maximum of 4 blocks with cache_control may be provided. Found {len(marked)}."]
    faults = faults if len(marked) > 4 else []
    if any(b.get("type") in ("thinking", "redacted_thinking") for b in marked):
        faults.append("thinking blocks cannot be marked with cache_control")
    if any(b.get("type") == "text" and not b.get("text") for b in marked):
        faults.append("cache_control cannot be set for empty text blocks")
    return faults


def _anthropic_content(turn: Turn) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if turn.reasoning:
        content.append(
            {"type": "thinking", "thinking": turn.reasoning, "signature": turn.signature}
        )
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in turn.calls]
    return content


def anthropic_json(turn: Turn, model: str = "claude-test") -> dict[str, Any]:
    """A non-streaming Messages body."""
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_content(turn),
        "stop_reason": _anthropic_finish(turn),
        "stop_sequence": None,
        "usage": {"input_tokens": turn.usage[0], "output_tokens": turn.usage[1]},
    }


def anthropic_events(turn: Turn, *, stop: bool = True) -> list[dict[str, Any]]:
    """The event objects of a streamed turn (``stop=False`` leaves out the ending)."""
    start = anthropic_json(turn)
    start.update(
        content=[], stop_reason=None, usage={"input_tokens": turn.usage[0], "output_tokens": 1}
    )
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(_anthropic_content(turn)):
        kind = block["type"]
        if kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": p}
                for p in _split(block["thinking"], turn.pieces)
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _split(block["text"], turn.pieces)]
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [
                {"type": "input_json_delta", "partial_json": p}
                for p in _split(json.dumps(block["input"]), turn.pieces)
            ]
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    if stop:
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": _anthropic_finish(turn), "stop_sequence": None},
                "usage": {"output_tokens": turn.usage[1]},
            }
        )
        events.append({"type": "message_stop"})
    return events


def anthropic_sse(turn: Turn) -> list[bytes]:
    """A whole streamed turn with ``event:`` names, as Anthropic sends it."""
    events = anthropic_events(turn)
    return sse(*events, names=[e["type"] for e in events])


# Gemini ---------------------------------------------------------------------------------------


def _gemini_usage(turn: Turn) -> dict[str, Any]:
    i, o = turn.usage
    return {"promptTokenCount": i, "candidatesTokenCount": o, "totalTokenCount": i + o}


def _gemini_parts(turn: Turn) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if turn.reasoning:
        parts.append({"text": turn.reasoning, "thought": True})
    if turn.text:
        parts.append({"text": turn.text})
    for index, (_, name, args) in enumerate(turn.calls):
        call: dict[str, Any] = {"functionCall": {"name": name, "args": args}}
        if index == 0:
            call["thoughtSignature"] = turn.signature
        parts.append(call)
    return parts


def gemini_json(turn: Turn, model: str = "gemini-test") -> dict[str, Any]:
    """A non-streaming ``generateContent`` body (function calls without ids, as the API does)."""
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": _gemini_parts(turn)},
                "finishReason": turn.finish or "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": _gemini_usage(turn),
        "modelVersion": model,
        "responseId": "resp-1",
    }


def gemini_events(turn: Turn) -> list[dict[str, Any]]:
    """The chunk objects of a streamed turn; the last carries the ``finishReason``."""

    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return {
            "candidates": [candidate],
            "usageMetadata": _gemini_usage(turn),
            "modelVersion": "gemini-test",
            "responseId": "resp-1",
        }

    events = [chunk([{"text": p, "thought": True}]) for p in _split(turn.reasoning, turn.pieces)]
    events += [chunk([{"text": p}]) for p in _split(turn.text, turn.pieces)]
    events += [chunk([p]) for p in _gemini_parts(turn) if "functionCall" in p]
    events.append(chunk([{"text": ""}], turn.finish or "STOP"))
    return events


def gemini_sse(turn: Turn) -> list[bytes]:
    """A whole streamed turn, CRLF-framed as recorded captures are."""
    return sse(*gemini_events(turn), eol="\r\n")
