"""Start-up: how long ``import fsm_agent`` takes, and ``fsm-agent demo --no-diagram`` from process
start to exit, each in fresh processes, against the targets (150 ms, 0.5 s).

The import is timed inside the child (``perf_counter`` around the import), so interpreter
start-up is left out; the bare interpreter (``python -c pass``) and ``import pydantic`` alone, the
floor fsm_agent builds on, are reported beside it. The demo is timed from outside, interpreter
start-up included, as a user waits for it. Each figure is the median of ``--runs`` processes, with
the fastest in brackets (a shared machine only ever adds time). ``-X importtime`` lists the
slowest modules with ``--modules``.

    python benchmarks/startup.py [--runs 15] [--modules 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMPORT_TARGET_S = 0.150
DEMO_TARGET_S = 0.5


def _env() -> dict[str, str]:
    # As an installed package runs: from its bytecode cache, which the first import writes.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(ROOT)}


def _timed_import(module: str) -> float:
    """Seconds ``import module`` takes in a fresh interpreter, measured inside it."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def _timed_process(*args: str) -> float:
    """Seconds from starting ``python ARGS`` to its exit."""
    started = time.perf_counter()
    subprocess.run([sys.executable, *args], env=_env(), cwd=ROOT, capture_output=True, check=True)
    return time.perf_counter() - started


def _summary(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:7.1f} ms  (fastest {min(samples) * 1000:.1f})"


def _vs(samples: list[float], target_s: float) -> str:
    return f"= {statistics.median(samples) / target_s:.2f}× the {target_s * 1000:.0f} ms target"


def _slowest_modules(count: int) -> list[tuple[int, str]]:
    """The ``count`` modules with the largest own import time, in µs."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import fsm_agent"],
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line.removeprefix("import time:").split("|")
        rows.append((int(own), name.strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    """Measure and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="processes per figure")
    parser.add_argument("--modules", type=int, default=0, help="list the N slowest modules")
    args = parser.parse_args()

    _timed_process("-m", "fsm_agent", "demo", "--no-diagram")  # write the bytecode cache
    interpreter = [_timed_process("-c", "pass") for _ in range(args.runs)]
    pydantic = [_timed_import("pydantic") for _ in range(args.runs)]
    package = [_timed_import("fsm_agent") for _ in range(args.runs)]
    demo = [_timed_process("-m", "fsm_agent", "demo", "--no-diagram") for _ in range(args.runs)]

    print(f"python -c pass (process)         {_summary(interpreter)}")
    print(f"import pydantic (the floor)      {_summary(pydantic)}")
    print(f"import fsm_agent                 {_summary(package)}  {_vs(package, IMPORT_TARGET_S)}")
    print(f"fsm-agent demo --no-diagram      {_summary(demo)}  {_vs(demo, DEMO_TARGET_S)}")
    if args.modules:
        print("\nslowest modules of `import fsm_agent` (own time):")
        for own, name in _slowest_modules(args.modules):
            print(f"  {own / 1000:6.1f} ms  {name}")


if __name__ == "__main__":
    main()
