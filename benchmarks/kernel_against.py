"""The kernel's µs per step against another revision of fsm_agent, in one round.

Plays the workload of ``kernel_overhead.py`` (``workload.py``: N - 1 ``add`` tool calls, then an
answer, each response built per call from the wire body) on this checkout's ``fsm_agent`` and on
the ``fsm_agent/`` of ``REV`` (taken with ``git archive``; the workload is this checkout's, so
the older revision must have the public API it uses). Each round times both in fresh processes,
one after the other (each first in half the rounds), and the figure is the median of the
rounds' ratios (this / REV), which cancels most of the noise of a shared machine.
``--instructions`` counts CPU instructions under callgrind instead (with a fixed hash seed):
the same figure on a loaded machine, to the instruction.

    python benchmarks/kernel_against.py REV [--steps 2,10,50] [--rounds 15] [--instructions]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from kernel_overhead import PACKAGE_ROOT_ENV, _instructions

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def extract(rev: str, into: Path) -> None:
    """Write ``rev``'s ``fsm_agent/`` under ``into``."""
    archive = into / "rev.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", rev, "fsm_agent"], cwd=REPO, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()


def time_one(root: str | None, steps: int, runs: int) -> float:
    """µs per step of fsm_agent from ``root`` (``None``: this checkout), in a fresh process:
    the fastest of five timings of ``runs`` runs, after a warm-up."""
    env = {**os.environ, PACKAGE_ROOT_ENV: root} if root is not None else None
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "kernel_overhead.py"),
            "--time-one",
            "fsm_agent",
            str(steps),
            str(runs),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Parse the options and measure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the revision to compare with (a commit, tag or branch)")
    parser.add_argument("--steps", default="2,10,50", help="comma-separated run lengths")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--instructions", action="store_true", help="count with callgrind")
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind on PATH")
    with tempfile.TemporaryDirectory() as scratch:
        extract(args.rev, Path(scratch))
        for steps in (int(s) for s in args.steps.split(",")):
            runs = max(20, 3_000 // steps)
            if args.instructions:
                counts = {}
                for name, root in (("this", None), (args.rev, scratch)):
                    played = _instructions("fsm_agent", steps, runs, play_them=True, root=root)
                    prepared = _instructions("fsm_agent", steps, runs, play_them=False, root=root)
                    counts[name] = (played - prepared) / (runs * steps)
                    print(f"N = {steps:>5}  {name:<12} {counts[name]:,.0f} instructions/step")
                ratio = counts["this"] / counts[args.rev]
                print(f"N = {steps:>5}  this / {args.rev}: {ratio:.3f}×")
                continue
            ratios = []
            for round_ in range(args.rounds):
                if round_ % 2:  # each goes first in half the rounds
                    theirs = time_one(scratch, steps, runs)
                    ratios.append(time_one(None, steps, runs) / theirs)
                else:
                    ours = time_one(None, steps, runs)
                    ratios.append(ours / time_one(scratch, steps, runs))
            print(
                f"N = {steps:>5}  this / {args.rev}: {statistics.median(ratios):.3f}× "
                f"({min(ratios):.3f}–{max(ratios):.3f}, {args.rounds} rounds)"
            )


if __name__ == "__main__":
    main()
