"""What a newcomer meets first: the docs home page (the machine's picture, a code sample, every
example listed), the examples' header commands from the repository's root, and the errors
reference page rendered without raw markup."""

from __future__ import annotations

import ast
import re
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


def test_the_home_page_shows_the_machine_and_code(docs_site: Path) -> None:
    """The built home page shows the overview picture and a highlighted Python sample."""
    home = (docs_site / "index.html").read_text(encoding="utf-8")
    picture = re.search(r'<img [^>]*src="diagrams/agent\.svg"', home)
    assert picture is not None and (docs_site / "diagrams" / "agent.svg").is_file()
    assert re.search(r'<span class="kn">(from|import)</span>', home)


def test_the_errors_page_shows_no_raw_markup(docs_site: Path) -> None:
    """The exception tree on the errors reference page shows names, not ````literal```` markup."""
    page = (docs_site / "reference" / "errors" / "index.html").read_text(encoding="utf-8")
    assert "FsmAgentError" in page and "RateLimitError" in page
    assert "``" not in page
