"""Every function of the package reads in one screen: at most :data:`MAX_LINES` lines.

The kernel is the code every run goes through and every feature touches; the machine's analysis
(bounds, checker, proof) is what users audit; the rest is read by whoever changes it. A function
that grows past a screen is split into named steps instead. The only exceptions are
:data:`EXCEPTIONS`, each with its reason.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

import fsm_agent

PACKAGE = Path(fsm_agent.__file__).parent
MAX_LINES = 60

EXCEPTIONS: dict[str, str] = {
    "fsm_agent/cli/check.py add_check_arguments": (
        "an argument table: one add_argument per flag, read as a list, not as steps"
    ),
    "fsm_agent/cli/diagram.py add_arguments": (
        "an argument table: one add_argument per flag, read as a list, not as steps"
    ),
}
"""Functions allowed past :data:`MAX_LINES`, as ``path name``, with the reason."""


def long_functions(
    root: Path, limit: int = MAX_LINES, exceptions: Collection[str] = ()
) -> list[str]:
    """Each function or method under ``root`` longer than ``limit`` lines (from its ``def`` to
    its last line), as ``path:line name (n lines)``, but those named in ``exceptions`` (as
    ``path name``)."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            where = path.relative_to(root.parent)
            if length > limit and f"{where} {node.name}" not in exceptions:
                found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_every_function_fits_in_a_screen() -> None:
    """No function in ``fsm_agent/`` is longer than 60 lines, but the named exceptions."""
    assert long_functions(PACKAGE, exceptions=EXCEPTIONS) == []


def test_every_exception_is_still_long() -> None:
    """Each named exception exists and is still past the limit (one that was split leaves the
    list)."""
    assert set(EXCEPTIONS) <= {
        found.split(":")[0] + " " + found.split(" ")[1] for found in long_functions(PACKAGE)
    }


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
    assert long_functions(tmp_path / "sub", limit=4, exceptions={"sub/m.py long"}) == []
