"""Every public import path of the package at release 25a5a58 still works.

``data/public_import_paths.json`` was generated once from that commit: every module under
``fsm_agent`` whose dotted path has no private part, each with the names of its ``__all__``.
Modules moved since are reached through their old paths as aliases of the new ones.
"""

from __future__ import annotations

import ast
import json
import sys
from importlib import import_module
from pathlib import Path

import pytest

import fsm_agent
from fsm_agent._lazy import MOVED

PATHS: dict[str, list[str]] = json.loads(
    (Path(__file__).parents[1] / "support" / "data" / "public_import_paths.json").read_text(
        encoding="utf-8"
    )
)

REMOVED = {
    ("fsm_agent.tools.mcp.content", "result_text"),
    ("fsm_agent.kernel.context", "LoopSettings"),
}
"""The names dropped on purpose since: a helper that nothing called, and the kernel's
``LoopSettings``, which moved to ``fsm_agent.kernel.plan`` with the plan it is compiled into
(the run context, below the plan, cannot name it at run time)."""


def test_the_list_was_read() -> None:
    """The list holds the package's modules and their public names."""
    assert len(PATHS) > 100
    assert "Agent" in PATHS["fsm_agent"]
    assert "ScriptedModel" in PATHS["fsm_agent.testing.scripted"]


@pytest.mark.parametrize("module", sorted(PATHS))
def test_an_old_module_path_imports_with_its_public_names(module: str) -> None:
    """The module imports by its old path and has every name its ``__all__`` had."""
    imported = import_module(module)
    missing = [
        name
        for name in PATHS[module]
        if not hasattr(imported, name) and (module, name) not in REMOVED
    ]
    assert missing == []


@pytest.mark.parametrize("module", sorted(m for m in PATHS if PATHS[m]))
def test_from_import_of_every_old_public_name_works(module: str) -> None:
    """``from <old path> import <name>`` works for every public name of the old ``__all__``."""
    for name in PATHS[module]:
        if (module, name) in REMOVED:
            continue
        namespace: dict[str, object] = {}
        exec(f"from {module} import {name}", namespace)
        assert namespace[name] is getattr(import_module(module), name)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_is_the_moved_module_itself(old: str, new: str) -> None:
    """A moved module's old path gives the very module at its new path, keeping its own name and
    spec, so a name patched through either path is patched for both."""
    assert import_module(old) is import_module(new)
    assert import_module(new).__spec__.name == new  # type: ignore[union-attr]


def test_a_moved_package_submodule_loads_once() -> None:
    """A submodule imported through a moved package's old path is the one at the new path."""
    old = import_module("fsm_agent.machine.checker.compose")
    assert old is import_module("fsm_agent.analysis.checker.compose")
    assert "fsm_agent.machine.checker.compose" in sys.modules


def _imported_names(path: Path, package: str) -> set[str]:
    """The absolute module names the file at ``path`` (in ``package``) imports from."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            anchor = parts[: len(parts) - node.level + 1] if node.level else []
            base = ".".join(filter(None, [*anchor, node.module or ""]))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_the_package_imports_no_old_path() -> None:
    """No module of the package imports a moved module by its old path: the import graph,
    which reads the files, sees every dependency."""
    root = Path(fsm_agent.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = ["fsm_agent", *path.relative_to(root).with_suffix("").parts]
        package = ".".join(parts[:-1])
        for name in _imported_names(path, package):
            if any(name == old or name.startswith(old + ".") for old in MOVED):
                found.append(f"{path.relative_to(root)} imports {name}")
    assert found == []
