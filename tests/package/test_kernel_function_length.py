"""Every function of the kernel reads in one screen: at most :data:`MAX_LINES` lines.

The kernel (``fsm_agent/kernel/``, its state handlers included) is the code every run goes
through and every feature touches; a function that grows past a screen is split into named
steps instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fsm_agent

KERNEL = Path(fsm_agent.__file__).parent / "kernel"
MAX_LINES = 60


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """Each function or method under ``root`` longer than ``limit`` lines (from its ``def`` to
    its last line), as ``path:line name (n lines)``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                where = path.relative_to(root.parent)
                found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_every_kernel_function_fits_in_a_screen() -> None:
    """No function in ``fsm_agent/kernel/`` is longer than 60 lines."""
    assert long_functions(KERNEL) == []


def test_a_long_function_is_named(tmp_path: Path) -> None:
    """The walk finds a long function at any depth (a method, a nested ``async def``) and
    names it with its place and length; short ones pass."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.py").write_text(
        "class C:\n"
        "    async def long(self):\n"
        "        a = 1\n"
        "        b = 2\n"
        "        c = 3\n"
        "        return a + b + c\n"
        "\n"
        "\n"
        "def short():\n"
        "    return 1\n"
    )
    assert long_functions(tmp_path / "sub", limit=4) == ["sub/m.py:2 long (5 lines)"]
