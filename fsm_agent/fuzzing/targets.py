"""Agent factories named on the command line: ``module:attribute``, imported by name.

``fsm-agent fuzz`` and ``fsm-agent inspect`` take such a target, and the fuzzer's worker
processes import it again by name; all of them read it here.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

__all__ = ["load_factory"]


def load_factory(target: str) -> Any:
    """The object ``module:attribute`` names (the current directory is importable, as for
    ``python -m``); raises ``ValueError`` with a one-line reason."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"TARGET must look like module:factory, not {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(f"{module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    if not callable(value):
        raise ValueError(f"{target} is not callable")
    return value
