"""The phase fuzzer: generated models that try illegal moves and out-of-phase tools keep the
phase invariants P1-P4 on the real kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsm_agent.cli import main
from fsm_agent.fuzzing.phases import fuzz_phases


def test_generated_attacks_keep_the_phase_invariants() -> None:
    """Sequential tool calls: no out-of-phase tool runs, no illegal move lands, one result per
    call, events agree with the run state."""
    report = fuzz_phases(120, seed=1)
    assert report.violations == []
    assert report.moves > 50 and report.refused > 50  # the attacks were made and refused


def test_parallel_tool_calls_keep_the_phase_invariants() -> None:
    """Concurrent calls in one turn are each checked against the phase when they start."""
    report = fuzz_phases(60, seed=1_000, parallel=True)
    assert report.violations == []


def test_fuzz_phases_command_attacks_a_table_of_your_own(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsm-agent fuzz --phases plays stubs of the table's tools and reports no violation."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    assert main(["fuzz", "--phases", "plan_act_check:PHASES", "--examples", "40"]) == 0
    out = capsys.readouterr().out
    assert "40 cases" in out and "0 violation(s)" in out
