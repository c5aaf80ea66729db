"""Names and submodules loaded on first use, for the packages that load their names lazily
(PEP 562), and the old import paths of moved modules, kept as aliases of the new ones."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from importlib import import_module
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader  # not imported when run: it loads importlib.resources

__all__ = ["MOVED", "AliasFinder", "facade", "install_aliases", "load", "submodule"]

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


def load(
    package: str, module_of: Mapping[str, str], namespace: dict[str, Any], name: str
) -> object:
    """The value of ``name`` in ``package``, imported from its module in ``module_of`` (a
    submodule's name, like ``text``, or a name relative to ``package``, like ``..machine``) and
    kept in the package's ``namespace``, so the next read finds it there; a name the table
    does not hold is a submodule's, or an ``AttributeError``."""
    module = module_of.get(name)
    if module is None:
        return submodule(package, name)
    value = getattr(
        import_module(module if module.startswith(".") else f".{module}", package), name
    )
    namespace[name] = value
    return value


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
    package: str, lazy: Mapping[str, Sequence[str]], namespace: dict[str, Any]
) -> tuple[Any, Any]:
    """The ``__getattr__`` and ``__dir__`` of a lazy facade (PEP 562) whose public names are
    the ``__all__`` in its ``namespace``: ``lazy`` maps each module (as :func:`load` reads it)
    to the names it holds, every one of them in ``__all__``."""
    module_of = {name: module for module, names in lazy.items() for name in names}
    public: Sequence[str] = namespace["__all__"]
    unlisted = sorted(set(module_of) - set(public))
    if unlisted:
        raise AssertionError(f"{package}: lazy names missing from __all__: {unlisted}")

    def __getattr__(name: str) -> object:
        """A public name, imported with its module on first use; a submodule's name imports
        the submodule."""
        return load(package, module_of, namespace, name)

    def __dir__() -> list[str]:
        """The module's names, the public ones not yet loaded included."""
        return sorted({*namespace, *public})

    return __getattr__, __dir__


class AliasFinder:
    """Imports a moved module by its old path in :data:`MOVED`: the import gives the module at
    its new path itself, so its names, its types and a patch made through either path are one."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """A spec for an old path, or ``None`` for every other module."""
        del path, target
        return None if _new_path(fullname) is None else ModuleSpec(fullname, cast("Loader", self))

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
