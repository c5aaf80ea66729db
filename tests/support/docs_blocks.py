"""The Python programs the docs show: every ```python block of README.md and docs/*.md, and
every file of examples/. Shared by the test that runs them and the one that type-checks them;
and the docs build the docs tests check (:func:`build_site`).

A block right after the line ``<!-- not run: REASON -->`` is type-checked but not run; a block
indented in a list counts too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
EXAMPLES = tuple(sorted((ROOT / "examples").glob("*.py")))

_BLOCK = re.compile(
    r"^(?P<indent> *)(?:<!-- not run: (?P<reason>[^\n]*?) -->\n(?P=indent))?"
    r"```python\n(?P<code>.*?)^(?P=indent)```",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Program:
    """One program: where it is shown, its source, and why it is not run (``None``: it runs)."""

    name: str
    code: str
    not_run: str | None = None

    @property
    def module(self) -> str:
        """A module name unique among the programs, for files handed to mypy."""
        return re.sub(r"\W", "_", self.name).lower()


def doc_blocks() -> list[Program]:
    """Every ```python block of README.md and docs/*.md, named ``page#n``."""
    found = []
    for page in PAGES:
        for index, match in enumerate(_BLOCK.finditer(page.read_text())):
            name = f"{page.relative_to(ROOT)}#{index + 1}"
            found.append(Program(name, textwrap.dedent(match["code"]), match["reason"]))
    return found


def examples() -> list[Program]:
    """Every program of examples/, named by its path."""
    return [Program(str(p.relative_to(ROOT)), p.read_text()) for p in EXAMPLES]


def build_site(root: Path, site: Path) -> list[str]:
    """Build the docs of ``root`` as ``.ci/run`` does (``--strict``, not ``--quiet``); return
    what fails the check: the warning lines, or the exit status when the build fails without one
    (some plugins log warnings that ``--strict`` does not count, so the lines are read too)."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    output = done.stdout + done.stderr
    problems = [line for line in output.splitlines() if "WARNING" in line]
    if done.returncode != 0 and not problems:
        problems.append(f"mkdocs build exited {done.returncode}:\n{output}")
    return problems
