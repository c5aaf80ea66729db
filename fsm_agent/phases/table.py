"""The user's task machine: phases, the moves between them, and its validation.

A :class:`Phases` table is data, like the loop's table: each :class:`Phase` names the tools the
model may use in it, the instructions added to the system prompt, an optional step budget (and
where the budget sends the run), and an optional exit check; each :class:`Transition` says
which phase may follow which, under an optional guard over a :class:`PhaseView`. Building a
table checks it and raises one :class:`PhaseDefinitionError` listing every fault: unknown
phases, unreachable phases, phases from which no goal can be reached, no goal.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING

from ..errors import PhaseDefinitionError
from ..run.state import PhaseChange
from ..values.define import record

if TYPE_CHECKING:
    from ..run.state import RunState

__all__ = [
    "MOVE_TOOL",
    "MovePhase",
    "Phase",
    "PhaseChange",
    "PhaseDefinitionError",
    "PhaseGuard",
    "PhaseView",
    "Phases",
    "Transition",
]

MOVE_TOOL = "move_to_phase"
"""The name of the generated tool the model calls to move to the next phase."""


@record(kw_only=False)
class PhaseView:
    """What a transition guard sees: the run's steps (model turns), the turns spent in the
    current phase since it was entered, and how many times each phase was entered."""

    steps: int
    phase_steps: int
    visits: Mapping[str, int]

    def visited(self, phase: str) -> int:
        """How many times ``phase`` was entered (the initial phase counts once at the start)."""
        return self.visits.get(phase, 0)


PhaseGuard = Callable[[PhaseView], bool]
"""A transition's guard: a pure function of the :class:`PhaseView`; the move is legal when
it returns true. A guard that raises counts as false (a guard fails closed)."""


@record(kw_only=False)
class Phase:
    """One phase of the task.

    ``tools`` are the names of the agent's tools the model may call in it (the generated
    ``move_to_phase`` tool is added when the phase has a next phase); ``instructions`` are added
    to the system prompt while the run is in it. ``max_steps`` bounds the model turns of one
    visit: when spent, the run moves to ``on_budget`` before its next turn, or, without
    ``on_budget``, stops with stop reason ``stop_condition`` and the detail ``phase_budget``.
    ``exit_check(run_state)`` is asked before any move out of the phase but a budget move: a
    false value (or a string, the reason) refuses the move; a check that raises refuses it too.
    """

    name: str
    tools: tuple[str, ...] = ()
    instructions: str = ""
    max_steps: int | None = None
    on_budget: str | None = None
    exit_check: Callable[[RunState], bool | str] | None = field(default=None, compare=False)


@record(kw_only=False)
class Transition:
    """A legal move from ``source`` to ``dest``; with a ``guard``, legal only while the guard
    holds. ``label`` names the guard in diagrams and in refusals."""

    source: str
    dest: str
    guard: PhaseGuard | None = field(default=None, compare=False)
    label: str = ""


@record(kw_only=False)
class MovePhase:
    """Return this from a tool to move the run to ``phase`` (a move made by code): ``content``
    is the call's result. An illegal move is refused and the result says why."""

    phase: str
    content: str = ""


def _reachable(start: Iterable[str], edges: Mapping[str, set[str]]) -> set[str]:
    seen = set(start)
    queue = deque(seen)
    while queue:
        for nxt in edges.get(queue.popleft(), ()):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


class Phases:
    """The task machine: ``phases``, the ``transitions`` between them, the ``initial`` phase
    (default: the first) and the ``goals`` (phases a task may end in). Validated when built."""

    def __init__(
        self,
        phases: Iterable[Phase],
        transitions: Iterable[Transition | tuple[str, str]],
        *,
        goals: Iterable[str],
        initial: str | None = None,
    ) -> None:
        self.phases: tuple[Phase, ...] = tuple(phases)
        self.transitions: tuple[Transition, ...] = tuple(
            t if isinstance(t, Transition) else Transition(*t) for t in transitions
        )
        self.goals: frozenset[str] = frozenset(goals)
        self.initial = (
            initial if initial is not None else (self.phases[0].name if self.phases else "")
        )
        self.by_name: dict[str, Phase] = {p.name: p for p in self.phases}
        self.next_phases: dict[str, tuple[str, ...]] = {}
        for t in self.transitions:
            targets = self.next_phases.setdefault(t.source, ())
            if t.dest not in targets:
                self.next_phases[t.source] = (*targets, t.dest)
        faults = self._faults()
        if faults:
            raise PhaseDefinitionError(
                "the phase table has " + str(len(faults)) + " fault(s):\n- " + "\n- ".join(faults)
            )

    def __repr__(self) -> str:
        return f"Phases({', '.join(self.by_name)}; initial={self.initial!r})"

    def edges(self) -> dict[str, set[str]]:
        """Every phase's possible next phases, guards ignored (budget moves included)."""
        edges: dict[str, set[str]] = {p.name: set() for p in self.phases}
        for t in self.transitions:
            edges.setdefault(t.source, set()).add(t.dest)
        for p in self.phases:
            if p.on_budget is not None:
                edges[p.name].add(p.on_budget)
        return edges

    def transitions_from(self, phase: str) -> tuple[Transition, ...]:
        """The transitions out of ``phase``, in declaration order."""
        return tuple(t for t in self.transitions if t.source == phase)

    def _faults(self) -> list[str]:
        faults: list[str] = []
        names = [p.name for p in self.phases]
        known = set(names)
        if not self.phases:
            return ["no phases: declare at least one Phase"]
        for name in sorted({n for n in names if names.count(n) > 1}):
            faults.append(f"phase {name!r} is declared more than once")
        for p in self.phases:
            if not p.name or not p.name.replace("_", "").replace("-", "").isalnum():
                faults.append(f"phase name {p.name!r} must use letters, digits, '_' and '-'")
            if p.max_steps is not None and p.max_steps < 1:
                faults.append(f"phase {p.name!r}: max_steps must be at least 1")
            if p.on_budget is not None:
                if p.max_steps is None:
                    faults.append(f"phase {p.name!r}: on_budget needs a max_steps to spend")
                if p.on_budget not in known:
                    faults.append(
                        f"phase {p.name!r}: on_budget names unknown phase {p.on_budget!r}"
                    )
            if MOVE_TOOL in p.tools:
                faults.append(
                    f"phase {p.name!r} lists {MOVE_TOOL!r}: it is generated, leave it out"
                )
        if self.initial not in known:
            faults.append(f"initial phase {self.initial!r} is not declared")
        if not self.goals:
            faults.append("no goal phase: pass goals=[...] naming the phases a task may end in")
        for goal in sorted(self.goals - known):
            faults.append(f"goal phase {goal!r} is not declared")
        for t in self.transitions:
            for end in (t.source, t.dest):
                if end not in known:
                    faults.append(
                        f"transition {t.source} -> {t.dest} names unknown phase {end!r} "
                        f"(declared: {', '.join(names)})"
                    )
        if faults:
            return faults
        edges = self.edges()
        reachable = _reachable([self.initial], edges)
        for name in names:
            if name not in reachable:
                faults.append(
                    f"phase {name!r} is unreachable from {self.initial!r}: add a transition "
                    "into it or remove it"
                )
        backward: dict[str, set[str]] = {}
        for source, dests in edges.items():
            for dest in dests:
                backward.setdefault(dest, set()).add(source)
        reaches_goal = _reachable(self.goals, backward)
        for name in names:
            if name in reachable and name not in reaches_goal:
                faults.append(
                    f"phase {name!r} can never reach a goal ({', '.join(sorted(self.goals))}): "
                    "add a transition out of it toward one"
                )
        return faults

    def spent(self, rs: RunState) -> tuple[Phase, str | None] | None:
        """When the run's current phase has spent its step budget: the phase and its
        ``on_budget`` phase (``None``: the run stops)."""
        phase = self.by_name.get(rs.phase or self.initial)
        if phase is None:
            return None
        if phase.max_steps is None or rs.counters.steps - rs.phase_since < phase.max_steps:
            return None
        return phase, phase.on_budget

    def check_tools(self, available: Iterable[str]) -> None:
        """Raise :class:`PhaseDefinitionError` naming every phase tool not in ``available``."""
        have = set(available)
        faults = [
            f"phase {p.name!r} allows unknown tool {name!r} (the agent's tools: "
            f"{', '.join(sorted(have)) or 'none'})"
            for p in self.phases
            for name in p.tools
            if name not in have
        ]
        if MOVE_TOOL in have:
            faults.append(f"the agent has a tool named {MOVE_TOOL!r}, which phases generate")
        if faults:
            raise PhaseDefinitionError(
                "the phases do not fit the agent's tools:\n- " + "\n- ".join(faults)
            )
