"""Submodules loaded on first use, for the packages that load their names lazily (PEP 562):
the root package and :mod:`fsm_agent.testing`."""

from __future__ import annotations

from importlib import import_module

__all__ = ["submodule"]


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
