"""Peer benchmark: fsm_agent against three hand-written loops (the floors) and agent
frameworks, and every figure the targets of ``claims.py`` name, in one round.

Every system plays the workload of ``workload.py`` (N - 1 ``add`` calls, then an answer); the
floors and fsm_agent build each response per call from the wire body. The targets' reference is
the typed floor: a minimal typed loop on its own plain pydantic models, built per call.

- **µs per step** at N = 2, 10, 50, 1,000. Systems run interleaved in rounds (order rotated
  each round); in a round each system plays a batch of runs sized to a time budget, whose
  agents and models are built before the clock starts. Reported: the median and range over
  rounds, and the median of same-round ratios to each floor and to fsm_agent. A system whose
  single run takes longer than ``long_run_s`` is timed once, on the run that checks it.
- **Memory per concurrent run**: 1,000 and 10,000 runs of N = 10 at once in one event loop,
  each measurement in a fresh process: the tracemalloc peak over the baseline, per run.
- **Start-up**: building what a run starts from (the agent).
- **Responses from the wire**: µs to build one response from a decoded Chat Completions body,
  fsm_agent's OpenAI provider against the typed floor's reader, in interleaved rounds.
- **The real HTTP path** (``http_path.py``, in a child process, its server in another): µs and
  client CPU per step against a loopback server, JSON and SSE, fsm_agent and the peers.
- **Durable runs** (``durable_lag.py``, in a cold child process, no ``gc.freeze()``): the worst
  event-loop lag with 1,000 durable runs in flight on SQLite and PostgreSQL, and a ``sync``
  step on SQLite against the same step without a checkpointer.
- **Steps in instructions** (``--measure instructions``), counted under callgrind, which a
  loaded machine does not change: the step at N = 2, 10 and 50 against the typed floor's
  (``kernel_overhead.py --instructions``), and the ``sync`` step on SQLite against the same step
  without a checkpointer (``durable_lag.py --instructions``).
- **Process start-up** (``startup.py``, ``--measure process``): ``from fsm_agent import Agent``
  (``import fsm_agent`` beside it) in milliseconds and in instructions against ``import
  pydantic``'s, and ``fsm-agent demo --no-diagram``.
- Rows from the other benchmarks in this folder, run as scripts when they exist.

    pip install -e '.[postgres]' -r benchmarks/requirements.txt   # in a separate environment
    python benchmarks/run.py [--quick] [--systems fsm_agent,typed floor] [--steps 50]

A complete run (every system, N and measurement) writes the results block of
``docs/performance.md``; a partial one only prints, unless ``--write`` is given (the block
then says which systems, run lengths and measurements it holds) or ``--merge`` (the target
rows it measured replace theirs in the block, which says when they were measured again:
``--measure process --merge --systems fsm_agent`` for the start-up rows, ``--measure
instructions`` for the rows counted in instructions).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import timeit
import tracemalloc
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

from claims import (
    COLUMNS,
    END,
    IMPORT,
    PEER_TARGETS,
    SENTENCES_HEADING,
    START,
    TABLE_HEADING,
    TARGETS,
    merged,
    parse,
    row_cells,
    sentences,
)
from external import (
    COUNTED,
    COUNTED_KERNEL,
    DURABLE,
    EXTERNAL,
    INSTRUCTIONS,
    KERNEL,
    PACKAGE,
    PROCESS,
    STARTUP,
    counted_rows,
    durable_rows,
    kernel_rows,
    run_external,
    startup_rows,
)
from peers import PEERS
from workload import (
    ANSWER,
    Adapter,
    AsyncioFloorAdapter,
    Call,
    FloorAdapter,
    FsmAgentAdapter,
    TypedFloorAdapter,
    add_calls,
    openai_parser,
    plain_response,
    wire_payload,
)

from fsm_agent import AgentMachine

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "performance.md"
STEPS = (2, 10, 50, 1000)
MEMORY_STEPS = 10
CONCURRENCY = (1000, 10_000)
FALLBACK_CONCURRENCY = 100
FLOORS: tuple[type[Adapter], ...] = (TypedFloorAdapter, AsyncioFloorAdapter, FloorAdapter)
ADAPTERS: tuple[type[Adapter], ...] = (*FLOORS, FsmAgentAdapter, *PEERS)
TYPED = TypedFloorAdapter.name
TARGET_STEPS = (2, 10, 50)
MEASUREMENTS = (
    "startup",
    "steps",
    "wire",
    "http",
    "external",
    "instructions",
    "process",
    "memory",
)
HTTP_STEPS = 10


@dataclass(frozen=True, slots=True)
class Settings:
    """How long to measure: the full run, or ``--quick``."""

    mode: str
    rounds: int
    budget_s: float  # one batch: one system, one N, one round
    max_runs: int  # runs per batch
    long_run_s: float  # a run longer than this is timed once
    skip_run_s: float | None  # a run predicted longer than this is skipped
    peer_memory: bool  # measure the peers' memory too
    probe_timeout_s: float  # a memory probe taking longer is redone with fewer runs
    external_timeout_s: float
    http_budget_s: float  # one HTTP batch: one system, one mode, one round


FULL = Settings("full", 5, 0.3, 300, 5.0, None, True, 180.0, 600.0, 0.5)
QUICK = Settings("quick", 3, 0.15, 100, 2.0, 1.0, False, 180.0, 180.0, 0.2)


class Memory(NamedTuple):
    """One memory probe: KiB per run at ``runs`` concurrent runs, which took ``seconds``."""

    kib: float
    seconds: float
    runs: int


@dataclass(slots=True)
class Results:
    """Everything measured, and what was not (``notes``)."""

    systems: list[Adapter]
    settings: Settings
    steps: Sequence[int]
    per_step: dict[int, dict[str, dict[int, float]]] = field(default_factory=dict)
    startup: dict[str, list[float]] = field(default_factory=dict)
    memory: dict[tuple[str, int], Memory | str] = field(default_factory=dict)
    external: dict[str, str] = field(default_factory=dict)
    wire: dict[str, list[float]] = field(default_factory=dict)
    http: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    scope: str = ""  # what a partial round left out, for the block's first line
    load: float = field(default_factory=lambda: os.getloadavg()[0])


def load(names: Sequence[str]) -> tuple[list[Adapter], list[str]]:
    """Build the named adapters; one whose framework is missing or broken becomes a note."""
    systems: list[Adapter] = []
    notes: list[str] = []
    for cls in ADAPTERS:
        if cls.name not in names:
            continue
        try:
            systems.append(cls())
        except Exception as error:  # one peer must not break the run
            notes.append(f"{cls.name} skipped: {type(error).__name__}: {error}")
    return systems, notes


# -- µs per step --------------------------------------------------------------------------------
async def check(adapter: Adapter, steps: int) -> float:
    """Play one run, check it took every step and answered; return its duration (s)."""
    add_calls.value = 0
    run = adapter.prepare(steps)
    started = time.perf_counter()
    output = await run()
    elapsed = time.perf_counter() - started
    if output != ANSWER or add_calls.value != steps - 1:
        raise AssertionError(
            f"{adapter.name} at N={steps}: answered {output!r} after {add_calls.value} add calls"
        )
    return elapsed


async def batch(adapter: Adapter, steps: int, runs: int) -> float:
    """Play ``runs`` prepared runs one after another; µs per step."""
    prepared = [adapter.prepare(steps) for _ in range(runs)]
    gc.collect()
    started = time.perf_counter()
    while prepared:  # drop each run once played: no garbage piles up for the GC to walk
        if await prepared.pop()() != ANSWER:
            raise AssertionError(f"{adapter.name} did not answer")
    return (time.perf_counter() - started) / (runs * steps) * 1e6


async def measure_steps(results: Results) -> None:
    """Per N: check and calibrate every system, then time them in interleaved rounds."""
    settings = results.settings
    last: dict[str, float] = {}  # µs per step at the previous N, to predict a run's time
    for steps in results.steps:
        samples: dict[str, dict[int, float]] = {}
        runs: dict[str, int] = {}
        for adapter in results.systems:
            predicted = last.get(adapter.name, 0.0) * steps / 1e6
            if settings.skip_run_s is not None and predicted > settings.skip_run_s:
                results.notes.append(
                    f"{adapter.name} at N = {steps:,} skipped in {settings.mode} mode "
                    f"(a run would take about {predicted:.0f} s or more)"
                )
                continue
            try:
                elapsed = await check(adapter, steps)
                if elapsed > settings.long_run_s:
                    samples[adapter.name] = {0: elapsed / steps * 1e6}
                    results.notes.append(
                        f"{adapter.name} at N = {steps:,}: timed once (a run takes {elapsed:.1f} s)"
                    )
                    continue
                elapsed = await check(adapter, steps)
            except Exception as error:  # one peer must not break the run
                results.notes.append(f"{adapter.name} at N = {steps:,} failed: {error!r}")
                continue
            runs[adapter.name] = max(1, min(settings.max_runs, round(settings.budget_s / elapsed)))
            samples[adapter.name] = {}
        for round_ in range(settings.rounds):
            shift = round_ % len(results.systems)
            for adapter in results.systems[shift:] + results.systems[:shift]:
                if adapter.name not in runs:
                    continue
                try:
                    samples[adapter.name][round_] = await batch(adapter, steps, runs[adapter.name])
                except Exception as error:
                    results.notes.append(f"{adapter.name} at N = {steps:,} failed: {error!r}")
                    del runs[adapter.name]
        results.per_step[steps] = samples
        last.update((name, _median(values)) for name, values in samples.items())
        print(f"N = {steps:,}: " + ", ".join(f"{n} {v:,.1f}" for n, v in last.items()), flush=True)


# -- start-up -----------------------------------------------------------------------------------
def measure_startup(results: Results) -> None:
    """µs to build each system's agent (and fsm_agent's machine from the table), in rounds."""
    builders: dict[str, Callable[[], object]] = {
        a.name: (lambda a=a: a.start(MEMORY_STEPS)) for a in results.systems
    }
    if any(a.name == FsmAgentAdapter.name for a in results.systems):
        builders["fsm_agent: AgentMachine()"] = AgentMachine
    numbers: dict[str, int] = {}
    for name, build in list(builders.items()):
        try:
            once = min(timeit.repeat(build, number=1, repeat=3))
        except Exception as error:  # one peer must not break the run
            results.notes.append(f"{name}: start-up failed: {error!r}")
            del builders[name]
            continue
        numbers[name] = max(1, min(10_000, round(results.settings.budget_s / 4 / once)))
        results.startup[name] = []
    for _ in range(results.settings.rounds):
        for name, build in builders.items():
            seconds = timeit.timeit(build, number=numbers[name])
            results.startup[name].append(seconds / numbers[name] * 1e6)


# -- responses from the wire --------------------------------------------------------------------
WIRE_TURNS = {"tool call": Call(3), "answer": None}


def measure_wire(results: Results) -> None:
    """µs to build one response from its decoded body: fsm_agent's OpenAI provider and the
    typed floor's reader, for a tool-call turn and an answer, in interleaved rounds (each
    timing includes building the body, the same for both)."""
    readers: dict[str, Callable[[dict[str, Any]], object]] = {
        "fsm_agent": openai_parser(),
        TYPED: plain_response,
    }
    number = 20_000 if results.settings.mode == "full" else 5_000
    for turn, call in WIRE_TURNS.items():
        for name in readers:
            results.wire[f"{name}: {turn}"] = []
        for _ in range(results.settings.rounds):
            for name, read in readers.items():
                seconds = timeit.timeit(
                    lambda read=read, call=call: read(wire_payload(call)), number=number
                )
                results.wire[f"{name}: {turn}"].append(seconds / number * 1e6)


def wire_ratio(results: Results, turn: str) -> list[float]:
    """fsm_agent's µs per response over the typed floor's, per round."""
    ours, theirs = results.wire.get(f"fsm_agent: {turn}"), results.wire.get(f"{TYPED}: {turn}")
    return [a / b for a, b in zip(ours or [], theirs or [], strict=False)]


# -- the real HTTP path -------------------------------------------------------------------------
def measure_http(results: Results) -> None:
    """``http_path.py`` in a child process (it starts its server in another); its summary."""
    quick = results.settings.mode == "quick"
    command = [
        sys.executable,
        str(HERE / "http_path.py"),
        "--json",
        "--steps",
        str(HTTP_STEPS),
        "--rounds",
        str(results.settings.rounds),
        "--budget",
        str(results.settings.http_budget_s),
    ]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            timeout=results.settings.external_timeout_s * (1 if quick else 2),
        )
    except subprocess.TimeoutExpired:
        results.notes.append("HTTP path: not measured (timed out)")
        return
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        results.notes.append(f"HTTP path: not measured: {last}")
        return
    results.http = json.loads(done.stdout.strip().splitlines()[-1])
    results.notes.extend(f"HTTP path: {note}" for note in results.http.get("notes", []))


# -- memory -------------------------------------------------------------------------------------
async def probe_memory(name: str, concurrency: int) -> dict[str, float]:
    """In this process: ``concurrency`` runs of N = 10 at once; KiB per run and seconds."""
    systems, notes = load([name])
    if not systems:
        raise SystemExit(notes[0] if notes else f"unknown system {name!r}")
    adapter = systems[0]
    for _ in range(2):
        await check(adapter, MEMORY_STEPS)
    prepared = [adapter.prepare(MEMORY_STEPS) for _ in range(concurrency)]
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    outputs = await asyncio.gather(*(run() for run in prepared))
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    if set(outputs) != {ANSWER}:
        raise AssertionError(f"{name}: not every concurrent run answered")
    return {"kib": (peak - baseline) / concurrency / 1024, "seconds": elapsed}


def memory_in_subprocess(name: str, concurrency: int, timeout_s: float) -> Memory | str | None:
    """:func:`probe_memory` in a fresh process; why it failed, or ``None`` past ``timeout_s``."""
    command = [sys.executable, __file__, "--probe-memory", name, str(concurrency)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed: {last}"
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return Memory(figures["kib"], figures["seconds"], concurrency)


def measure_memory(results: Results) -> None:
    """Probes in fresh processes, two at a time (the figures are memory, not time), the
    costliest first. 10,000 runs only for fsm_agent and the typed floor (a peer's 1,000 runs
    take minutes under tracemalloc); a probe past the time limit is redone with fewer runs."""
    settings = results.settings
    few, many = CONCURRENCY
    names = [a.name for a in results.systems if a.concurrent]
    for adapter in results.systems:
        if not adapter.concurrent:
            results.notes.append(
                f"{adapter.name}: no memory figure (synchronous: its runs cannot share an "
                "event loop)"
            )
    own: tuple[type[Adapter], ...] = (*FLOORS, FsmAgentAdapter)
    ours = [n for n in names if n in {a.name for a in own}]
    peers = [n for n in names if n not in ours]
    if peers and not settings.peer_memory:
        results.notes.append(f"peers' memory is measured in the full run only ({', '.join(peers)})")
        peers = []
    targeted = [n for n in ours if n in (TYPED, FsmAgentAdapter.name)]
    jobs = [(n, few) for n in ours + peers] + [(n, many) for n in targeted]
    per_step = results.per_step.get(MEMORY_STEPS, {})
    jobs.sort(key=lambda job: -_median(per_step.get(job[0]) or {0: 1.0}) * job[1])

    def probe(job: tuple[str, int]) -> Memory | str | None:
        return memory_in_subprocess(*job, settings.probe_timeout_s)

    with ThreadPoolExecutor(max_workers=2) as pool:
        figures = dict(zip(jobs, pool.map(probe, jobs), strict=True))
    for (name, runs), figure in figures.items():
        if figure is None:
            results.notes.append(
                f"{name}: {runs:,} concurrent runs did not finish within "
                f"{settings.probe_timeout_s:.0f} s under tracemalloc; measured with "
                f"{FALLBACK_CONCURRENCY} runs instead"
            )
            figure = probe((name, FALLBACK_CONCURRENCY)) or "not measured: timed out"
        results.memory[name, runs] = figure
    if peers:
        results.notes.append(f"peers: no {many:,}-run memory figures (see their {few:,}-run times)")


# -- the report ---------------------------------------------------------------------------------
def _median(values: dict[int, float] | list[float]) -> float:
    return statistics.median(values.values() if isinstance(values, dict) else values)


def _figure(samples: dict[int, float] | None) -> str:
    if not samples:
        return "—"
    values = list(samples.values())
    if len(values) == 1:
        return f"{values[0]:,.1f} (1 run)"
    return f"{_median(values):,.1f} ({min(values):,.1f}–{max(values):,.1f})"


def ratios(results: Results, steps: int, name: str, reference: str) -> list[float]:
    """``name``'s µs per step over ``reference``'s, per round where both were timed."""
    samples = results.per_step.get(steps, {})
    ours, theirs = samples.get(name, {}), samples.get(reference, {})
    return [ours[r] / theirs[r] for r in ours if r in theirs]


def _spread(figures: list[float]) -> str:
    """``[median, low, high]`` as text."""
    return f"{figures[0]:,.0f} ({figures[1]:,.0f}–{figures[2]:,.0f})"


def _ratio(values: list[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:,.1f}×"
    return f"{statistics.median(values):,.2f}× ({min(values):,.2f}–{max(values):,.2f})"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _memory(figure: Memory | str | None, runs: int) -> str:
    if figure is None:
        return "—"
    if isinstance(figure, str):
        return figure
    fewer = f"{figure.runs:,} runs, " if figure.runs != runs else ""
    return f"{figure.kib:,.1f} KiB ({fewer}{figure.seconds:,.1f} s)"


def _ms(figures: tuple[float, float] | None) -> str:
    return "—" if figures is None else f"{figures[0]:,.1f} ms (fastest {figures[1]:,.1f})"


Cells = tuple[str, str, str]
"""A target row's fsm_agent, reference and same-round ratio cells."""


def _step_cells(results: Results) -> dict[str, Cells]:
    ours = FsmAgentAdapter.name
    cells = {}
    for steps in TARGET_STEPS:
        samples = results.per_step.get(steps, {})
        mine, base = samples.get(ours), samples.get(TYPED)
        cells[f"µs per step, N = {steps}"] = (
            f"{_median(mine):,.1f}" if mine else "—",
            f"{_median(base):,.1f} ({TYPED})" if base else "—",
            _ratio(ratios(results, steps, ours, TYPED)),
        )
    return cells


def _memory_cells(results: Results) -> dict[str, Cells]:
    cells = {}
    for concurrency in CONCURRENCY:
        mine = results.memory.get((FsmAgentAdapter.name, concurrency))
        base = results.memory.get((TYPED, concurrency))
        ratio = "—"
        if isinstance(mine, Memory) and isinstance(base, Memory) and mine.runs == base.runs:
            ratio = f"{mine.kib / base.kib:.2f}×"
        cells[f"memory per concurrent run, {concurrency:,} runs of N = {MEMORY_STEPS}"] = (
            _memory(mine, concurrency),
            f"{_memory(base, concurrency)} ({TYPED})" if base else "—",
            ratio,
        )
    return cells


def _wire_cells(results: Results) -> dict[str, Cells]:
    cells = {}
    for turn in WIRE_TURNS:
        mine, base = results.wire.get(f"fsm_agent: {turn}"), results.wire.get(f"{TYPED}: {turn}")
        cells[f"building a response from the wire ({turn})"] = (
            f"{_median(mine):,.2f} µs" if mine else "—",
            f"{_median(base):,.2f} µs ({TYPED})" if base else "—",
            _ratio(wire_ratio(results, turn)),
        )
    return cells


def _external_cells(results: Results) -> dict[str, Cells]:
    durable = durable_rows(results.external.get(DURABLE, ""))
    cells: dict[str, Cells] = {
        "a durable sync step on SQLite": (
            f"{durable.sync_us:,.0f} µs" if durable.sync_us is not None else "—",
            f"{durable.plain_us:,.0f} µs (no checkpointer)" if durable.plain_us else "—",
            f"{durable.sync_ratio:.2f}×" if durable.sync_ratio is not None else "—",
        )
    }
    for steps, (ours, floor, ratio) in kernel_rows(
        results.external.get(COUNTED_KERNEL.label, "")
    ).items():
        cells[f"a step in instructions, N = {steps}"] = (
            f"{ours:,.0f}",
            f"{floor:,.0f} ({TYPED})",
            f"{ratio:.2f}×",
        )
    counted = counted_rows(results.external.get(COUNTED.label, ""))
    cells["a durable sync step on SQLite, in instructions"] = (
        f"{counted.sync:,.0f}" if counted.sync is not None else "—",
        f"{counted.plain:,.0f} (no checkpointer)" if counted.plain is not None else "—",
        f"{counted.ratio:.2f}×" if counted.ratio is not None else "—",
    )
    for store, shown in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        worst = durable.worst_ms.get(store)
        label = f"worst event-loop lag, 1,000 durable runs in flight on {shown} (cold process)"
        cells[label] = (f"{worst:,.1f} ms" if worst is not None else "—", "—", "—")
    return {**cells, **_process_cells(results)}


def _process_cells(results: Results) -> dict[str, Cells]:
    """The import and the demo, as ``startup.py`` measured them: ``from fsm_agent import
    Agent`` in milliseconds and in instructions, ``import fsm_agent`` shown beside."""
    startup = startup_rows(results.external.get(STARTUP, ""))
    kernel, package = startup.ms[KERNEL], startup.ms[PACKAGE]
    counted, floor = startup.instructions[KERNEL], startup.instructions["import pydantic"]
    beside = f"; {PACKAGE} {package[0]:,.1f} ms" if kernel and package else ""
    alone = startup.instructions[PACKAGE]
    return {
        IMPORT: (_ms(kernel) + beside, "—", "—"),
        f"{IMPORT}, in instructions": (
            "—"
            if counted is None
            else f"{counted:,.1f} M" + ("" if alone is None else f"; {PACKAGE} {alone:,.1f} M"),
            "—" if floor is None else f"{floor:,.1f} M (import pydantic)",
            "—" if startup.ratio is None else f"{startup.ratio:.2f}×",
        ),
        "fsm-agent demo --no-diagram": (_ms(startup.ms["fsm-agent demo --no-diagram"]), "—", "—"),
    }


def _http_cells(results: Results) -> dict[str, Cells]:
    cells = {}
    ours = FsmAgentAdapter.name
    for mode, label in (("json", "JSON"), ("sse", "streamed")):
        figures = results.http.get("systems", {})
        mine = figures.get(ours, {}).get(mode)
        ratio = results.http.get("ratios", {}).get(mode)
        cheapest = min(
            (
                (modes[mode]["cpu_us"][0], name)
                for name, modes in figures.items()
                if name != ours and mode in modes
            ),
            default=None,
        )
        cells[f"HTTP path, client CPU per step ({label}, N = {HTTP_STEPS})"] = (
            f"{mine['cpu_us'][0]:,.0f} µs" if mine else "—",
            f"{cheapest[0]:,.0f} µs ({cheapest[1]})" if cheapest else "—",
            f"{ratio[0]:.3f}× ({ratio[1]:.3f}–{ratio[2]:.3f})" if ratio else "—",
        )
    return cells


def _peer_cells(results: Results) -> dict[str, Cells]:
    cells = {}
    ours = FsmAgentAdapter.name
    for peer in (a.name for a in results.systems if a.name in PEER_TARGETS):
        least = [
            statistics.median(r) for n in results.steps if (r := ratios(results, n, peer, ours))
        ]
        shown = f"{min(least):,.1f}×" if least else "—"
        cells[f"{peer} per step ÷ fsm_agent's (least over N)"] = ("—", "fsm_agent", shown)
    return cells


def summary_rows(results: Results) -> list[list[str]]:
    """fsm_agent against every target of ``claims.py`` that this round measured, each row's
    verdict computed from its figure."""
    cells = {
        **_step_cells(results),
        **_memory_cells(results),
        **_wire_cells(results),
        **_external_cells(results),
        **_http_cells(results),
        **_peer_cells(results),
    }
    return [row_cells(target, *cells[target.label]) for target in TARGETS if target.label in cells]


def report(results: Results) -> str:
    """The results block: machine and versions, the summary, then every system's figures."""
    names = [a.name for a in results.systems]
    distributions = sorted({d for a in results.systems for d in a.distributions} | {"openai"})
    versions = []
    for dist in distributions:
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    settings = results.settings
    targets = _table(COLUMNS, summary_rows(results))
    lines = [
        f"Measured on {date.today().isoformat()} ({settings.mode} run, {settings.rounds} rounds"
        f"{results.scope}) on {_cpu()}, {os.cpu_count()} cores, {platform.system()}; "
        f"Python {platform.python_version()}; {', '.join(versions)}. Load average when the run "
        f"started: {results.load:.1f} (other work on the machine widens the ranges; the "
        "same-round ratios are the steadier figure).",
        "",
        TABLE_HEADING,
        "",
        *targets,
        "",
        SENTENCES_HEADING,
        "",
        sentences(parse(TABLE_HEADING + "\n\n" + "\n".join(targets))),
        "",
        "### µs per step (median over rounds, range)",
        "",
        *_table(
            ["system", *(f"N = {n:,}" for n in results.steps)],
            [
                [n, *(_figure(results.per_step.get(s, {}).get(n)) for s in results.steps)]
                for n in names
            ],
        ),
    ]
    for reference in (*(a.name for a in FLOORS), FsmAgentAdapter.name):
        if reference not in names:
            continue
        lines += [
            "",
            f"### Ratio to {reference} (median of same-round ratios, range)",
            "",
            *_table(
                ["system", *(f"N = {n:,}" for n in results.steps)],
                [
                    [n, *(_ratio(ratios(results, s, n, reference)) for s in results.steps)]
                    for n in names
                    if n != reference
                ],
            ),
        ]
    if results.wire:
        lines += [
            "",
            "### Building one response from the wire (µs, median over rounds, range)",
            "",
            *_table(
                ["reader", *WIRE_TURNS],
                [
                    [
                        name,
                        *(
                            _figure(dict(enumerate(results.wire[f"{name}: {t}"])))
                            for t in WIRE_TURNS
                        ),
                    ]
                    for name in ("fsm_agent", TYPED)
                ],
            ),
        ]
    if results.http.get("systems"):
        lines += [
            "",
            f"### The real HTTP path, N = {HTTP_STEPS} (µs per step and client CPU µs per step, "
            "median over rounds, range)",
            "",
            *_table(
                ["system", "JSON µs", "JSON CPU µs", "streamed µs", "streamed CPU µs"],
                [
                    [
                        name,
                        *(
                            _spread(modes[mode][key]) if mode in modes else "—"
                            for mode in ("json", "sse")
                            for key in ("us", "cpu_us")
                        ),
                    ]
                    for name, modes in results.http["systems"].items()
                ],
            ),
        ]
    lines += [
        "",
        f"### Memory per concurrent run (N = {MEMORY_STEPS}; tracemalloc peak over baseline per "
        "run; time for all runs under tracemalloc)",
        "",
        *_table(
            ["system", *(f"{c:,} runs" for c in CONCURRENCY)],
            [[n, *(_memory(results.memory.get((n, c)), c) for c in CONCURRENCY)] for n in names],
        ),
        "",
        "### Start-up: building what a run starts from (µs, median over rounds, range)",
        "",
        *_table(
            ["system", "µs"],
            [[n, _figure(dict(enumerate(v)))] for n, v in results.startup.items()],
        ),
    ]
    if results.external:
        lines += [
            "",
            "### The other benchmarks of this folder (each script's summary, as printed)",
            "",
            *_table(
                ["benchmark", "summary", "target"],
                [
                    [b.label, results.external.get(b.label, "—"), b.target]
                    for b in (*EXTERNAL, *INSTRUCTIONS, PROCESS)
                ],
            ),
        ]
    if results.notes:
        lines += ["", "Notes:", "", *(f"- {note}" for note in results.notes)]
    return "\n".join(lines)


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write(block: str) -> None:
    """Replace the results block of the performance doc (created if missing)."""
    if not DOC.exists():
        DOC.write_text(f"# Performance\n\n{START}\n{END}\n", encoding="utf-8")
    text = DOC.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{DOC.name} has no {START} … {END} block")
    DOC.write_text(pattern.sub(lambda _: f"{START}\n{block}\n{END}", text), encoding="utf-8")


def write_merged(results: Results, block: str) -> None:
    """Write into the existing results block the target rows this partial round measured (and
    the summary rows of ``startup.py`` and of ``durable_lag.py --instructions``, when they ran),
    the rest of the block kept as it was."""
    measured = {
        label: row for label, row in parse(block).items() if row.met != "—" or row.ours != "—"
    }
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(START) + len(START), text.index(END)
    note = (
        f"measured again on {date.today().isoformat()} (load average {results.load:.1f}): "
        + "; ".join(measured)
    )
    new = merged(text[start:end], measured, note)
    for bench in (*INSTRUCTIONS, PROCESS):
        summary = results.external.get(bench.label)
        if summary is None:
            continue
        cells = _table(["b", "s", "t"], [[bench.label, summary, bench.target]])[-1]
        found = re.search(rf"^\| {re.escape(bench.label)} \|.*$", new, re.MULTILINE)
        if found is not None:
            new = new[: found.start()] + cells + new[found.end() :]
            continue
        # A measurement the block did not hold yet: its row goes before start-up's.
        found = re.search(rf"^\| {re.escape(STARTUP)} \|", new, re.MULTILINE)
        if found is not None:
            new = new[: found.start()] + cells + "\n" + new[found.start() :]
    DOC.write_text(text[:start] + new + text[end:], encoding="utf-8")


def main() -> None:
    """Parse the command line, measure, print the block, and write it after a complete run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter batches")
    parser.add_argument("--systems", help="comma-separated: " + ", ".join(a.name for a in ADAPTERS))
    parser.add_argument("--steps", help="comma-separated run lengths (default 2,10,50,1000)")
    parser.add_argument(
        "--measure",
        default=",".join(MEASUREMENTS),
        help="comma-separated subset of: " + ", ".join(MEASUREMENTS),
    )
    parser.add_argument(
        "--write", action="store_true", help="write the block after a partial run too"
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="write only the target rows this partial run measured into the existing block",
    )
    parser.add_argument("--probe-memory", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe_memory:
        name, concurrency = args.probe_memory
        print(json.dumps(asyncio.run(probe_memory(name, int(concurrency)))))
        return
    names = args.systems.split(",") if args.systems else [a.name for a in ADAPTERS]
    steps = tuple(int(n) for n in args.steps.split(",")) if args.steps else STEPS
    systems, notes = load(names)
    results = Results(systems, QUICK if args.quick else FULL, steps, notes=notes)
    measure = set(args.measure.split(","))
    complete = not args.systems and not args.steps and measure >= set(MEASUREMENTS)
    if not complete:
        results.scope = (
            f"; partial: systems {', '.join(a.name for a in systems)}; N = "
            f"{', '.join(map(str, steps))}; measured {', '.join(sorted(measure))}"
        )
    started = time.perf_counter()
    if "startup" in measure:
        measure_startup(results)
    if "steps" in measure:
        asyncio.run(measure_steps(results))
    if "wire" in measure:
        measure_wire(results)
    if "http" in measure:
        measure_http(results)
    quick, timeout_s = results.settings.mode == "quick", results.settings.external_timeout_s
    if "external" in measure:
        results.external.update(run_external(quick=quick, timeout_s=timeout_s))
    if "instructions" in measure:
        results.external.update(
            run_external(quick=quick, timeout_s=timeout_s, benches=INSTRUCTIONS)
        )
    if "process" in measure:
        results.external.update(run_external(quick=quick, timeout_s=timeout_s, benches=(PROCESS,)))
    if "memory" in measure:
        measure_memory(results)
    block = report(results)
    print(block)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.merge and not complete:
        write_merged(results, block)
    elif complete or args.write:
        write(block)
    else:
        print(f"partial run: {DOC.name} not written")


if __name__ == "__main__":
    main()
