"""The user's task machine above the loop: phases, their tools, and the moves between them.

Read in order: :mod:`~fsm_agent.phases.table` declares and validates a phase table;
:mod:`~fsm_agent.phases.runtime` fits it to an agent and makes every move. The checker of the
phase machine with the loop is :mod:`fsm_agent.analysis.checker.phases`; its diagrams are in
:mod:`fsm_agent.diagrams.phases`.
"""

from __future__ import annotations

from .runtime import CompiledPhases, move_tool_definition
from .table import (
    MOVE_TOOL,
    MovePhase,
    Phase,
    PhaseChange,
    PhaseDefinitionError,
    PhaseGuard,
    Phases,
    PhaseView,
    Transition,
)

__all__ = [
    "MOVE_TOOL",
    "CompiledPhases",
    "MovePhase",
    "Phase",
    "PhaseChange",
    "PhaseDefinitionError",
    "PhaseGuard",
    "PhaseView",
    "Phases",
    "Transition",
    "move_tool_definition",
]
