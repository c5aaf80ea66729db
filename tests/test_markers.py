"""Long tests are opt-in, as README.md says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW = "tests/test_compaction.py::test_ten_thousand_steps_with_a_small_window_stay_bounded"


def _pytest(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.stdout


def test_slow_tests_are_skipped_by_default() -> None:
    """A test marked slow does not run under a plain ``pytest``, and says how to run it."""
    out = _pytest(SLOW)
    assert "1 skipped" in out
    assert "slow tests are opt-in: run pytest -m slow" in out


def test_slow_tests_are_selected_by_their_marker() -> None:
    """``-m slow`` selects them."""
    out = _pytest("--collect-only", "-m", "slow", SLOW)
    assert SLOW in out.splitlines()
