"""Fuzz throughput: full-kernel examples per second for the built-in agent (target ≥ 1,000/s).

Each example is a generated case run on the real kernel (events on, virtual clock, resumes)
and checked against every DESIGN §8 invariant. Reported: one process, then one process per
core (``--jobs``, seeds apart), and where one example's time goes (hypothesis, building the
agent, the run, the checks), measured on the same cases.

    python benchmarks/fuzz_throughput.py [--examples 3000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fsm_agent.fuzzing import Choices, check_invariants, fuzz, read_case, run_case


def _session(args: tuple[int, int]) -> tuple[int, float]:
    examples, seed = args
    report = fuzz(examples=examples, seed=seed)
    if report.failure is not None:
        print(report.format(), file=sys.stderr)
    return report.examples, report.elapsed_s


def _breakdown(examples: int) -> dict[str, float]:
    """Milliseconds per example spent decoding, building and running, and checking."""
    rng = random.Random(0)
    blobs = [rng.randbytes(rng.randrange(64, 256)) for _ in range(examples)]
    started = time.perf_counter()
    cases = [read_case(Choices(b)) for b in blobs]
    decoded = time.perf_counter()
    loop = asyncio.new_event_loop()
    records = [run_case(c, loop=loop) for c in cases]
    ran = time.perf_counter()
    for record in records:
        check_invariants(record)
    checked = time.perf_counter()
    loop.close()
    return {
        "decode": (decoded - started) / examples * 1000,
        "build + run": (ran - decoded) / examples * 1000,
        "check": (checked - ran) / examples * 1000,
    }


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=3000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    count, elapsed = _session((args.examples, 1))
    print(f"1 process:   {count:,} examples in {elapsed:.2f} s = {count / elapsed:,.0f}/s")

    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        results = pool.map(_session, [(args.examples, 1 + 1_000 * i) for i in range(args.jobs)])
    wall = time.perf_counter() - started
    total = sum(n for n, _ in results)
    print(
        f"{args.jobs} processes: {total:,} examples in {wall:.2f} s = {total / wall:,.0f}/s "
        "(target: 1,000/s)"
    )
    parts = _breakdown(min(args.examples, 1000))
    hypothesis = elapsed / count * 1000 - sum(parts.values())
    print("per example (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()), end="")
    print(f", hypothesis and bookkeeping {max(hypothesis, 0.0):.2f}")


if __name__ == "__main__":
    main()
