"""Names and submodules loaded on first use, for the packages that load their names lazily
(PEP 562): the root package, :mod:`fsm_agent.diagrams` and :mod:`fsm_agent.testing`."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any

__all__ = ["load", "submodule"]


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
