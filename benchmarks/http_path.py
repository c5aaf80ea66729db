"""The real HTTP path: µs and CPU per step of the workload against a loopback Chat Completions
server that answers at once, for fsm_agent's OpenAI provider and for the peers on their own
OpenAI clients, non-streaming and streaming.

The server (:func:`serve`, a plain asyncio HTTP/1.1 server with keep-alive) runs in another
process, so the client process's CPU time (``time.process_time``) is the client's overhead
alone: building the request, the HTTP client, reading the body or the event stream, building the
response, and the loop itself. It answers each request from the history it is sent (the last
``add`` result says which turn comes next, see ``workload.next_call``) with the body of
``workload.wire_payload``, or the same turn as ``chat.completion.chunk`` events: a role chunk,
the call's id and name, its arguments, the finish reason, a usage chunk and ``[DONE]``.

Systems run interleaved in rounds, each a batch of runs sized to a time budget; reported are the
medians over rounds and the median of the same-round ratios of fsm_agent's CPU per step to the
cheapest peer's.

    python benchmarks/http_path.py [--steps 10] [--rounds 5] [--budget 0.5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workload import (
    ADD_TOOL,
    ANSWER,
    POLICY,
    PROMPT,
    SYSTEM_PROMPT,
    Run,
    add,
    add_calls,
    next_call,
    wire_payload,
)

MODES = ("json", "sse")
API_KEY = "sk-loopback"


# -- the server ---------------------------------------------------------------------------------
def _last_result(body: dict[str, Any]) -> int | None:
    last = body["messages"][-1]
    if last.get("role") != "tool":
        return None
    content = last.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return int(json.loads(content)) if isinstance(content, str) else None


def _events(payload: dict[str, Any]) -> bytes:
    """The turn of ``payload`` as a Chat Completions event stream."""
    choice = payload["choices"][0]
    message = choice["message"]
    head = {"id": payload["id"], "object": "chat.completion.chunk", "model": payload["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": "" if message.get("tool_calls") else None})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or ()):
        start = {"index": index, "id": call["id"], "type": "function"}
        start["function"] = {"name": call["function"]["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [start]}))
        arguments = {"index": index, "function": {"arguments": call["function"]["arguments"]}}
        chunks.append(chunk({"tool_calls": [arguments]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    chunks.append({**head, "choices": [], "usage": payload["usage"]})
    lines = [f"data: {json.dumps(c, separators=(',', ':'))}\n\n" for c in chunks]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = json.loads(await reader.readexactly(length))
            steps = int(body["model"].rsplit("-", 1)[1])
            payload = wire_payload(next_call(_last_result(body), steps))
            if body.get("stream"):
                data, kind = _events(payload), b"text/event-stream"
            else:
                data, kind = json.dumps(payload).encode(), b"application/json"
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: " + kind + b"\r\ncontent-length: "
                b"%d\r\nconnection: keep-alive\r\n\r\n" % len(data) + data
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve() -> None:
    """Serve on a free loopback port; print the port, then serve until killed."""
    server = await asyncio.start_server(_handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


# -- the clients --------------------------------------------------------------------------------
class Client:
    """One system on the HTTP path: ``prepare(steps, stream)`` returns a run to await."""

    name: str
    distributions: tuple[str, ...] = ()

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def prepare(self, steps: int, stream: bool) -> Run:
        """A run of ``steps`` steps, streamed or not."""
        raise NotImplementedError


class FsmAgentClient(Client):
    """fsm_agent: an ``Agent`` over its ``OpenAIChatModel`` (its own httpx client)."""

    name = "fsm_agent"
    distributions = ("fsm_agent", "httpx")

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        from fsm_agent import Agent, RunHandle
        from fsm_agent.providers import OpenAIChatModel

        self._handle = RunHandle
        self._agents = {
            steps: Agent(
                OpenAIChatModel(f"bench-{steps}", base_url=base_url, api_key=API_KEY),
                tools=[ADD_TOOL],
                system_prompt=SYSTEM_PROMPT,
                policy=POLICY,
            )
            for steps in (2, 10, 50)
        }

    def prepare(self, steps: int, stream: bool) -> Run:
        """``run``, or ``run_stream`` drained."""
        agent = self._agents[steps]

        async def run() -> str:
            if not stream:
                return (await agent.run(PROMPT)).output or ""
            handle = self._handle()
            async for _ in agent.run_stream(PROMPT, handle=handle):
                pass
            return handle.result.output or "" if handle.result else ""

        return run


class PydanticAIClient(Client):
    """pydantic-ai: an ``Agent`` over its ``OpenAIChatModel``; streaming through an event
    stream handler."""

    name = "pydantic-ai"
    distributions = ("pydantic-ai-slim", "openai")

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        from pydantic_ai import Agent, UsageLimits
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        provider = OpenAIProvider(base_url=base_url, api_key=API_KEY)
        self._agents = {
            steps: Agent(
                OpenAIChatModel(f"bench-{steps}", provider=provider),
                tools=[add],
                system_prompt=SYSTEM_PROMPT,
            )
            for steps in (2, 10, 50)
        }
        self._limits = UsageLimits(request_limit=None)

    def prepare(self, steps: int, stream: bool) -> Run:
        """``Agent.run``, with a handler that drains the events when streaming."""
        agent = self._agents[steps]

        async def drain(_context: Any, events: Any) -> None:
            async for _ in events:
                pass

        async def run() -> str:
            handler = drain if stream else None
            result = await agent.run(
                PROMPT, usage_limits=self._limits, event_stream_handler=handler
            )
            return str(result.output)

        return run


class OpenAIAgentsClient(Client):
    """openai-agents: an ``Agent`` over ``OpenAIChatCompletionsModel`` on an ``AsyncOpenAI``
    client (tracing off); streaming with ``Runner.run_streamed``."""

    name = "openai-agents"
    distributions = ("openai-agents", "openai")

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        from agents import (
            Agent,
            OpenAIChatCompletionsModel,
            Runner,
            function_tool,
            set_tracing_disabled,
        )
        from openai import AsyncOpenAI

        set_tracing_disabled(True)
        client = AsyncOpenAI(base_url=base_url, api_key=API_KEY)
        tool = function_tool(add)
        self._runner = Runner
        self._agents = {
            steps: Agent(
                name="bench",
                instructions=SYSTEM_PROMPT,
                model=OpenAIChatCompletionsModel(model=f"bench-{steps}", openai_client=client),
                tools=[tool],
            )
            for steps in (2, 10, 50)
        }

    def prepare(self, steps: int, stream: bool) -> Run:
        """``Runner.run``, or ``Runner.run_streamed`` drained."""
        agent = self._agents[steps]

        async def run() -> str:
            if not stream:
                result = await self._runner.run(agent, PROMPT, max_turns=steps + 5)
                return str(result.final_output)
            streamed = self._runner.run_streamed(agent, PROMPT, max_turns=steps + 5)
            async for _ in streamed.stream_events():
                pass
            return str(streamed.final_output)

        return run


class LangGraphClient(Client):
    """LangGraph: the tool-calling graph over ``ChatOpenAI`` (``streaming=True`` to stream)."""

    name = "LangGraph"
    distributions = ("langgraph", "langchain-openai", "openai")

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        from langchain_core.messages import HumanMessage, SystemMessage
        from langchain_openai import ChatOpenAI
        from peers import tool_calling_graph

        def graph(steps: int, stream: bool) -> Any:
            return tool_calling_graph(
                ChatOpenAI(
                    model=f"bench-{steps}", base_url=base_url, api_key=API_KEY, streaming=stream
                ).bind_tools([add])
            )

        self._graphs = {(s, m): graph(s, m) for s in (2, 10, 50) for m in (False, True)}
        self._input = lambda: {"messages": [SystemMessage(SYSTEM_PROMPT), HumanMessage(PROMPT)]}

    def prepare(self, steps: int, stream: bool) -> Run:
        """The graph's ``ainvoke``."""
        graph = self._graphs[steps, stream]
        config = {"recursion_limit": 2 * steps + 5}

        async def run() -> str:
            result = await graph.ainvoke(self._input(), config)
            return str(result["messages"][-1].content)

        return run


CLIENTS: tuple[type[Client], ...] = (
    FsmAgentClient,
    PydanticAIClient,
    OpenAIAgentsClient,
    LangGraphClient,
)


# -- measuring ----------------------------------------------------------------------------------
async def _batch(client: Client, steps: int, stream: bool, runs: int) -> tuple[float, float]:
    """Play ``runs`` runs; (µs, CPU µs) per step."""
    prepared = [client.prepare(steps, stream) for _ in range(runs)]
    wall, cpu = time.perf_counter(), time.process_time()
    for run in prepared:
        if await run() != ANSWER:
            raise AssertionError(f"{client.name} did not answer")
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall / (runs * steps) * 1e6, cpu / (runs * steps) * 1e6


async def measure(
    base_url: str, steps: int, rounds: int, budget_s: float
) -> tuple[dict[str, Any], list[str]]:
    """Every client in both modes, interleaved in rounds: samples per (system, mode)."""
    notes: list[str] = []
    clients: list[Client] = []
    for cls in CLIENTS:
        try:
            clients.append(cls(base_url))
        except Exception as error:  # one peer must not break the run
            notes.append(f"{cls.name} skipped: {type(error).__name__}: {error}")
    runs: dict[tuple[str, str], int] = {}
    for client in clients:
        for mode in MODES:
            try:
                add_calls.value = 0
                await _batch(client, steps, mode == "sse", 1)  # warm up and check
                if add_calls.value != steps - 1:
                    raise AssertionError(f"{add_calls.value} add calls, not {steps - 1}")
                per_step, _ = await _batch(client, steps, mode == "sse", 1)
            except Exception as error:  # one peer must not break the run
                notes.append(f"{client.name} ({mode}) failed: {error!r}")
                continue
            runs[client.name, mode] = max(1, round(budget_s / (per_step * steps / 1e6)))
    samples: dict[str, dict[str, list[dict[str, float]]]] = {}
    for round_ in range(rounds):
        shift = round_ % len(clients)
        for client in clients[shift:] + clients[:shift]:
            for mode in MODES:
                if (client.name, mode) not in runs:
                    continue
                wall, cpu = await _batch(client, steps, mode == "sse", runs[client.name, mode])
                by_mode = samples.setdefault(client.name, {}).setdefault(mode, [])
                by_mode.append({"round": round_, "us": wall, "cpu_us": cpu})
    return samples, notes


def _summary(samples: dict[str, Any]) -> dict[str, Any]:
    """Medians per system and mode, and fsm_agent's same-round CPU ratio to the cheapest peer."""
    out: dict[str, Any] = {"systems": {}, "ratios": {}}
    for name, modes in samples.items():
        for mode, values in modes.items():
            out["systems"].setdefault(name, {})[mode] = {
                key: [
                    statistics.median(v[key] for v in values),
                    min(v[key] for v in values),
                    max(v[key] for v in values),
                ]
                for key in ("us", "cpu_us")
            }
    ours = samples.get("fsm_agent", {})
    for mode in MODES:
        ratios = []
        for sample in ours.get(mode, []):
            peers = [
                v["cpu_us"]
                for name, modes in samples.items()
                if name != "fsm_agent"
                for v in modes.get(mode, [])
                if v["round"] == sample["round"]
            ]
            if peers:
                ratios.append(sample["cpu_us"] / min(peers))
        if ratios:
            out["ratios"][mode] = [statistics.median(ratios), min(ratios), max(ratios)]
    return out


def start_server() -> tuple[subprocess.Popen[str], str]:
    """The server in a child process, and its base URL."""
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    port = int(server.stdout.readline())
    return server, f"http://127.0.0.1:{port}/v1"


def run(steps: int, rounds: int, budget_s: float) -> tuple[dict[str, Any], list[str]]:
    """Start the server, measure, stop it; the summary and notes."""
    server, base_url = start_server()
    try:
        samples, notes = asyncio.run(measure(base_url, steps, rounds, budget_s))
    finally:
        server.terminate()
        server.wait()
    return _summary(samples), notes


def _print(
    summary: dict[str, Any], steps: int, notes: list[str], out: Callable[[str], None]
) -> None:
    for name, modes in summary["systems"].items():
        for mode, figures in modes.items():
            us, cpu = figures["us"], figures["cpu_us"]
            out(
                f"{name:<14} {mode:<4} N={steps}: {us[0]:8,.1f} µs/step "
                f"({us[1]:,.1f}–{us[2]:,.1f}), "
                f"CPU {cpu[0]:8,.1f} µs/step ({cpu[1]:,.1f}–{cpu[2]:,.1f})"
            )
    for mode, ratio in summary["ratios"].items():
        out(
            f"fsm_agent CPU / cheapest peer's, {mode}: {ratio[0]:.3f}× "
            f"({ratio[1]:.3f}–{ratio[2]:.3f}; target ≤ 0.2×)"
        )
    for note in notes:
        out(f"note: {note}")


def main() -> None:
    """Parse the options; serve, or measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, choices=(2, 10, 50))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds per batch")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve())
        return
    summary, notes = run(args.steps, args.rounds, args.budget)
    if args.json:
        print(json.dumps({"steps": args.steps, "notes": notes, **summary}))
    else:
        _print(summary, args.steps, notes, print)


if __name__ == "__main__":
    main()
