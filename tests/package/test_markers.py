"""Long tests are opt-in, as README.md says: every opt-in marker is in conftest's one list."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import MARKERS

ROOT = Path(__file__).resolve().parents[2]
# One test carrying each opt-in marker.
EXAMPLES = {
    "slow": (
        "tests/kernel/test_compaction.py::test_ten_thousand_steps_with_a_small_window_stay_bounded"
    ),
    "e2e": "tests/e2e/test_e2e_output.py",
    "browser": "tests/inspector/test_inspector_browser.py",
}

SLOW_MARK = re.compile(
    r"^\s*@pytest\.mark\.slow\b|marks=pytest\.mark\.slow\b|^pytestmark = pytest\.mark\.slow\b",
    re.MULTILINE,
)


def _pytest(*args: str) -> str:
    done = subprocess.run(
        # -n 0: in one process, not the two worker processes of the suite's addopts.
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-rs", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.stdout


def test_every_opt_in_marker_has_an_example() -> None:
    """The examples below cover exactly the opt-in markers of conftest's list."""
    assert set(EXAMPLES) == {name for name, m in MARKERS.items() if m.opt_in}


def test_opt_in_tests_are_skipped_by_default() -> None:
    """Tests with an opt-in marker do not run under a plain ``pytest``, and each skip says how
    to run them, in the words of conftest's list."""
    out = _pytest(*EXAMPLES.values())
    assert " skipped" in out and " passed" not in out and " failed" not in out
    for marker in EXAMPLES:
        assert MARKERS[marker].opt_in in out, marker


def test_slow_tests_are_selected_by_their_marker() -> None:
    """``-m slow`` selects them."""
    out = _pytest("--collect-only", "-m", "slow", EXAMPLES["slow"])
    assert EXAMPLES["slow"] in out.splitlines()


def test_readme_lists_every_module_with_slow_tests() -> None:
    """README.md's test section names each test module that marks a test slow, and no other."""
    marked = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("test_*.py")
        if SLOW_MARK.search(path.read_text(encoding="utf-8"))
    }
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("Run the whole test suite") : readme.index("## In code")]
    listed = set(re.findall(r"^- `(tests/\w+/test_\w+\.py)`", section, re.MULTILINE))
    assert listed == marked
