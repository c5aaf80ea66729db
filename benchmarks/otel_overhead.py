"""OpenTelemetry overhead: µs per loop step of the kernel workload without instrumentation,
with :class:`~fsm_agent.observability.OpenTelemetryHooks` on the API's default (no-op) tracer
provider, and with the SDK recording every span to memory; ratios to the uninstrumented run.

Rounds interleave the three; each ratio is the median of the ratios within a round. Needs the
``[otel]`` extra and ``opentelemetry-sdk``.

    python benchmarks/otel_overhead.py [--steps 10,50] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider
from workload import ADD_TOOL, POLICY, PROMPT, SYSTEM_PROMPT, script

from fsm_agent import Agent
from fsm_agent.observability import OpenTelemetryHooks
from fsm_agent.testing import ScriptedModel

EXPORTER = InMemorySpanExporter()


def _sdk() -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    return provider


SDK = _sdk()
VARIANTS: dict[str, Callable[[], list[object]]] = {
    "off": list,
    "on, no-op provider": lambda: [OpenTelemetryHooks(tracer_provider=NoOpTracerProvider())],
    "on, SDK to memory": lambda: [OpenTelemetryHooks(tracer_provider=SDK)],
}


def _prepare(hooks: list[object], steps: int) -> Callable[[], Awaitable[object]]:
    agent = Agent(
        ScriptedModel(script(steps), keep_requests=False),
        tools=[ADD_TOOL],
        system_prompt=SYSTEM_PROMPT,
        policy=POLICY,
        hooks=hooks,
    )
    return lambda: agent.run(PROMPT)


async def _time(variant: str, steps: int, runs: int) -> float:
    prepared = [_prepare(VARIANTS[variant](), steps) for _ in range(runs)]
    gc.collect()
    started = time.perf_counter()
    for run in prepared:
        await run()
    EXPORTER.clear()
    return (time.perf_counter() - started) / (runs * steps) * 1e6


def main() -> None:
    """Print µs per step and the ratio to the uninstrumented run, per workload size."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="10,50")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    for steps in (int(s) for s in args.steps.split(",")):
        runs = max(20, 3_000 // steps)
        for variant in VARIANTS:  # warm-up
            asyncio.run(_time(variant, steps, 5))
        per_step: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                per_step[variant].append(asyncio.run(_time(variant, steps, runs)))
        for variant, values in per_step.items():
            ratios = [v / o for v, o in zip(values, per_step["off"], strict=True)]
            print(
                f"N = {steps:>4}  {variant:<20} {statistics.median(values):7.1f} µs/step  "
                f"{statistics.median(ratios):.2f}× off"
            )


if __name__ == "__main__":
    main()
