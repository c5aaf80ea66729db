"""The checker of a phase table together with the loop: every path, every guard value.

The product explored: a node is the task's phase, the run's steps, the steps of the current
visit and every phase's visits; each model turn spends a step (the loop's bound ``max_steps``
ends every path) and then either stays in the phase, moves along a transition whose guard
holds (exit checks may pass or refuse, so both are explored), or ends the run with an answer.
Before a turn, a spent phase budget moves to its ``on_budget`` phase or stops the run. Guards
are called with every view the run can reach, so a guard that never opens inside the step
bound is found: the report lists, per goal phase, whether a run can end in it, and the
shortest path into a part of the task from which no goal can be reached, as a lasso when it
cycles (``plan -> act -> plan -> ...``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ...phases.table import Phases, PhaseView

__all__ = ["PhaseCheck", "check_phases"]

DEFAULT_MAX_PHASE_STATES = 200_000

_Node = tuple[str, int, int, tuple[int, ...]]  # phase, steps, phase steps, visits per phase


@dataclass(frozen=True, slots=True)
class PhaseCheck:
    """What :func:`check_phases` proved about a phase table under a step bound."""

    max_steps: int
    states: int
    complete: bool  # False: the search stopped at its state limit (inconclusive)
    per_phase: dict[str, int]  # the most turns one visit of each phase can take
    budgets: dict[str, int | None]
    goals_reachable: dict[str, bool]
    stuck_path: tuple[str, ...] = ()  # phases from the start into a part with no goal
    lasso: tuple[str, ...] = ()  # the cycle of phases there, when it has one
    max_turns: int = 0  # the most model turns any run makes (budgets may stop it before)

    @property
    def ok(self) -> bool:
        """Every path ends (always, under the step bound), the search was complete, every goal
        is reachable and no reachable part of the task is cut off from every goal."""
        return self.complete and all(self.goals_reachable.values()) and not self.stuck_path

    def lines(self) -> list[str]:
        """The report, one line each."""
        out = [
            f"phases: every run ends within {self.max_turns} turns (the loop's step bound is "
            f"{self.max_steps}); {self.states:,} product states explored"
            + ("" if self.complete else " (state limit reached: inconclusive)"),
        ]
        for name, turns in self.per_phase.items():
            if turns == 0:
                out.append(f"  phase {name:<12} never takes a turn")
                continue
            budget = self.budgets[name]
            why = f"its budget {budget}" if budget is not None else "the step bound"
            out.append(f"  phase {name:<12} at most {turns} turns per visit ({why})")
        for goal, reachable in self.goals_reachable.items():
            out.append(f"  goal {goal!r}: {'reachable' if reachable else 'NEVER reached'}")
        if self.stuck_path:
            out.append("  no way to a goal after: " + " -> ".join(self.stuck_path))
        if self.lasso:
            out.append("  phase cycle with no exit: " + " -> ".join(self.lasso))
        return out


def _guard_holds(guard: object, view: PhaseView) -> bool:
    if guard is None:
        return True
    try:
        return bool(guard(view))  # type: ignore[operator]
    except Exception:  # the kernel counts a raising guard as false: so does the search
        return False


@dataclass(frozen=True)
class _Probe(PhaseView):
    """A view that notes which of its fields a guard reads, in ``reads`` (shared by the views
    of one search)."""

    reads: set[str] = field(compare=False)

    def __getattribute__(self, name: str) -> object:
        if name in ("phase_steps", "visits"):
            object.__getattribute__(self, "reads").add(name)
        return object.__getattribute__(self, name)


def check_phases(
    phases: Phases, max_steps: int, *, max_states: int = DEFAULT_MAX_PHASE_STATES
) -> PhaseCheck:
    """Explore ``phases`` with the loop under a bound of ``max_steps`` model turns.

    A guard sees only what it reads: the search first leaves out the turns of a visit (past a
    budget) and the visits, and searches again keeping those the guards were seen to read, so
    a table whose guards read little is checked under a large step bound at small cost."""
    kept: set[str] = set()
    while True:
        reads: set[str] = set()
        report = _explore(phases, max_steps, max_states, frozenset(kept), reads)
        if reads <= kept:
            return report
        kept |= reads


def _explore(
    phases: Phases, max_steps: int, max_states: int, kept: frozenset[str], reads: set[str]
) -> PhaseCheck:
    search = _Search(phases, max_steps, kept, reads)
    start = search.entered_node(phases.initial, 0, tuple(0 for _ in phases.phases))
    seen = {start}
    queue = deque([start])
    complete = True
    while queue:
        for nxt in search.successors(queue.popleft()):
            if nxt not in seen:
                if len(seen) >= max_states:
                    complete = False
                    continue
                seen.add(nxt)
                queue.append(nxt)
    per_phase = {
        p.name: 0
        if search.first_entry[p.name] >= max_steps
        else min(p.max_steps or max_steps, max_steps - search.first_entry[p.name])
        for p in phases.phases
    }
    stuck_path, lasso = _cut_off(phases, search.opened) if complete else ((), ())
    return PhaseCheck(
        max_steps=max_steps,
        states=len(seen),
        complete=complete,
        per_phase=per_phase,
        budgets={p.name: p.max_steps for p in phases.phases},
        goals_reachable=search.goals_reachable,
        stuck_path=stuck_path,
        lasso=lasso,
        max_turns=search.most,
    )


class _Search:
    """One search's moves from a node, and what it learns on the way: the earliest step each
    phase is entered, the goals a run may end in, the transitions whose guard held at some
    reachable view, the most turns a run has taken."""

    def __init__(
        self, phases: Phases, max_steps: int, kept: frozenset[str], reads: set[str]
    ) -> None:
        self.phases = phases
        self.max_steps = max_steps
        self.reads = reads
        self.names = [p.name for p in phases.phases]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.track_visits = "visits" in kept
        self.track_turns = "phase_steps" in kept
        self.caps = {p.name: p.max_steps or 0 for p in phases.phases}  # a visit's turns, untracked
        self.first_entry = dict.fromkeys(self.names, max_steps)
        self.goals_reachable = dict.fromkeys(sorted(phases.goals), False)
        self.opened: set[int] = set()
        self.most = 0

    def entered_node(self, phase: str, steps: int, visits: tuple[int, ...]) -> _Node:
        """The node of entering ``phase`` after ``steps`` steps (its visit counted if tracked)."""
        if self.track_visits:
            bumped = list(visits)
            bumped[self.index[phase]] += 1
            visits = tuple(bumped)
        return (phase, steps, 0, visits)

    def successors(self, node: _Node) -> list[_Node]:
        """The nodes one move from ``node``: the budget move when the visit's budget is spent,
        else (within the step bound) a turn that stays or takes each transition it opens."""
        phase, steps, turns, visits = node
        if turns == 0:
            self.first_entry[phase] = min(self.first_entry[phase], steps)
        declared = self.phases.by_name[phase]
        if declared.max_steps is not None and turns >= declared.max_steps:
            if declared.on_budget is not None:  # the budget move, before the next turn
                return [self.entered_node(declared.on_budget, steps, visits)]
            return []  # the run stops here (phase_budget), not in a goal
        if steps >= self.max_steps:
            return []
        return self._turn(phase, steps, turns, visits)

    def _turn(self, phase: str, steps: int, turns: int, visits: tuple[int, ...]) -> list[_Node]:
        """The nodes after one more model turn in ``phase``."""
        if phase in self.goals_reachable:
            self.goals_reachable[phase] = True  # this turn may be the answer
        after = steps + 1
        self.most = max(self.most, after)
        stayed = turns + 1 if self.track_turns else min(turns + 1, self.caps[phase])
        nexts: list[_Node] = []
        if after < self.max_steps:
            nexts.append((phase, after, stayed, visits))  # tools, same phase
        seen_by_guards = _Probe(
            after,
            turns + 1,
            {n: visits[i] for i, n in enumerate(self.names) if visits[i]},
            self.reads,
        )
        for i, t in enumerate(self.phases.transitions):
            if t.source == phase and _guard_holds(t.guard, seen_by_guards):
                self.opened.add(i)
                nexts.append(self.entered_node(t.dest, after, visits))
        return nexts


def _cut_off(phases: Phases, opened: set[int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The shortest path of phases into a part of the task cut off from every goal once the
    transitions that never opened are left out, and the cycle of phases there (or ``()``)."""
    edges: dict[str, list[str]] = {p.name: [] for p in phases.phases}
    for i, t in enumerate(phases.transitions):
        if i in opened:
            edges[t.source].append(t.dest)
    for p in phases.phases:
        if p.on_budget is not None:
            edges[p.name].append(p.on_budget)
    reaches: set[str] = set(phases.goals)
    changed = True
    while changed:
        changed = False
        for source, dests in edges.items():
            if source not in reaches and any(d in reaches for d in dests):
                reaches.add(source)
                changed = True
    parent: dict[str, str | None] = {phases.initial: None}
    queue = deque([phases.initial])
    stuck: str | None = None
    while queue:
        phase = queue.popleft()
        if phase not in reaches:
            stuck = phase
            break
        for dest in edges[phase]:
            if dest not in parent:
                parent[dest] = phase
                queue.append(dest)
    if stuck is None:
        return (), ()
    path = [stuck]
    while (before := parent[path[-1]]) is not None:
        path.append(before)
    path.reverse()
    # The shortest way back to ``stuck`` through cut-off phases: the lasso's loop.
    back: dict[str, str | None] = {stuck: None}
    queue = deque([stuck])
    while queue:
        phase = queue.popleft()
        for dest in edges[phase]:
            if dest == stuck:
                loop = [phase]
                while (before := back[loop[-1]]) is not None:
                    loop.append(before)
                loop.reverse()
                return tuple(path), (*path[:-1], *loop, stuck, "...")
            if dest not in back and dest not in reaches:
                back[dest] = phase
                queue.append(dest)
    return tuple(path), ()
