"""The benchmark instrument still works: the workload plays on fsm_agent and on the floors.

Nothing here is timed; peers are not needed (they are installed only for benchmarking).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from fsm_agent.persistence import SQLiteCheckpointer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import durable_lag
from external import counted_rows, durable_rows, kernel_rows
from workload import (
    ANSWER,
    AsyncioFloorAdapter,
    FloorAdapter,
    FsmAgentAdapter,
    TypedFloorAdapter,
    add_calls,
)


def test_workload_runs_on_fsm_agent_and_the_floor() -> None:
    """At N = 2 every adapter calls ``add`` once, then answers."""
    for adapter in (FsmAgentAdapter(), FloorAdapter(), TypedFloorAdapter(), AsyncioFloorAdapter()):
        add_calls.value = 0
        assert asyncio.run(adapter.prepare(2)()) == ANSWER, adapter.name
        assert add_calls.value == 1, adapter.name


def test_startup_times_the_checkout_it_is_given_from_any_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``benchmarks/startup.py`` imports the checkout it measures, not a ``fsm_agent`` in the
    directory it was started from (``-c`` puts the working directory first on the path)."""
    import startup

    decoy = tmp_path / "fsm_agent"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise SystemExit('the decoy was imported')\n")
    monkeypatch.chdir(tmp_path)
    root = Path(__file__).resolve().parents[2]
    assert startup.timed_import(root, "fsm_agent") > 0


def test_kernel_against_measures_the_revision_it_extracts(tmp_path: Path) -> None:
    """``benchmarks/kernel_against.py`` times the ``fsm_agent`` of the folder it is given (a
    decoy there is what gets imported) and extracts a revision's package with ``git archive``."""
    import subprocess

    import kernel_against

    assert kernel_against.time_one(None, 2, 2) > 0
    decoy = tmp_path / "decoy" / "fsm_agent"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise SystemExit('the decoy was imported')\n")
    with pytest.raises(subprocess.CalledProcessError) as failed:
        kernel_against.time_one(str(decoy.parent), 2, 2)
    assert "the decoy was imported" in failed.value.stderr
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout: nothing to extract a revision from")
    kernel_against.extract("HEAD", tmp_path)
    assert (tmp_path / "fsm_agent" / "kernel" / "driver.py").is_file()


def test_the_sync_step_row_is_the_median_of_same_round_ratios(tmp_path: Path) -> None:
    """The sync target's ratio is the median of the ratios of runs that took turns, as printed,
    not the ratio of two medians measured minutes apart (a machine whose speed changed between
    them moved one side only)."""
    made = iter(range(10))
    line = durable_lag._step_costs(2, lambda: SQLiteCheckpointer(tmp_path / f"{next(made)}.db"))
    durable = durable_rows(f"sqlite per step: {line}")
    assert durable.sync_us is not None and durable.plain_us is not None
    assert durable.sync_ratio is not None and durable.sync_ratio > 0
    summary = "sqlite per step: plain 40 µs, sync 300 µs (6.50×), async 90 µs (2.25×), exit 50 µs"
    assert durable_rows(summary).sync_ratio == 6.50  # what was printed, not 300 / 40


def test_the_counted_sync_row_is_what_durable_lag_prints() -> None:
    """The instruction-count target reads the ratio ``durable_lag.py --instructions`` printed;
    a summary without it (valgrind missing, say) gives no figure rather than a wrong one."""
    per_step = {"plain": 340_876.0, "sync": 1_152_627.0, "async": 1_385_649.0, "exit": 489_044.0}
    line = durable_lag._counted_line(per_step)
    counted = counted_rows(f"sqlite per step, in instructions (30-step runs): {line}")
    assert (counted.plain, counted.sync, counted.ratio) == (340_876, 1_152_627, 3.38)
    missing = counted_rows("not measured: --instructions needs valgrind on PATH")
    assert (missing.plain, missing.sync, missing.ratio) == (None, None, None)


def test_the_counted_step_rows_are_what_kernel_overhead_prints() -> None:
    """The step's instruction targets read fsm_agent's and the typed floor's counts and the ratio
    ``kernel_overhead.py --instructions`` printed, per run length, from its summary as the round
    joins it; a run length whose counts are missing gives no row."""
    printed = [
        "N =     2  typed     109,904 instructions/step",
        "N =     2  fsm_agent 205,394 instructions/step",
        "N =     2  fsm_agent / typed: 1.87×",
        "N =    10  fsm_agent / typed: 1.74×",
    ]
    summary = "; ".join(" ".join(line.split()) for line in printed)
    assert kernel_rows(summary) == {2: (205_394, 109_904, 1.87)}
