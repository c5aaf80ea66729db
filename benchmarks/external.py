"""The other benchmarks of this folder that ``run.py`` runs as scripts, and the target figures read
from what they print: ``durable_lag.py``; the round's counts in instructions
(:data:`INSTRUCTIONS`: ``kernel_overhead.py`` and ``durable_lag.py`` under callgrind), a
measurement of its own; and ``startup.py``, another (:data:`PROCESS`).

Each script prints a summary; the summary becomes a row of the round's "other benchmarks" table
as it is, and :func:`durable_rows`, :func:`kernel_rows`, :func:`counted_rows` and
:func:`startup_rows` take the figures the targets name from it. A summary whose figure cannot be
found gives ``None`` for that figure, and the targets table then says it was not measured, never
a figure it did not print.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class External:
    """Another benchmark script of this folder, whose summary becomes a row."""

    label: str
    script: str
    quick_args: tuple[str, ...]
    target: str
    args: tuple[str, ...] = ()
    """Arguments for both modes (``quick_args`` are added in quick mode)."""


DURABLE = "durable runs in flight (cold process, no gc.freeze())"
STARTUP = "process start-up"
EXTERNAL = (
    External("fuzz throughput", "fuzz_throughput.py", ("--examples", "500"), "≥ 1,000 examples/s"),
    External(
        "streaming client vs the official SDK",
        "streaming.py",
        ("--chunks", "5000", "--rounds", "3"),
        "ours / SDK ≤ 1.0",
    ),
    External("checkpoint overhead", "checkpoint.py", (), "—"),
    # 1,000 runs in quick mode too: the target is about that many in flight. No --service: the
    # target is a cold process, without gc.freeze().
    External(
        DURABLE,
        "durable_lag.py",
        ("--step-runs", "10"),
        "worst lag ≤ 10 ms; sync step ≤ 5× plain (SQLite)",
    ),
)
PROCESS = External(
    STARTUP,
    "startup.py",
    ("--runs", "5"),
    "from fsm_agent import Agent ≤ 120 ms and ≤ 3.3× import pydantic's instructions; demo ≤ 350 ms",
)
"""``startup.py``: its own measurement of the round (``--measure process``), so that the import
rows can be measured again alone."""
COUNTED_KERNEL = External(
    "kernel steps in instructions (callgrind)",
    "kernel_overhead.py",
    ("--steps", "10"),  # in quick mode N = 10 alone, within the quick round's time limit
    "fsm_agent / typed floor ≤ 2× at N = 2, 10, 50",
    args=("--instructions", "--steps", "2,10,50", "--systems", "typed,fsm_agent"),
)
"""``kernel_overhead.py --instructions``: the step of the workload counted in instructions,
fsm_agent against the typed floor, part of the round's ``--measure instructions``."""
COUNTED = External(
    "durable steps in instructions (SQLite, callgrind)",
    "durable_lag.py",
    ("--step-runs", "10"),
    "sync step ≤ 5× plain",
    args=("--instructions",),
)
"""``durable_lag.py --instructions``: the per-step costs on SQLite counted in instructions, part
of the round's ``--measure instructions``, which can be measured again alone: the clock's figures
of a shared machine move with its speed, these do not."""
INSTRUCTIONS = (COUNTED_KERNEL, COUNTED)
"""What the round's ``--measure instructions`` runs."""


def run_external(
    *, quick: bool, timeout_s: float, benches: tuple[External, ...] = EXTERNAL
) -> dict[str, str]:
    """Run each script of ``benches`` that exists; its printed summary (or why it failed), by
    label."""
    rows: dict[str, str] = {}
    for bench in benches:
        if not (HERE / bench.script).exists():
            rows[bench.label] = "not yet measured"
            continue
        command = [
            sys.executable,
            str(HERE / bench.script),
            *bench.args,
            *(bench.quick_args if quick else ()),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            rows[bench.label] = "not measured: timed out"
            continue
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            rows[bench.label] = f"not measured: {last}"
            continue
        lines = [" ".join(line.split()) for line in done.stdout.splitlines() if line.strip()]
        rows[bench.label] = "; ".join(lines)
    return rows


def _number(pattern: str, text: str) -> float | None:
    match = re.search(pattern, text)
    return float(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class Durable:
    """What ``durable_lag.py`` printed that the targets name: the worst lag per store (ms), a
    ``sync`` step on SQLite and the same step without a checkpointer (µs, medians), and the
    median of their same-round ratios."""

    worst_ms: dict[str, float | None]
    sync_us: float | None
    plain_us: float | None
    sync_ratio: float | None


def durable_rows(summary: str) -> Durable:
    """The target figures of ``durable_lag.py``'s summary (as :func:`run_external` joins it)."""
    worst = {
        store: _number(rf"\b{store}: \d+/\d+ ok, .*?lag worst ([\d.]+) ms", summary)
        for store in ("sqlite", "postgresql")
    }
    step = re.search(
        r"\bsqlite per step: plain ([\d.]+) µs, sync ([\d.]+) µs \(([\d.]+)×\)", summary
    )
    return Durable(
        worst,
        float(step.group(2)) if step else None,
        float(step.group(1)) if step else None,
        float(step.group(3)) if step else None,
    )


@dataclass(frozen=True, slots=True)
class CountedSteps:
    """What ``durable_lag.py --instructions`` printed: the instructions of a step without a
    checkpointer and of a ``sync`` step on SQLite, and their ratio as printed."""

    plain: float | None
    sync: float | None
    ratio: float | None


def counted_rows(summary: str) -> CountedSteps:
    """The target figures of ``durable_lag.py --instructions``'s summary."""
    found = re.search(r"\bplain ([\d,]+) instructions, sync ([\d,]+) \(([\d.]+)×\)", summary)
    if found is None:
        return CountedSteps(None, None, None)
    plain, sync, ratio = (float(found.group(i).replace(",", "")) for i in (1, 2, 3))
    return CountedSteps(plain, sync, ratio)


def kernel_rows(summary: str) -> dict[int, tuple[float, float, float]]:
    """The figures of ``kernel_overhead.py --instructions``'s summary, by run length: fsm_agent's
    instructions per step, the typed floor's, and their ratio as printed."""
    summary = summary.replace(",", "")
    rows = {}
    for found in re.finditer(r"N = (\d+) fsm_agent / typed: ([\d.]+)×", summary):
        steps = found.group(1)
        ours = _number(rf"N = {steps} fsm_agent (\d+) instructions", summary)
        floor = _number(rf"N = {steps} typed (\d+) instructions", summary)
        if ours is not None and floor is not None:
            rows[int(steps)] = (ours, floor, float(found.group(2)))
    return rows


@dataclass(frozen=True, slots=True)
class Startup:
    """What ``startup.py`` printed that the targets name: the median and fastest time (ms) of
    ``from fsm_agent import Agent``, ``import fsm_agent`` and the demo, and the instructions
    (millions) of the processes it counted (``import pydantic`` and the imports among them)."""

    ms: dict[str, tuple[float, float] | None]
    instructions: dict[str, float | None]

    @property
    def ratio(self) -> float | None:
        """The instructions of ``from fsm_agent import Agent`` over ``import pydantic``'s."""
        ours, floor = self.instructions.get(KERNEL), self.instructions.get("import pydantic")
        return ours / floor if ours is not None and floor else None


KERNEL = "from fsm_agent import Agent"
PACKAGE = "import fsm_agent"
DEMO = "fsm-agent demo --no-diagram"


def startup_rows(summary: str) -> Startup:
    """The target figures of ``startup.py``'s summary (as :func:`run_external` joins it)."""
    ms: dict[str, tuple[float, float] | None] = {}
    instructions: dict[str, float | None] = {}
    labels = {
        KERNEL: KERNEL,
        PACKAGE: PACKAGE,
        DEMO: DEMO,
        "import pydantic": "import pydantic (the floor)",
    }
    for key, label in labels.items():
        match = re.search(
            rf"{re.escape(label)} ([\d.]+) ms \(fastest ([\d.]+)\)(?:; ([\d.]+) M instructions)?",
            summary,
        )
        ms[key] = (float(match.group(1)), float(match.group(2))) if match else None
        instructions[key] = float(match.group(3)) if match and match.group(3) else None
    return Startup(ms, instructions)
