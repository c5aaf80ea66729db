"""Streaming throughput: our OpenAI-compatible client against the official ``openai`` SDK.

Both read the same long Chat Completions stream from the same loopback server (a separate
process, so the server does not compete with the clients for the GIL), in one run, alternating
rounds. Reported per client: microseconds per chunk and time to first token (median of rounds),
and ours / SDK as a ratio (target: ≤ 1.0).

    pip install -r benchmarks/requirements.txt
    python benchmarks/streaming.py [--chunks 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from fsm_agent.providers import OpenAIChatModel
from fsm_agent.values.messages import Message, ModelRequest, ModelResponse, TextDelta

Result = tuple[float, float, int]  # seconds to first token, total seconds, text chunks seen


def _events(chunks: int) -> list[bytes]:
    """A long stream: role chunk, ``chunks`` text deltas, finish, usage, ``[DONE]``."""

    def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
        body = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": f"tok{i} "}) for i in range(chunks)]
    events.append(chunk({}, "stop"))
    usage = {"prompt_tokens": 5, "completion_tokens": chunks, "total_tokens": chunks + 5}
    events.append(b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode())
    events.append(b"\n\ndata: [DONE]\n\n")
    return events


def _serve(chunks: int, port_queue: multiprocessing.Queue[int]) -> None:
    from provider_server import ProviderServer, Reply, sse_reply

    events = _events(chunks)
    # ~16 events per TCP write, as a server flushing a busy token stream does.
    pieces = [b"".join(events[i : i + 16]) for i in range(0, len(events), 16)]

    def handler(_: object) -> Reply:
        return sse_reply(pieces)

    async def main() -> None:
        async with ProviderServer(handler) as server:
            port_queue.put(int(server.url.rsplit(":", 1)[1]))
            await asyncio.Event().wait()

    asyncio.run(main())


async def ours(url: str) -> Result:
    model = OpenAIChatModel("bench", base_url=url, api_key="sk-bench")
    request = ModelRequest(messages=(Message.user("go"),))
    start = time.perf_counter()
    first = 0.0
    seen = 0
    async for item in model.stream(request):
        if isinstance(item, TextDelta):
            if not seen:
                first = time.perf_counter() - start
            seen += 1
        elif isinstance(item, ModelResponse):
            assert item.usage.output_tokens > 0
    total = time.perf_counter() - start
    await model.aclose()
    return first, total, seen


async def sdk(url: str) -> Result:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url, api_key="sk-bench", max_retries=0)
    start = time.perf_counter()
    first = 0.0
    seen = 0
    stream = await client.chat.completions.create(
        model="bench",
        messages=[{"role": "user", "content": "go"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            if not seen:
                first = time.perf_counter() - start
            seen += 1
    total = time.perf_counter() - start
    await client.close()
    return first, total, seen


async def measure(url: str, rounds: int) -> dict[str, list[Result]]:
    clients: dict[str, Callable[[str], Awaitable[Result]]] = {"ours": ours, "sdk": sdk}
    results: dict[str, list[Result]] = {name: [] for name in clients}
    for client in clients.values():  # warm-up: imports and first-use caches
        await client(url)
    for _ in range(rounds):
        for name, client in clients.items():
            results[name].append(await client(url))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    port_queue: multiprocessing.Queue[int] = context.Queue()
    server = context.Process(target=_serve, args=(args.chunks, port_queue), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{port_queue.get(timeout=30)}/v1"
        results = asyncio.run(measure(url, args.rounds))
    finally:
        server.terminate()
        server.join(5)
    summary: dict[str, tuple[float, float]] = {}
    for name, runs in results.items():
        assert all(seen == args.chunks for _, _, seen in runs), f"{name} missed chunks"
        per_chunk = statistics.median(total / args.chunks * 1e6 for _, total, _ in runs)
        ttft = statistics.median(first * 1e3 for first, _, _ in runs)
        summary[name] = (per_chunk, ttft)
        print(f"{name:>4}: {per_chunk:7.2f} µs/chunk   time to first token {ttft:6.2f} ms")
    (ours_chunk, ours_ttft), (sdk_chunk, sdk_ttft) = summary["ours"], summary["sdk"]
    print(
        f"ratio ours/sdk: {ours_chunk / sdk_chunk:.2f}× per chunk, {ours_ttft / sdk_ttft:.2f}× TTFT"
    )
    print(f"({args.chunks} chunks, median of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
