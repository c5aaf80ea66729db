"""What a newcomer meets first: the docs home page lists every example, and the examples' header
commands work from the repository's root. (The built home and errors pages are checked with the
rest of the built site, in test_docs_pages.py, so that the site is built once.)"""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from docs_blocks import EXAMPLES, ROOT

HOME = ROOT / "docs" / "index.md"


def _header_commands(path: Path) -> list[str]:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return [line.strip() for line in doc.splitlines() if line.strip().startswith("fsm-agent ")]


@pytest.mark.parametrize(
    "example", [p for p in EXAMPLES if _header_commands(p)], ids=lambda p: p.name
)
def test_an_example_s_header_commands_run_from_the_repository_root(example: Path) -> None:
    """Every ``fsm-agent`` command in an example's docstring works as written from the root,
    in a fresh process (where nothing but the working directory makes the example importable)."""
    for command in _header_commands(example):
        done = subprocess.run(
            [sys.executable, "-m", "fsm_agent", *shlex.split(command)[1:]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (command, done.stderr)


def test_the_home_page_lists_every_example() -> None:
    """docs/index.md names every program of examples/."""
    home = HOME.read_text(encoding="utf-8")
    assert [p.name for p in EXAMPLES if f"`{p.name}`" not in home] == []
