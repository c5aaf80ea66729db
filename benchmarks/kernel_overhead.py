"""Kernel overhead: µs per loop step of fsm_agent against three hand-written loops doing the
same work, in one run, and the ratios: the typed floor (its own plain pydantic models, built per
call: the reference of the targets), the asyncio floor (dicts, no types) and the types floor
(fsm_agent's public message types).

All play the workload of ``benchmarks/workload.py`` (N - 1 ``add`` tool calls, then an answer),
each response built per call from the wire body. Rounds interleave the systems; the ratios
reported are the medians of the ratios taken within each round, which cancels most of the
noise of a shared machine. ``--instructions`` counts CPU instructions under valgrind's
callgrind instead of timing: slow, but the same figure on a loaded machine (a different
measure: it does not see cache misses, so its ratios run lower than the clock's). Building
the agents is left out of all.

``phases`` is fsm_agent under a two-phase task machine (``fsm_agent.phases``).

    python benchmarks/kernel_overhead.py [--steps 10,50] [--rounds 7] [--instructions]
    python benchmarks/kernel_overhead.py --instructions --steps 2,10,50 --systems typed,fsm_agent
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# FSM_AGENT_BENCH_ROOT (PACKAGE_ROOT_ENV below): a folder holding another revision's
# fsm_agent/ to measure instead of this checkout's; kernel_against.py sets it.
sys.path.insert(
    0, os.environ.get("FSM_AGENT_BENCH_ROOT") or str(Path(__file__).resolve().parents[1])
)

from callgrind import instructions, seeded_env, side_by_side
from workload import (
    Adapter,
    AsyncioFloorAdapter,
    FloorAdapter,
    FsmAgentAdapter,
    PhasedAdapter,
    TypedFloorAdapter,
)

PACKAGE_ROOT_ENV = "FSM_AGENT_BENCH_ROOT"
"""The variable naming the folder whose ``fsm_agent/`` is measured (read before the imports)."""

SYSTEMS: dict[str, type[Adapter]] = {
    "typed": TypedFloorAdapter,
    "asyncio": AsyncioFloorAdapter,
    "types": FloorAdapter,
    "fsm_agent": FsmAgentAdapter,
    "phases": PhasedAdapter,
}
FLOORS = ("typed", "asyncio", "types")


async def _time_runs(adapter: Adapter, steps: int, runs: int) -> float:
    prepared = [adapter.prepare(steps) for _ in range(runs)]
    gc.collect()
    started = time.perf_counter()
    for run in prepared:
        await run()
    return (time.perf_counter() - started) / (runs * steps) * 1e6


def timed(steps: int, rounds: int) -> None:
    """Interleaved rounds; medians, ranges and the median same-round ratio."""
    runs = max(20, 3_000 // steps)
    per_step: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    for system in SYSTEMS.values():  # warm-up
        asyncio.run(_time_runs(system(), steps, 5))
    for _ in range(rounds):
        for name, system in SYSTEMS.items():
            per_step[name].append(asyncio.run(_time_runs(system(), steps, runs)))
    for name, values in per_step.items():
        print(
            f"N = {steps:>5}  {name:<9} {statistics.median(values):7.1f} µs/step "
            f"({min(values):.1f}–{max(values):.1f})"
        )
    for floor in FLOORS:
        ratios = [k / f for k, f in zip(per_step["fsm_agent"], per_step[floor], strict=True)]
        print(
            f"N = {steps:>5}  fsm_agent / {floor}: {statistics.median(ratios):.2f}× "
            f"({min(ratios):.2f}–{max(ratios):.2f}; target ≤ 2×)"
        )
    ratios = [p / k for p, k in zip(per_step["phases"], per_step["fsm_agent"], strict=True)]
    print(
        f"N = {steps:>5}  phases / fsm_agent: {statistics.median(ratios):.2f}× "
        f"({min(ratios):.2f}–{max(ratios):.2f}; target ≤ 1.2×)"
    )


def _instructions(
    system: str, steps: int, runs: int, *, play_them: bool, root: str | None = None
) -> int:
    """Instructions callgrind counts in a process that prepares ``runs`` runs and plays them
    (unless not ``play_them``); ``root`` holds the ``fsm_agent/`` to measure."""
    env = seeded_env()
    if root is not None:
        env[PACKAGE_ROOT_ENV] = root
    mode = "--play" if play_them else "--prepare"
    return instructions([__file__, mode, system, str(steps), str(runs)], env=env)


def counted(steps: int, systems: tuple[str, ...] = tuple(SYSTEMS)) -> None:
    """Instructions per step under callgrind: a process that prepares and plays the runs,
    minus one that only prepares them (what the timed mode keeps off the clock). The
    processes run side by side, one per core: callgrind's count does not depend on what else
    runs."""
    runs = max(20, 3_000 // steps)
    counts = side_by_side(
        {
            (name, play_them): functools.partial(
                _instructions, name, steps, runs, play_them=play_them
            )
            for name in systems
            for play_them in (True, False)
        }
    )
    per_step = {
        name: (counts[name, True] - counts[name, False]) / (runs * steps) for name in systems
    }
    for name in systems:
        print(f"N = {steps:>5}  {name:<9} {per_step[name]:,.0f} instructions/step")
    if "fsm_agent" not in per_step:
        return
    for floor in FLOORS:
        if floor in per_step:
            ratio = per_step["fsm_agent"] / per_step[floor]
            print(f"N = {steps:>5}  fsm_agent / {floor}: {ratio:.2f}×")
    if "phases" in per_step:
        ratio = per_step["phases"] / per_step["fsm_agent"]
        print(f"N = {steps:>5}  phases / fsm_agent: {ratio:.2f}× (target ≤ 1.2×)")


def play(system: str, steps: int, runs: int, *, play_them: bool = True) -> None:
    """Warm up, prepare ``runs`` runs, and play them unless ``play_them`` is false (the
    baseline callgrind subtracts)."""
    adapter = SYSTEMS[system]()

    async def main() -> None:
        for _ in range(3):
            await adapter.prepare(steps)()
        prepared = [adapter.prepare(steps) for _ in range(runs)]
        if play_them:
            for run in prepared:
                await run()

    asyncio.run(main())


def main() -> None:
    """Parse the options and measure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="10,50", help="comma-separated run lengths")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--instructions", action="store_true", help="count with callgrind")
    parser.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help="with --instructions, comma-separated: " + ", ".join(SYSTEMS),
    )
    parser.add_argument(
        "--play", nargs=3, metavar=("SYSTEM", "STEPS", "RUNS"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--prepare", nargs=3, metavar=("SYSTEM", "STEPS", "RUNS"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--time-one", nargs=3, metavar=("SYSTEM", "STEPS", "RUNS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.time_one:
        system, steps, runs = args.time_one
        adapter = SYSTEMS[system]()
        asyncio.run(_time_runs(adapter, int(steps), 5))  # warm-up
        # The fastest of five: what the machine's other work added least to.
        print(min(asyncio.run(_time_runs(adapter, int(steps), int(runs))) for _ in range(5)))
        return
    if args.play or args.prepare:
        system, steps, runs = args.play or args.prepare
        play(system, int(steps), int(runs), play_them=bool(args.play))
        return
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind on PATH")
    systems = tuple(args.systems.split(","))
    unknown = [name for name in systems if name not in SYSTEMS]
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    for steps in (int(s) for s in args.steps.split(",")):
        if args.instructions:
            counted(steps, systems)
        else:
            timed(steps, args.rounds)


if __name__ == "__main__":
    main()
