"""``diagrams.read_trace`` reads what ``fsm-agent demo --record`` writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fsm_agent import diagrams
from fsm_agent.replay import read_recording


def test_read_trace_reads_a_demo_recording(tmp_path: Path) -> None:
    """A recording (header line, then events) reads as the path of its events."""
    path = tmp_path / "run.jsonl"
    subprocess.run(
        [sys.executable, "-m", "fsm_agent", "demo", "--no-diagram", "--record", str(path)],
        check=True,
        capture_output=True,
    )
    expected = diagrams.RunPath.from_events(read_recording(path).events)
    assert diagrams.read_trace(path) == expected
    assert expected.stop_reason is not None and sum(expected.row_visits.values()) > 1
