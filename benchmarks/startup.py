"""Start-up: how long the import a program needs takes (``from fsm_agent import Agent``, with
``import fsm_agent`` beside it), and ``fsm-agent demo --no-diagram`` from process start to exit,
each in fresh processes, against the targets (120 ms for the import, and at most 3.3 times the
instructions of ``import pydantic``; 350 ms for the demo).

The imports are timed inside the child (``perf_counter`` around the import), so interpreter
start-up is left out; the bare interpreter (``python -c pass``) and ``import pydantic`` alone, the
floor fsm_agent builds on, are reported beside them. ``import fsm_agent`` loads the public names
on first use, so ``from fsm_agent import Agent`` (the kernel, what a program that runs an agent
waits for) is the import the target is about. The demo is timed from outside, interpreter
start-up included, as a user waits for it. Each figure is the median of ``--runs`` processes, with
the fastest in brackets (a shared machine only ever adds time). Beside each time, when valgrind is
installed, the CPU instructions of the whole process under callgrind (one process per figure; the
same count on a loaded machine, so the ratio to ``import pydantic`` is the steady figure;
``--no-count`` leaves them out). ``-X importtime`` lists the slowest modules of the import with
``--modules``. ``--against DIR`` times another checkout of fsm_agent (an older commit) in the same
rounds, process by process in turn, and gives the median of the same-round ratios: on a busy
machine only that ratio is worth comparing. ``--instructions`` only counts instructions, for the
imports, ``fsm-agent --help`` and the demo (and the other checkout's, with ``--against``).

    python benchmarks/startup.py [--runs 15] [--modules 15] [--no-count] [--against ../older]
    python benchmarks/startup.py --instructions [--against ../older-checkout]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from callgrind import instructions

ROOT = Path(__file__).resolve().parents[1]
IMPORT_TARGET_S = 0.120
IMPORT_TARGET_X = 3.3  # the import's instructions, at most this many times import pydantic's
DEMO_TARGET_S = 0.350


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` on the checkout ``root``, as an installed package runs: from its bytecode
    cache, which the first import writes. The child starts in ``root``: ``-c`` and ``-m`` put
    the working directory first on the path, so another checkout there would be imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run(
        [sys.executable, *args],
        env={**env, "PYTHONPATH": str(root)},
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )


def timed_import(root: Path, module: str, statement: str = "") -> float:
    """Seconds ``import module`` (or ``statement``) takes in a fresh interpreter on ``root``,
    measured inside it."""
    statement = statement or f"import {module}"
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    return float(_run(root, "-c", code).stdout)


def timed_process(root: Path, *args: str) -> float:
    """Seconds from starting ``python ARGS`` on ``root`` to its exit."""
    started = time.perf_counter()
    _run(root, *args)
    return time.perf_counter() - started


_KERNEL = "from fsm_agent import Agent"
_PYDANTIC = "import pydantic"
_DEMO = "fsm-agent demo --no-diagram"
_COUNTED = {
    "python -c pass": ("-c", "pass"),
    _PYDANTIC: ("-c", _PYDANTIC),
    "import fsm_agent": ("-c", "import fsm_agent"),
    _KERNEL: ("-c", _KERNEL),
    _DEMO: ("-m", "fsm_agent", "demo", "--no-diagram"),
}
"""The processes whose instructions are counted beside their times, by label."""


def counted_process(root: Path, *args: str) -> int:
    """CPU instructions of ``python ARGS`` on ``root`` from start to exit, under callgrind."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return instructions(args, env={**env, "PYTHONPATH": str(root)}, cwd=root)


def count_instructions(roots: list[Path]) -> None:
    """Print the instructions of each start-up figure on each checkout (and their ratio)."""
    cases = {**_COUNTED, "fsm-agent --help": ("-m", "fsm_agent", "--help")}
    for root in roots:
        timed_process(root, *cases[_DEMO])  # write the bytecode cache
    floor = counted_process(ROOT, *cases[_PYDANTIC])
    for label, args in cases.items():
        counts = [floor if label == _PYDANTIC else counted_process(ROOT, *args)]
        counts += [counted_process(root, *args) for root in roots[1:]]
        line = f"{label:<33}{counts[0] / 1e6:8.1f} million instructions"
        if label == _KERNEL:
            line += f" = {counts[0] / floor:.2f}× {_PYDANTIC}"
        if len(counts) == 2:
            ratio = counts[0] / counts[1]
            line += f"  (that checkout: {counts[1] / 1e6:.1f} million, {ratio:.2f}×)"
        print(line, flush=True)


_LABELS = {"python -c pass": "python -c pass (process)", _PYDANTIC: "import pydantic (the floor)"}


def _counts() -> dict[str, int]:
    """The instructions of each process of :data:`_COUNTED` on this checkout, by label."""
    return {label: counted_process(ROOT, *args) for label, args in _COUNTED.items()}


def _summary(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:7.1f} ms  (fastest {min(samples) * 1000:.1f})"


def _vs(samples: list[float], target_s: float) -> str:
    return f"{statistics.median(samples) / target_s:.2f}× the {target_s * 1000:.0f} ms target"


def _ratio(ours: list[float], theirs: list[float]) -> str:
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    return f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})"


def _slowest_modules(count: int) -> list[tuple[int, str]]:
    """The ``count`` modules with the largest own import time, in µs."""
    out = _run(ROOT, "-X", "importtime", "-c", _KERNEL)
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
    parser.add_argument("--against", type=Path, help="another checkout, timed in the same rounds")
    parser.add_argument("--instructions", action="store_true", help="count with callgrind")
    parser.add_argument(
        "--no-count", dest="count", action="store_false", help="times only, no instructions"
    )
    args = parser.parse_args()

    roots = [ROOT] if args.against is None else [ROOT, args.against.resolve()]
    if args.instructions:
        count_instructions(roots)
        return
    demo_args = ("-m", "fsm_agent", "demo", "--no-diagram")
    for root in roots:
        timed_process(root, *demo_args)  # write the bytecode cache
    interpreter = [timed_process(ROOT, "-c", "pass") for _ in range(args.runs)]
    pydantic = [timed_import(ROOT, "pydantic") for _ in range(args.runs)]
    package: dict[Path, list[float]] = {root: [] for root in roots}
    kernel: dict[Path, list[float]] = {root: [] for root in roots}
    demo: dict[Path, list[float]] = {root: [] for root in roots}
    for _ in range(args.runs):
        for root in roots:
            package[root].append(timed_import(root, "fsm_agent"))
        for root in roots:
            kernel[root].append(timed_import(root, "fsm_agent", _KERNEL))
        for root in roots:
            demo[root].append(timed_process(root, *demo_args))

    counts = _counts() if args.count and shutil.which("valgrind") else {}
    ours, kernelled, demoed = package[ROOT], kernel[ROOT], demo[ROOT]
    floor = counts.get(_PYDANTIC)
    ratio = f" = {counts[_KERNEL] / floor:.2f}× {_PYDANTIC}" if floor and _KERNEL in counts else ""
    shown = {
        "python -c pass": (interpreter, ""),
        _PYDANTIC: (pydantic, ""),
        "import fsm_agent": (ours, ""),
        _KERNEL: (kernelled, f"{ratio}; {_vs(kernelled, IMPORT_TARGET_S)}"),
        _DEMO: (demoed, f"; {_vs(demoed, DEMO_TARGET_S)}"),
    }
    for label, (samples, verdict) in shown.items():
        count = f"; {counts[label] / 1e6:.1f} M instructions" if label in counts else ""
        print(f"{_LABELS.get(label, label):<33}{_summary(samples)}{count}{verdict}")
    if args.against is not None:
        other = roots[1]
        print(f"\nthe same rounds on {other}:")
        print(f"import fsm_agent                 {_summary(package[other])}")
        print(f"{_KERNEL:<33}{_summary(kernel[other])}")
        print(f"fsm-agent demo --no-diagram      {_summary(demo[other])}")
        print("this checkout ÷ that one (median of same-round ratios, range):")
        print(f"  import {_ratio(ours, package[other])}; demo {_ratio(demoed, demo[other])}")
        print(f"  {_KERNEL}: {_ratio(kernel[ROOT], kernel[other])}")
    if args.modules:
        print(f"\nslowest modules of `{_KERNEL}` (own time):")
        for own, name in _slowest_modules(args.modules):
            print(f"  {own / 1000:6.1f} ms  {name}")


if __name__ == "__main__":
    main()
