"""User code type-checks under ``mypy --strict``, with and without the pydantic plugin: the
typed-usage file, every Python block of the docs and every example, and a file importing the
new path of every moved module.

The old paths of moved modules (``fsm_agent._lazy.MOVED``) are runtime aliases, made by an
import hook that a type checker does not run: user code typed against them does not check, so
the docs, the examples and the typed-usage file use the new paths only (docs/machine.md).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest
from mypy import api

from docs_blocks import ROOT, Program, doc_blocks, examples
from fsm_agent._lazy import MOVED

TYPING_USAGE = ROOT / "tests" / "support" / "typing_usage.py"

# The docs name tiktoken in a block that is not run; users need not have it to type-check.
_UNTYPED_FOR_USERS = ["tiktoken.*"]


def _config(plugin: bool) -> str:
    """The project's own mypy options (pyproject.toml), with or without its plugins.

    With the plugins they are exactly the options ``mypy`` runs with, so the project's cache
    (warm after ``mypy``, which ``.ci/run`` runs first) answers for fsm_agent and everything it
    imports: about a second, against half a minute on a fresh cache.
    """
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    untyped = [m for o in options["overrides"] if o["ignore_missing_imports"] for m in o["module"]]
    lines = [
        "[mypy]",
        f"strict = {options['strict']}",
        f"python_version = {options['python_version']}",
    ]
    if plugin:
        lines.append(f"plugins = {', '.join(options['plugins'])}")
    lines += [f"[mypy-{','.join(untyped + _UNTYPED_FOR_USERS)}]", "ignore_missing_imports = True"]
    return "\n".join(lines) + "\n"


# Without the plugin (about 40 s on a fresh cache) is `slow`: the same files pass mypy --strict
# with the plugin by default, and this run only adds what the plugin changes.
@pytest.mark.parametrize(
    "plugin",
    [
        pytest.param(True, id="pydantic-plugin"),
        pytest.param(False, id="no-plugin", marks=pytest.mark.slow),
    ],
)
def test_user_code_passes_mypy_strict(plugin: bool, tmp_path: Path) -> None:
    """Every docs block, every example and tests/support/typing_usage.py pass mypy --strict."""
    config = tmp_path / "mypy.ini"
    config.write_text(_config(plugin))
    files = [str(TYPING_USAGE)]
    for program in [*doc_blocks(), *examples(), _new_paths()]:
        path = tmp_path / f"{program.module}.py"
        path.write_text(program.code)
        files.append(str(path))
    cache = ROOT / ".mypy_cache"
    if not plugin:
        cache = cache / "user-no-plugin"
    # mypy raises the interpreter's recursion limit for good: put it back, else a later test
    # of this process decodes JSON nested deeper than a program's default limit allows.
    limit = sys.getrecursionlimit()
    try:
        out, err, status = api.run(
            ["--config-file", str(config), "--cache-dir", str(cache), *files]
        )
    finally:
        sys.setrecursionlimit(limit)
    assert status == 0, out + err


def _new_paths() -> Program:
    """A user file importing the new path of every moved module."""
    code = "".join(f"import {new}\n" for new in sorted(set(MOVED.values())))
    return Program("the new paths of moved modules", code)


def _imported(code: str) -> set[str]:
    """The modules ``code`` imports (``from m import n``: ``m``, and ``m.n``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _old(name: str) -> str | None:
    """The old path ``name`` is or lies under, if it is one."""
    return next((old for old in MOVED if name == old or name.startswith(old + ".")), None)


def test_user_code_shown_imports_no_old_path() -> None:
    """No docs block, example or the typed-usage file imports a moved module by its old path,
    which only the runtime knows (a type checker would not find it)."""
    programs = [*doc_blocks(), *examples()]
    programs.append(Program("typing_usage.py", TYPING_USAGE.read_text(encoding="utf-8")))
    found = [
        f"{program.name}: {name} (now {MOVED[old]})"
        for program in programs
        for name in sorted(_imported(program.code))
        if (old := _old(name)) is not None
    ]
    assert found == []


def test_an_old_path_is_found_in_an_import() -> None:
    """The check above reads ``import``, ``from ... import`` and a moved package's modules."""
    code = "import fsm_agent.messages\nfrom fsm_agent.machine.checker import explore\n"
    assert {_old(name) for name in _imported(code)} >= {
        "fsm_agent.messages",
        "fsm_agent.machine.checker",
    }
    assert _old("fsm_agent.values.messages") is None
