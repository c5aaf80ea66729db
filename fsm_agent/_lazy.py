"""Names and submodules loaded on first use, for the packages that load their names lazily
(PEP 562: the root package, :mod:`fsm_agent.testing`, :mod:`fsm_agent.diagrams` and
:mod:`fsm_agent.persistence`), and the old import paths of moved modules, kept as aliases of
the new ones."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader  # not imported when run: it loads importlib.resources
    from importlib.machinery import ModuleSpec

__all__ = [
    "MOVED",
    "AliasFinder",
    "facade",
    "install_aliases",
    "submodule",
    "type_checking_imports",
]

MOVED: Mapping[str, str] = {
    "fsm_agent.approval": "fsm_agent.run.approval",
    "fsm_agent.deep_json": "fsm_agent.values.deep_json",
    "fsm_agent.events": "fsm_agent.run.events",
    "fsm_agent.machine.bounds": "fsm_agent.analysis.bounds",
    "fsm_agent.machine.checker": "fsm_agent.analysis.checker",
    "fsm_agent.machine.formulas": "fsm_agent.analysis.formulas",
    "fsm_agent.machine.proof": "fsm_agent.analysis.proof",
    "fsm_agent.mcp": "fsm_agent.tools.mcp",
    "fsm_agent.messages": "fsm_agent.values.messages",
    "fsm_agent.model_settings": "fsm_agent.values.model_settings",
    "fsm_agent.output": "fsm_agent.run.output",
    "fsm_agent.record": "fsm_agent.values.record",
    "fsm_agent.replay_children": "fsm_agent.replay.children",
    "fsm_agent.replay_compare": "fsm_agent.replay.divergence",
    "fsm_agent.run_state": "fsm_agent.run.state",
    "fsm_agent.scripted": "fsm_agent.models.scripted",
    "fsm_agent.testing.scripted": "fsm_agent.models.scripted",
}
"""Each moved module's old path, and its new one; a moved package's submodules move with it.
The old paths are permanent aliases: code written against them keeps working unchanged."""


def submodule(package: str, name: str) -> object:
    """The submodule ``<package>.<name>``, imported; ``AttributeError`` when there is none (a
    submodule that exists but lacks a dependency raises its ``ModuleNotFoundError``)."""
    if not name.startswith("_"):
        try:
            return import_module(f"{package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
    raise AttributeError(f"module {package!r} has no attribute {name!r}")


def facade(
    namespace: dict[str, Any], adopt: Callable[[object], None] | None = None
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a lazy facade (PEP 562), from its ``namespace``.

    Its public names are its ``__all__``, written once; a name not bound when the package runs
    is imported from the module its ``if TYPE_CHECKING:`` block imports it from (the block
    type checkers read, read here on the first such use). Once a module of that block is
    imported, by a first use here or by any other import, all its public names are bound in
    the namespace, each passed to ``adopt`` first, so the next read finds them directly."""
    package: str = namespace["__name__"]
    public = frozenset(namespace["__all__"])
    table: dict[str, str] = {}

    def bind_loaded() -> None:
        """Bind the public names of every module of the table that is fully imported."""
        for where, names in _by_module(table).items():
            loaded = sys.modules.get(_absolute(where, package))
            if loaded is None or not all(hasattr(loaded, name) for name in names):
                continue  # not imported, or still being imported
            for name in names:
                if name not in namespace:
                    value = getattr(loaded, name)
                    if adopt is not None:
                        adopt(value)
                    namespace[name] = value

    def __getattr__(name: str) -> object:
        """A public name, imported with its module on first use; a submodule's name imports
        the submodule."""
        if not table:
            table.update(
                (name, where)
                for name, where in type_checking_imports(namespace["__file__"]).items()
                if name in public
            )
        where = table.get(name)
        if where is None:
            return submodule(package, name)
        imported = import_module(where if where.startswith(".") else f".{where}", package)
        bind_loaded()
        return namespace[name] if name in namespace else getattr(imported, name)

    def __dir__() -> list[str]:
        """The module's names, the public ones not yet loaded included."""
        return sorted({*namespace, *public})

    return __getattr__, __dir__


def type_checking_imports(path: str) -> dict[str, str]:
    """Each name the ``if TYPE_CHECKING:`` blocks of the module at ``path`` import, with the
    module it comes from, written as there (``.kernel.agent``, ``..machine.guards``)."""
    import ast  # here: read once, on a facade's first lazy name

    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imported in node.body:
                if isinstance(imported, ast.ImportFrom):
                    where = "." * imported.level + (imported.module or "")
                    found.update((alias.asname or alias.name, where) for alias in imported.names)
    return found


def _by_module(table: Mapping[str, str]) -> dict[str, list[str]]:
    """The names of ``table`` grouped by their module."""
    grouped: dict[str, list[str]] = {}
    for name, where in table.items():
        grouped.setdefault(where, []).append(name)
    return grouped


def _absolute(where: str, package: str) -> str:
    """The absolute name of module ``where``, relative to ``package`` when it starts with dots."""
    level = len(where) - len(where.lstrip("."))
    if not level:
        return where
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    rest = where[level:]
    return f"{base}.{rest}" if rest else base


class AliasFinder:
    """Imports a moved module by its old path in :data:`MOVED`: the import gives the module at
    its new path itself, so its names, its types and a patch made through either path are one."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """A spec for an old path, or ``None`` for every other module."""
        del path, target
        if _new_path(fullname) is None:
            return None
        from importlib.machinery import ModuleSpec  # here: ``import fsm_agent`` stays cheap

        return ModuleSpec(fullname, cast("Loader", self))

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        """The module at the new path, imported."""
        new = _new_path(spec.name)
        assert new is not None  # find_spec answered for this name only
        module = import_module(new)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: give back the module its own spec, which the import replaced."""
        module.__spec__ = self._specs.pop(module.__spec__.name if module.__spec__ else "", None)

    def __init__(self) -> None:
        self._specs: dict[str, ModuleSpec | None] = {}


def _new_path(old: str) -> str | None:
    """The new path of module ``old``, or ``None`` when it did not move."""
    if not old.startswith("fsm_agent."):
        return None
    for moved, new in MOVED.items():
        if old == moved or old.startswith(moved + "."):
            return new + old[len(moved) :]
    return None


def install_aliases() -> None:
    """Let the old paths of :data:`MOVED` import (once, however often it is called)."""
    if not any(isinstance(finder, AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())  # before the path finder: a moved package's
        # submodules are found under their new path too, and must not load twice
