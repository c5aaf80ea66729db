"""CPU instructions of a Python process under valgrind's callgrind: the same figure on a loaded
machine, for the benchmarks that count instead of timing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def seeded_env() -> dict[str, str]:
    """This process's environment with a fixed hash seed: string hashes decide how dictionaries
    and sets probe, so a random one moves a count by about 1 % between processes."""
    return {**os.environ, "PYTHONHASHSEED": "0"}


def instructions(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> int:
    """The instructions callgrind counts in ``python ARGS`` from start to exit (``env``: the
    process's environment, :func:`seeded_env` when not given)."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *args],
        env=dict(seeded_env() if env is None else env),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"refs:\s+([\d,]+)", done.stderr)
    if match is None:
        raise SystemExit(f"callgrind printed no instruction count:\n{done.stderr[-500:]}")
    return int(match.group(1).replace(",", ""))


def side_by_side(counts: Mapping[K, Callable[[], int]]) -> dict[K, int]:
    """Each count of ``counts`` made, one process per core at a time (a count does not depend
    on what else the machine runs)."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        futures = {key: pool.submit(count) for key, count in counts.items()}
        return {key: future.result() for key, future in futures.items()}
