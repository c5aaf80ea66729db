"""Does the event loop stall while many durable runs write their checkpoints?

``--runs`` runs (default 1,000) are started on one agent over ``--ramp`` seconds (a burst of a
thousand starts in one turn of the loop would measure the burst), most in flight together. Each
makes ``--steps`` tool calls to a tool that sleeps 20 ms under a 1 s timeout, then answers; the
model answers at once. Beside them a task measures its own wake-up delay: it asks to sleep
1 ms, over and over, and records how late it woke. Reported per store (no checkpointer, SQLite,
PostgreSQL when ``--pg`` answers), for the default durability (``sync``):

* the worst, 99th-percentile and median wake-up delay over the whole time (target: worst
  ≤ 10 ms), and the same once every run has started (after the ramp),
* the longest garbage collection during the runs (wall and CPU time, generation), how many
  full collections (generation 2) fell among the runs, and how many objects the collector
  tracked when they started (what a full collection walks, beside what the runs add),
* CPU per run, of the process and of the event loop's thread (steadier than the delays on a
  shared machine: a thread the OS does not schedule waits whatever the code does),
* how many tool calls timed out (target: no more than without a checkpointer),
* runs per second.

``--service`` measures a process set up as a long-running service would be: start-up done
(imports, agent and store built), then ``gc.collect(); gc.freeze()``, so that the objects of
start-up are no longer traversed by each full collection (see docs/scale-out.md). Without it,
a full collection walks every object of start-up too. CPython 3.11 makes one at the eleventh
collection of generation 1 after the last, once the objects moved to the oldest generation
since then outnumber a quarter of those it held, which 1,000 runs in flight always do: whether
one falls inside a store's measurement depends on where that count stands when it starts (on
what ran before it in the process), not on the store.

Two references: a store kept in memory (no I/O at all) gives the loop's own cost of durable
runs, and "none, all in flight" runs without a checkpointer but with tools that sleep
``HELD_S``, so that every run is in flight at once, as on PostgreSQL, whose slower writes keep
them all in flight. The worst delay is usually a garbage collection, which walks what the
runs alive hold; that row shows what that many live runs cost the interpreter without any
store (held runs allocate little while they sleep, so it bounds that share from below).

Then the cost of a step per durability mode (``sync``, ``async``, ``exit``) against a plain
step (no checkpointer), one run at a time (target: ``sync`` ≤ 5× plain on SQLite, goal 3×).
The plain run and one run of each mode take turns, ``STEP_ROUNDS`` times; reported are the
median of each and, for each mode, the median of its ratios to the plain run of the same round,
so that a machine whose speed changes between two measurements moves both sides of a ratio.

``--instructions`` counts the same per-step costs on SQLite in CPU instructions under valgrind's
callgrind instead (the same figure on a loaded machine): for each mode, a process that plays
``INSTRUCTION_RUNS`` runs of ``--step-runs`` steps after a warm-up run, minus one that only warms
up, divided by the steps played.

``--objects`` measures instead what a garbage collection walks per run: ``--runs`` runs are
started and held mid-flight (their tool awaits an event), and the objects the collector tracks
(``len(gc.get_objects())`` after a full collection) grow by this much per run, per store
(target: ≤ 30 with no store, ≤ 45 on SQLite); with them, the CPU time of one full collection
of the process (what a run of a cold process pays once in a while) and of one that walks only
what the runs hold (start-up frozen, as ``--service`` does).

    python benchmarks/durable_lag.py [--runs 1000] [--steps 2] [--pg postgresql://…] [--service]
    python benchmarks/durable_lag.py --objects [--runs 1000] [--pg postgresql://…]
    python benchmarks/durable_lag.py --instructions [--step-runs 30]
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
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from callgrind import instructions, side_by_side

from fsm_agent import Agent, ModelRequest, ModelResponse, Policy, tool
from fsm_agent.persistence import Checkpointer, InMemoryCheckpointer, SQLiteCheckpointer
from fsm_agent.testing import text, tool_call

DEFAULT_PG = os.environ.get("FSM_AGENT_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
TIMED_OUT = "timed out"
HELD = "none, all in flight"
FETCH_S = 0.02
HELD_S = 0.6  # two calls outlast the default one-second ramp, still under the 1 s timeout


@tool(timeout_s=1.0)
async def fetch(n: int) -> str:
    """Wait for a slow service."""
    await asyncio.sleep(FETCH_S)
    return f"page {n}"


@tool(name="fetch", timeout_s=1.0)
async def fetch_held(n: int) -> str:
    """Wait for a slow service (long enough that every run is in flight at once)."""
    await asyncio.sleep(HELD_S)
    return f"page {n}"


@tool
def look(n: int) -> str:
    """Look something up at once."""
    return f"result {n}"


class Stepping:
    """Calls ``tool_name`` until the request holds ``steps`` tool results, then answers (it
    keeps no state, so one instance serves every run)."""

    def __init__(self, steps: int, tool_name: str) -> None:
        self.steps = steps
        self.tool_name = tool_name

    @property
    def name(self) -> str:
        return "stepping"

    @property
    def context_window(self) -> int | None:
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        done = sum(len(m.tool_results) for m in request.messages)
        if done >= self.steps:
            return text("done")  # type: ignore[return-value]
        return tool_call(self.tool_name, {"n": done}, id=f"c{done}")  # type: ignore[return-value]


def _agent(
    steps: int,
    store: Checkpointer | None,
    mode: str = "sync",
    *,
    slow: bool = True,
    held: bool = False,
) -> Agent[None]:
    return Agent(
        Stepping(steps, "fetch" if slow else "look"),
        tools=[(fetch_held if held else fetch) if slow else look],
        policy=Policy(max_steps=steps + 5),
        checkpointer=store,
        durability=mode,
    )


async def _watch(stop: asyncio.Event, lags: list[tuple[float, float]]) -> None:
    """Sleep 1 ms over and over; record (when it woke, how late)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        asked = loop.time()
        await asyncio.sleep(0.001)
        woke = loop.time()
        lags.append((woke, woke - asked - 0.001))


class _Collections:
    """The longest garbage collection while installed: (wall s, CPU s of its thread, gen), and
    how many were full ones (generation 2)."""

    def __init__(self) -> None:
        self.longest = (0.0, 0.0, -1)
        self.full = 0
        self._started = (0.0, 0.0)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = (time.perf_counter(), time.thread_time())
            return
        self.full += info["generation"] == 2
        wall = time.perf_counter() - self._started[0]
        if wall > self.longest[0]:
            cpu = time.thread_time() - self._started[1]
            self.longest = (wall, cpu, info["generation"])


def _percentiles(lags: list[float]) -> str:
    if not lags:
        return "no samples"
    lags = sorted(lags)
    worst, p99, p50 = lags[-1], lags[int(len(lags) * 0.99)], lags[len(lags) // 2]
    return f"worst {worst * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, p50 {p50 * 1e3:.2f} ms"


async def _in_flight(
    runs: int, steps: int, store: Checkpointer | None, ramp_s: float, *, held: bool = False
) -> dict[str, Any]:
    agent = _agent(steps, store, held=held)
    stop = asyncio.Event()
    lags: list[tuple[float, float]] = []
    flying = [0, 0]  # now, peak
    collections = _Collections()

    async def one() -> Any:
        flying[0] += 1
        flying[1] = max(flying)
        try:
            return await agent.run("go")
        finally:
            flying[0] -= 1

    loop = asyncio.get_running_loop()
    tracked = len(gc.get_objects())  # what a full collection would walk now (frozen ones aside)
    watcher = asyncio.create_task(_watch(stop, lags))
    await asyncio.sleep(0.01)
    gc.callbacks.append(collections)
    started = time.perf_counter()
    cpu, loop_cpu = time.process_time(), time.thread_time()
    tasks = []
    try:
        for n in range(runs):  # started over ramp_s, not in one burst of the loop
            tasks.append(asyncio.create_task(one()))
            if n % 10 == 9:
                await asyncio.sleep(ramp_s * 10 / runs)
        ramped = loop.time()
        results = await asyncio.gather(*tasks)
    finally:
        gc.callbacks.remove(collections)
    elapsed = time.perf_counter() - started
    cpu, loop_cpu = time.process_time() - cpu, time.thread_time() - loop_cpu
    stop.set()
    await watcher
    timeouts = sum(
        TIMED_OUT in r.content for res in results for m in res.messages for r in m.tool_results
    )
    every = sorted(lag for _, lag in lags)
    gc_wall, gc_cpu, gc_gen = collections.longest
    return {
        "ok": sum(r.ok for r in results),
        "worst_ms": every[-1] * 1e3,
        "p99_ms": every[int(len(every) * 0.99)] * 1e3,
        "lags": _percentiles(every),
        "after_ramp": _percentiles([lag for woke, lag in lags if woke > ramped]),
        "gc": f"{gc_wall * 1e3:.1f} ms ({gc_cpu * 1e3:.1f} ms CPU, generation {gc_gen})",
        "full": (
            f"full collections among the runs: {collections.full} "
            f"({tracked:,} objects tracked when they started)"
        ),
        "cpu_ms_per_run": cpu / runs * 1e3,
        "loop_cpu_ms_per_run": loop_cpu / runs * 1e3,
        "timeouts": timeouts,
        "runs_per_s": runs / elapsed,
        "peak": flying[1],
    }


class _Gate:
    """Where the held runs' tool waits: ``arrived`` is set once ``expected`` runs reached it,
    and they go on once ``opened`` is set."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.arrived = asyncio.Event()
        self.opened = asyncio.Event()


_GATE: list[_Gate] = []


@tool(name="fetch", timeout_s=60.0)
async def fetch_gated(n: int) -> str:
    """Wait until the probe lets every run go on."""
    gate = _GATE[0]
    gate.expected -= 1
    if gate.expected <= 0:
        gate.arrived.set()
    await gate.opened.wait()
    return f"page {n}"


def _full_collection_ms() -> float:
    started = time.thread_time()
    gc.collect()
    return (time.thread_time() - started) * 1e3


async def _held_objects(runs: int, store: Checkpointer | None) -> str:
    """Objects the collector tracks per run held mid-flight, and the CPU time of a full
    collection with them held: of what the runs hold (start-up frozen), then of the whole
    process."""
    agent = Agent(
        Stepping(1, "fetch"), tools=[fetch_gated], policy=Policy(max_steps=6), checkpointer=store
    )
    _GATE[:] = [_Gate(1)]
    _GATE[0].opened.set()
    await agent.run("go")  # the first run builds what every later run shares
    gate = _GATE[0] = _Gate(runs)
    gc.collect()
    gc.freeze()
    tasks = [asyncio.create_task(agent.run("go")) for _ in range(runs)]
    await gate.arrived.wait()
    await asyncio.sleep(0.05)  # the writes made before the tool call settle
    held = _full_collection_ms()
    per_run = len(gc.get_objects()) / runs  # the frozen objects are not listed
    gc.unfreeze()
    whole = _full_collection_ms()
    everything = len(gc.get_objects())
    gate.opened.set()
    results = await asyncio.gather(*tasks)
    assert all(r.ok for r in results)
    return (
        f"{per_run:.1f} tracked objects per run held; a full collection with {runs} runs "
        f"held: {held:.1f} ms CPU for theirs (start-up frozen), {whole:.1f} ms CPU for the "
        f"whole process ({everything} objects)"
    )


def _per_step(steps: int, store: Checkpointer | None, mode: str) -> float:
    """µs per step of one run of ``steps`` steps, its event loop included."""
    agent = _agent(steps, store, mode, slow=False)
    started = time.perf_counter()
    result = asyncio.run(agent.run("go"))
    elapsed = time.perf_counter() - started
    assert result.ok, result.stop_reason
    return elapsed / steps * 1e6


STEP_ROUNDS = 5
"""How many times the plain run and one run of each durability mode take turns."""
MODES = ("sync", "async", "exit")


def _step_costs(steps: int, make: Callable[[], Checkpointer | None]) -> str:
    """µs per step of a plain run and of each durability mode on the store ``make`` builds (one
    store per mode), in turns; each mode's ratio is the median of its same-round ratios."""
    stores = {mode: make() for mode in MODES}
    plain: list[float] = []
    costs: dict[str, list[float]] = {mode: [] for mode in MODES}
    ratios: dict[str, list[float]] = {mode: [] for mode in MODES}
    try:
        for _ in range(STEP_ROUNDS):
            plain.append(_per_step(steps, None, "sync"))
            for mode in MODES:
                costs[mode].append(_per_step(steps, stores[mode], mode))
                ratios[mode].append(costs[mode][-1] / plain[-1])
    finally:
        for store in stores.values():
            _close(store)
    return f"plain {statistics.median(plain):.0f} µs, " + ", ".join(
        f"{mode} {statistics.median(costs[mode]):.0f} µs ({statistics.median(ratios[mode]):.2f}×)"
        for mode in MODES
    )


INSTRUCTION_RUNS = 5
"""Runs of ``--step-runs`` steps a counted process plays, beyond the warm-up both make."""


def _instructions(mode: str, steps: int, runs: int) -> int:
    """Instructions callgrind counts in a process that makes one warm-up run of ``mode`` (plain:
    no checkpointer) on SQLite and then plays ``runs`` more, each as :func:`_per_step` times
    it."""
    return instructions([__file__, "--play", mode, str(steps), str(runs)])


def _play(mode: str, steps: int, runs: int) -> None:
    """What :func:`_instructions` counts: a warm-up run, then ``runs`` runs."""
    with tempfile.TemporaryDirectory() as tmp:
        store = None if mode == "plain" else SQLiteCheckpointer(Path(tmp) / "runs.db")
        durability = "sync" if mode == "plain" else mode
        for _ in range(1 + runs):
            _per_step(steps, store, durability)
        _close(store)


def _counted_steps(steps: int) -> str:
    """Instructions per step on SQLite, plain and per durability mode: a process that plays
    :data:`INSTRUCTION_RUNS` runs after its warm-up, minus one that only warms up, each pair
    counted on its own thread (callgrind's count does not depend on what else runs)."""
    modes = ("plain", *MODES)
    counts = side_by_side(
        {
            (mode, runs): functools.partial(_instructions, mode, steps, runs)
            for mode in modes
            for runs in (0, INSTRUCTION_RUNS)
        }
    )
    per_step = {
        mode: (counts[mode, INSTRUCTION_RUNS] - counts[mode, 0]) / (INSTRUCTION_RUNS * steps)
        for mode in modes
    }
    return _counted_line(per_step)


def _counted_line(per_step: dict[str, float]) -> str:
    """Instructions per step, plain and per mode with its ratio to plain, as printed."""
    plain = per_step["plain"]
    return f"plain {plain:,.0f} instructions, " + ", ".join(
        f"{mode} {per_step[mode]:,.0f} ({per_step[mode] / plain:.2f}×)" for mode in MODES
    )


def _close(store: Checkpointer | None) -> None:
    if store is None:
        return
    drop = getattr(store, "drop_schema", None)
    if drop is not None:
        drop()
    store.close()


def _postgres(dsn: str) -> Checkpointer | None:
    try:
        from fsm_agent.persistence import PostgresCheckpointer

        return PostgresCheckpointer(dsn, schema=f"fsm_bench_{uuid.uuid4().hex[:10]}", timeout_s=2)
    except Exception as exc:  # no server, no extra: the row says why
        print(f"postgresql: not measured ({type(exc).__name__}: {exc})")
        return None


def _objects(runs: int, pg: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, Any] = {
            "none": lambda: None,
            "sqlite": lambda: SQLiteCheckpointer(Path(tmp) / f"{uuid.uuid4().hex}.db"),
        }
        if pg:
            stores["postgresql"] = lambda: _postgres(pg)
        print(f"{runs} runs held mid-flight (their tool awaits an event), sync durability")
        for name, make in stores.items():
            store = make()
            if name != "none" and store is None:
                continue
            print(f"  {name}: {asyncio.run(_held_objects(runs, store))}")
            _close(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--ramp", type=float, default=1.0, help="seconds to start them over")
    parser.add_argument("--step-runs", type=int, default=30, help="steps timed per mode")
    parser.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL URL ('' to skip)")
    parser.add_argument(
        "--service", action="store_true", help="gc.freeze() after start-up, as a service would"
    )
    parser.add_argument("--no-steps", action="store_true", help="skip the per-step costs")
    parser.add_argument(
        "--objects", action="store_true", help="objects the collector walks per run held"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="only the per-step costs on SQLite, in instructions under callgrind",
    )
    parser.add_argument(
        "--play", nargs=3, metavar=("MODE", "STEPS", "RUNS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.play:
        mode, steps, runs = args.play
        _play(mode, int(steps), int(runs))
        return
    if args.objects:
        _objects(args.runs, args.pg)
        return
    if args.instructions:
        if shutil.which("valgrind") is None:
            raise SystemExit("--instructions needs valgrind on PATH")
        print(
            f"sqlite per step, in instructions ({args.step_runs}-step runs, sync durability "
            f"unless named): {_counted_steps(args.step_runs)}"
        )
        return
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, Any] = {
            "none": lambda: None,
            HELD: lambda: None,
            "memory": InMemoryCheckpointer,
            "sqlite": lambda: SQLiteCheckpointer(Path(tmp) / f"{uuid.uuid4().hex}.db"),
        }
        if args.pg:
            stores["postgresql"] = lambda: _postgres(args.pg)
        lag_rows: list[str] = []
        step_rows: list[str] = []
        for name, make in stores.items():
            store = make()
            if name not in ("none", HELD) and store is None:
                continue
            if args.service:
                gc.collect()
                gc.freeze()
            row = asyncio.run(
                _in_flight(args.runs, args.steps, store, args.ramp, held=name == HELD)
            )
            if args.service:
                gc.unfreeze()
            lag_rows.append(
                f"{name}: {row['ok']}/{args.runs} ok, {row['peak']} at once at peak, "
                f"lag {row['lags']} (after the ramp: {row['after_ramp']}), "
                f"longest collection {row['gc']}, {row['full']}, "
                f"CPU per run {row['cpu_ms_per_run']:.2f} ms "
                f"(loop thread {row['loop_cpu_ms_per_run']:.2f} ms), "
                f"{row['timeouts']} tool timeouts, {row['runs_per_s']:.0f} runs/s"
            )
            _close(store)
            if name in ("none", HELD, "memory") or args.no_steps:
                continue
            step_rows.append(f"{name} per step: " + _step_costs(args.step_runs, make))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    setup = "service set-up: gc.freeze() after start-up" if args.service else "cold process"
    print(
        f"{args.runs} runs in flight, {args.steps} tool steps each (sync durability), {setup}; "
        f"load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    for line in lag_rows + step_rows:
        print(f"  {line}")


if __name__ == "__main__":
    main()
