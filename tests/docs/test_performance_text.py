"""docs/performance.md's explanations of the figures hold for the code as it is: what the run
state inherits, and what the types floor measures besides fsm_agent's types."""

from __future__ import annotations

import inspect
import re
import sys

from docs_blocks import ROOT
from fsm_agent.run_state import RunState

sys.path.insert(0, str(ROOT / "benchmarks"))

import workload

PERFORMANCE = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")


def _paragraph(marker: str) -> str:
    """The list item or paragraph of the page that holds ``marker``."""
    (found,) = [p for p in re.split(r"\n(?=- |\n)", PERFORMANCE) if marker in p]
    return " ".join(found.split())


def test_the_run_state_is_said_to_keep_object_s_setattr() -> None:
    """RunState overrides neither ``__setattr__`` nor ``__delattr__``, and the page says so."""
    assert RunState.__setattr__ is object.__setattr__
    assert RunState.__delattr__ is object.__delattr__
    trap = _paragraph("`__setattr__ = object.__setattr__` alone")
    assert "`RunState` sets both" not in trap
    assert "`RunState` overrides neither" in trap


def test_the_types_floor_is_not_called_the_cost_of_the_types_alone() -> None:
    """The types floor builds a ModelRequest per step and runs each call through Tool.execute,
    so the page does not read its ratio as what the types alone cost a kernel."""
    loop = inspect.getsource(workload.typed_loop)
    assert "ModelRequest(" in loop and ".execute(" in loop
    item = _paragraph("222,731")
    assert "would miss 2×" not in item
    assert "`ModelRequest`" in item and "`Tool.execute`" in item
