"""Writes the screenshots of docs/inspector.md: runs the browser test that checks the pages over a
store of many scripted runs (tests/inspector/test_inspector_browser.py), which photographs each
page it checks, in the distribution's headless Chromium at 1,400 px. Run from a checkout with the
dev extra installed:

    python tests/support/inspector_screenshots.py

It overwrites ``docs/images/inspector-*.png``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
OUT = HERE.parents[1] / "docs" / "images"
TEST = "inspector/test_inspector_browser.py::test_the_pages_explain_a_store_of_many_runs"


def main() -> int:
    """Run the test with its screenshots going to ``docs/images``."""
    os.environ["FSM_AGENT_SCREENSHOTS"] = str(OUT)
    code = int(
        pytest.main(["-q", "-m", "browser", "-p", "no:cacheprovider", str(HERE.parent / TEST)])
    )
    if code == 0:
        for picture in sorted(OUT.glob("inspector-*.png")):
            print(f"wrote {picture}")
    return code


if __name__ == "__main__":
    sys.exit(main())
