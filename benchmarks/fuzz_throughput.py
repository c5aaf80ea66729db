"""Fuzz throughput: full-kernel examples per second for the built-in agent (target ≥ 1,000/s).

Each example is a case decoded from seeded random bytes, run on the real kernel (events on,
virtual clock, resumes) and checked against every DESIGN §8 invariant. Reported: one process
(``fsm-agent fuzz``), then ``--jobs`` processes (``fsm-agent fuzz --jobs N``: the examples
split between them, process start-up included), and where one example's time goes (decoding
the bytes, building the agent and running it, the checks, and the engine's own bookkeeping),
measured on the same examples.

    python benchmarks/fuzz_throughput.py [--examples 3000] [--jobs 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fsm_agent.fuzzing import Choices, FuzzReport, check_invariants, fuzz, read_case, run_case
from fsm_agent.fuzzing.engine import example_bytes
from fsm_agent.fuzzing.jobs import fuzz_in_processes

SEED = 2


def _line(label: str, report: FuzzReport) -> str:
    if report.failure is not None:
        print(report.format(), file=sys.stderr)
    return (
        f"{label}: {report.examples:,} examples in {report.elapsed_s:.2f} s = "
        f"{report.examples_per_s:,.0f}/s"
    )


def _breakdown(examples: int) -> dict[str, float]:
    """Milliseconds per example spent decoding, building and running, and checking, timed
    example by example as the engine runs them."""
    spent = dict.fromkeys(("decode", "build + run", "check"), 0.0)
    loop = asyncio.new_event_loop()
    for index in range(examples):
        data = example_bytes(SEED, index)
        started = time.perf_counter()
        case = read_case(Choices(data))
        decoded = time.perf_counter()
        record = run_case(case, loop=loop)
        ran = time.perf_counter()
        check_invariants(record)
        checked = time.perf_counter()
        spent["decode"] += decoded - started
        spent["build + run"] += ran - decoded
        spent["check"] += checked - ran
    loop.close()
    return {name: seconds / examples * 1000 for name, seconds in spent.items()}


def main() -> None:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=3000, help="examples per process")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    single = fuzz(examples=args.examples, seed=SEED)
    print(_line("1 process", single))
    jobs = args.jobs
    parallel = fuzz_in_processes(None, jobs=jobs, examples=args.examples * jobs, seed=SEED)
    print(_line(f"{jobs} processes", parallel) + " (target: 1,000/s)")
    parts = _breakdown(single.examples)
    engine = single.elapsed_s / single.examples * 1000 - sum(parts.values())
    print("per example (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()), end="")
    print(f", engine and bookkeeping {max(engine, 0.0):.2f}")


if __name__ == "__main__":
    main()
