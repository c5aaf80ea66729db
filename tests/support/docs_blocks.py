"""The Python programs the docs show: every ```python block of README.md and docs/*.md, and
every file of examples/. Shared by the test that runs them and the one that type-checks them.

A block right after the line ``<!-- not run: REASON -->`` is type-checked but not run; a block
indented in a list counts too.
"""

from __future__ import annotations

import re
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
