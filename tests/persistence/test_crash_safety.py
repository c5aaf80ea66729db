"""Crash safety with real processes (DESIGN §8, invariant 10): a run on a SQLite checkpointer is
SIGKILLed at every checkpoint boundary in turn (and at every effect record, and inside a tool),
and a fresh process resumes it to the uninterrupted run's result without running a
non-idempotent tool twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).resolve().parents[1] / "support" / "crash_worker.py"

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")


def _cases(tmp_path: Path, mode: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    done = subprocess.run(
        [sys.executable, str(WORKER), str(tmp_path), mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=WORKER.parent,
        env={**os.environ, "PYTHONPATH": str(WORKER.parent)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first, *cases = (json.loads(line) for line in done.stdout.splitlines())
    return first, cases


def _same_run(baseline: dict[str, Any], state: dict[str, Any]) -> None:
    for name in ("output", "stop_reason", "state", "usage", "counters", "model_calls"):
        assert state[name] == baseline[name], name


def test_a_kill_at_every_checkpoint_resumes_to_the_same_result(tmp_path: Path) -> None:
    """SIGKILL after each checkpoint; the fresh process's result equals the uninterrupted one
    (output, stop reason, usage, thread) and every tool ran exactly once."""
    first, cases = _cases(tmp_path, "checkpoint")
    baseline = first["baseline"]
    assert len(cases) == len(baseline["trace"]) >= 15
    for case in cases:
        assert case["first"] == -9 and case["second"] == 0, case
        _same_run(baseline, case["state"])
        assert case["state"]["messages"] == baseline["messages"], case["crash_after"]
        assert Counter(case["log"]) == Counter(first["log"]), case["crash_after"]


def test_a_kill_at_every_write_never_runs_the_charge_twice(tmp_path: Path) -> None:
    """SIGKILL after each intent and result too: the same ending, usage and model calls; the
    charge runs at most once (outcome unknown when its intent was the last write)."""
    first, cases = _cases(tmp_path, "any")
    baseline = first["baseline"]
    assert len(cases) > len(baseline["trace"])
    for case in cases:
        assert case["first"] == -9 and case["second"] == 0, case
        _same_run(baseline, case["state"])
        log = Counter(case["log"])
        assert log["charge"] <= 1 and log["model"] == 5, case["crash_after"]
        results = [
            part["content"]
            for message in case["state"]["messages"]
            for part in message["parts"]
            if part["type"] == "tool_result"
        ]
        unknown = [r for r in results if r.startswith("Error: outcome unknown")]
        assert len(unknown) == (1 - log["charge"]), case["crash_after"]


def test_a_kill_inside_a_tool_does_not_run_it_again(tmp_path: Path) -> None:
    """Killed after the charge took effect but before its result was stored: the resumed run
    does not charge again and tells the model the outcome is unknown."""
    _, [case] = _cases(tmp_path, "in-tool")
    assert case["first"] == -9 and case["second"] == 0, case
    assert Counter(case["log"])["charge"] == 1
    assert "outcome unknown" in json.dumps(case["state"]["messages"])
    assert case["state"]["stop_reason"] == "completed"


def test_a_kill_in_the_model_call_after_a_tool_turn_runs_no_tool_again(tmp_path: Path) -> None:
    """A run nobody follows stores its tool outcomes before its next model call, but not yet
    the checkpoints of the moves after the turn (a resume re-derives them). Killed inside that
    model call, the store's newest checkpoint is the tool turn's, with every outcome recorded;
    the resumed run reuses them: the charge and the lookups run once, nothing reads "outcome
    unknown", and the run completes (the lost answer is asked for again)."""
    first, [case] = _cases(tmp_path, "in-model")
    assert case["first"] == -9 and case["second"] == 0, case
    assert case["stored"] == {"state": "dispatching", "open": []}
    log = Counter(case["log"])
    assert log["charge"] == 1 and log["lookup"] == Counter(first["log"])["lookup"] == 2
    assert "outcome unknown" not in json.dumps(case["state"]["messages"])
    assert case["state"]["stop_reason"] == "completed"
    assert case["state"]["output"] == "Charged 5 after looking up a and b."
