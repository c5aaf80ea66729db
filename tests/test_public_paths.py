"""Every public import path of the package at release 25a5a58 still works.

``data/public_import_paths.json`` was generated once from that commit: every module under
``fsm_agent`` whose dotted path has no private part, each with the names of its ``__all__``.
Modules moved since are reached through their old paths as aliases of the new ones.
"""

from __future__ import annotations

import json
from importlib import import_module
from pathlib import Path

import pytest

PATHS: dict[str, list[str]] = json.loads(
    (Path(__file__).parent / "data" / "public_import_paths.json").read_text(encoding="utf-8")
)

REMOVED = {("fsm_agent.tools.mcp.content", "result_text")}
"""The names dropped on purpose since, each a helper that nothing called."""


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
