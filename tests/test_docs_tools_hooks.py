"""The examples of docs/tools.md and docs/hooks.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def examples() -> list[tuple[str, str]]:
    """Every ```python block of the two pages, with an id naming page and position."""
    found = []
    for page in ("tools.md", "hooks.md"):
        for index, match in enumerate(BLOCK.finditer((DOCS / page).read_text())):
            found.append((f"{page}#{index + 1}", match.group(1)))
    return found


def test_each_page_has_examples() -> None:
    """Both pages show their features with code."""
    pages = {name.split("#")[0] for name, _ in examples()}
    assert pages == {"tools.md", "hooks.md"}
    assert len(examples()) >= 12


@pytest.mark.parametrize(("name", "code"), examples(), ids=[n for n, _ in examples()])
def test_example_runs(name: str, code: str) -> None:
    """The example runs to the end and its assertions hold."""
    exec(compile(code, name, "exec"), {"__name__": f"docs_example_{name}"})
