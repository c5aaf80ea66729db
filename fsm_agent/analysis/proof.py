"""The parametric termination proof: one argument over the table that holds for every policy.

The exhaustive checker proves one policy at a time, at a cost that grows with its limits. This
module proves termination from the table itself, the states' declarations and the guard registry,
without any limit's value:

1. The graph is the rows whose outcome their state declares, without the moves out of
   ``suspended`` (a resume starts a new invocation of the run) and out of the terminal states.
2. Every strongly connected component with a cycle needs a *measure*: a counter that some row of
   the component increments, that no row of the component resets, and that bounds every cycle
   through an increment: each such cycle takes a row whose condition implies
   ``counter + k < limit`` (its own guard holding, or an earlier row's guard failing, as the
   registry's comparisons say). The counter then advances at most about ``limit`` times inside the
   component. The rows that increment it are removed and the rest of the component is proved the
   same way: a lexicographic measure (``steps`` first, then ``retries`` between two steps).
3. A component that no counter ranks is reported with its rows and, per counter, why it fails
   (:class:`Stuck`); :func:`counterexample` asks the explorer for the shortest concrete run.

The proof names the limits it relies on; a policy that sets one of them to ``None`` is not
covered by it (with ``max_steps=None`` only the driver's usage limits can end a run, which the
explorer checks). A guard the registry does not describe is read as implying nothing, which is
sound but may leave a component unranked: the proof then says which rows it could not read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import FsmAgentError
from ..machine.agent_machine import AgentMachine, default_machine
from ..machine.guards import GUARD_SPECS, Bound, Compare, Counter, Limits, limit_of
from ..machine.table import TERMINAL, Row, State
from ..policy import Policy, limits_of
from .bounds import Bounds, bounds
from .checker import FailureKind, PathMove, check

__all__ = [
    "BoundsAssertionError",
    "Measure",
    "Proof",
    "Stuck",
    "assert_bounds",
    "counterexample",
    "prove",
]


@dataclass(frozen=True, slots=True)
class Measure:
    """One level of the lexicographic measure: ``counter`` ranks the cycles of ``states``."""

    counter: Counter
    limit: Bound
    states: tuple[State, ...]
    increments: tuple[int, ...]  # the rows that advance it
    bounded_by: tuple[int, ...]  # the rows whose condition bounds it by its limit


@dataclass(frozen=True, slots=True)
class Stuck:
    """A component no counter ranks: a possible run that never ends."""

    states: tuple[State, ...]
    rows: tuple[int, ...]  # the rows of the component
    reasons: tuple[str, ...]  # per counter, why it is no measure here


@dataclass(frozen=True, slots=True)
class Proof:
    """The parametric verdict over a table: the measures found and the components left."""

    measures: tuple[Measure, ...]
    stuck: tuple[Stuck, ...]
    unreadable: tuple[int, ...]  # rows whose guard (or an earlier row's) the registry lacks
    rows: tuple[Row, ...]
    elapsed_s: float

    @property
    def terminates(self) -> bool:
        """Every cycle of the table is ranked: each invocation of a run ends, for every policy
        whose limits in :attr:`relies_on` are set."""
        return not self.stuck

    @property
    def relies_on(self) -> tuple[Bound, ...]:
        """The limits the measures compare with, in :class:`Bound` order."""
        used = {m.limit for m in self.measures}
        return tuple(b for b in Bound if b in used)

    def unbounded_by(self, limits: Limits) -> tuple[Bound, ...]:
        """The limits the proof relies on that ``limits`` leaves unset (``None``)."""
        return tuple(b for b in self.relies_on if getattr(limits, b.value) is None)

    def covers(self, limits: Limits) -> bool:
        """Whether the proof holds under ``limits``."""
        return self.terminates and not self.unbounded_by(limits)

    def lines(self) -> list[str]:
        """The proof as text: one line per measure, then each unranked component."""
        out = []
        for level, m in enumerate(self.measures, 1):
            states = " ↔ ".join(s.value for s in m.states)
            out.append(
                f"{level}. {m.counter.value} < {m.limit.value} ranks [{states}]: "
                f"advanced by rows {_rows(m.increments)}, bounded on rows {_rows(m.bounded_by)}"
            )
        for stuck in self.stuck:
            out.append(
                "UNRANKED cycle through "
                + " ↔ ".join(s.value for s in stuck.states)
                + f" (rows {_rows(stuck.rows)}):"
            )
            out.extend(f"    {reason}" for reason in stuck.reasons)
            for i in stuck.rows:
                row = self.rows[i]
                out.append(f"    row {i}: {_describe(row)}")
        if self.unreadable:
            out.append(
                f"rows {_rows(self.unreadable)} use guards the registry does not describe; "
                "the proof reads them as bounding nothing"
            )
        return out


class BoundsAssertionError(AssertionError, FsmAgentError):
    """A policy's worst case differs from what a test expects."""


def _rows(indices: Iterable[int]) -> str:
    return ", ".join(map(str, indices)) or "none"


def _describe(row: Row) -> str:
    guard = f" if {row.guard_name}" if row.guard_name else ""
    updates = "; ".join(map(str, row.updates))
    return f"{row.source.value} --{row.outcome.value}--> {row.dest.value}{guard}" + (
        f" / {updates}" if updates else ""
    )


def _conditions(rows: Sequence[Row]) -> tuple[list[tuple[Compare, ...]], list[int]]:
    """What each row's firing implies (its guard held, every earlier row of its group failed),
    as ``<`` comparisons; and the rows some of whose guards the registry lacks."""
    implied: list[tuple[Compare, ...]] = []
    unreadable: list[int] = []
    earlier: dict[tuple[State, object], list[Row]] = {}
    for i, row in enumerate(rows):
        before = earlier.setdefault((row.source, row.outcome), [])
        found: list[Compare] = []
        readable = True
        for other, holds in [*((r, False) for r in before), (row, True)]:
            if other.guard is None:
                continue
            spec = GUARD_SPECS.get(other.guard.__name__)
            if spec is None or spec.function is not other.guard:
                readable = False
                continue
            found.extend(spec.implied(holds))
        implied.append(tuple(found))
        if not readable:
            unreadable.append(i)
        before.append(row)
    return implied, unreadable


def _components(edges: Sequence[int], rows: Sequence[Row]) -> list[list[State]]:
    """The strongly connected components (with a cycle) of the states under ``edges``."""
    succ: dict[State, set[State]] = {s: set() for s in State}
    for e in edges:
        succ[rows[e].source].add(rows[e].dest)
    index: dict[State, int] = {}
    low: dict[State, int] = {}
    stack: list[State] = []
    found: list[list[State]] = []

    def visit(state: State) -> None:  # the graph has nine nodes: recursion is fine
        index[state] = low[state] = len(index)
        stack.append(state)
        for nxt in succ[state]:
            if nxt not in index:
                visit(nxt)
                low[state] = min(low[state], low[nxt])
            elif nxt in stack:
                low[state] = min(low[state], index[nxt])
        if low[state] == index[state]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member is state:
                    break
            if len(members) > 1 or state in succ[state]:
                found.append(sorted(members, key=list(State).index))

    for state in State:
        if state not in index:
            visit(state)
    return found


def _on_cycle(edge: int, edges: Sequence[int], rows: Sequence[Row]) -> bool:
    """Whether ``edge`` (one of ``edges``) lies on a cycle of ``edges``."""
    row = rows[edge]
    for component in _components(edges, rows):
        if row.source in component and row.dest in component:
            return True
    return False


def prove(machine: AgentMachine = default_machine) -> Proof:
    """The parametric termination proof of ``machine``'s table (milliseconds, no limits)."""
    started = time.perf_counter()
    rows = machine.rows
    implied, unreadable = _conditions(rows)
    edges = [
        i
        for i, row in enumerate(rows)
        if row.source not in TERMINAL
        and row.source is not State.SUSPENDED
        and row.outcome in machine.declarations[row.source].all
    ]
    measures: list[Measure] = []
    stuck: list[Stuck] = []
    pending = [edges]
    while pending:
        current = pending.pop()
        for component in _components(current, rows):
            inner = [
                e for e in current if rows[e].source in component and rows[e].dest in component
            ]
            measure, reasons = _measure(inner, component, rows, implied)
            if measure is None:
                stuck.append(Stuck(tuple(component), tuple(inner), tuple(reasons)))
                continue
            measures.append(measure)
            pending.append([e for e in inner if e not in measure.increments])
    return Proof(
        tuple(measures),
        tuple(stuck),
        tuple(unreadable),
        rows,
        time.perf_counter() - started,
    )


def _measure(
    inner: list[int],
    component: list[State],
    rows: Sequence[Row],
    implied: Sequence[tuple[Compare, ...]],
) -> tuple[Measure | None, list[str]]:
    """The first counter that ranks the cycles of ``inner``, or why none does."""
    reasons: list[str] = []
    for counter in Counter:
        resets = [
            e for e in inner if any(u.counter is counter and u.reset for u in rows[e].updates)
        ]
        increments = [
            e for e in inner if any(u.counter is counter and not u.reset for u in rows[e].updates)
        ]
        if not increments:
            continue
        limit = limit_of(counter)
        if resets:
            reasons.append(f"{counter.value}: reset on rows {_rows(resets)}")
            continue
        if limit is None:
            reasons.append(f"{counter.value}: no guard compares it with a limit")
            continue
        bounding = [e for e in inner if any(c.counter is counter for c in implied[e])]
        rest = [e for e in inner if e not in bounding]
        free = [e for e in increments if e in rest and _on_cycle(e, rest, rows)]
        if free:
            reasons.append(
                f"{counter.value}: rows {_rows(free)} advance it on a cycle with no row whose "
                f"guard bounds it by {limit.value} (add the guard there)"
            )
            continue
        return Measure(counter, limit, tuple(component), tuple(increments), tuple(bounding)), []
    if not reasons:
        reasons.append("no row of the cycle advances any counter")
    return None, reasons


def counterexample(
    proof: Proof, machine: AgentMachine, policy: Policy | None = None, max_states: int = 200_000
) -> tuple[PathMove, ...]:
    """The explorer's shortest run that never ends for ``machine`` under ``policy`` (a small
    one by default), without and then with verification; ``()`` when the explorer finds none."""
    if proof.terminates:
        return ()
    for verification in (False, True):
        report = check(
            policy or Policy(max_steps=3),
            machine=machine,
            verification=verification,
            max_states=max_states,
        )
        for failure in report.failures:
            if failure.kind is FailureKind.NON_TERMINATION:
                return failure.path
    return ()


def assert_bounds(
    policy: Policy,
    *,
    verification: bool = False,
    models: int = 1,
    max_model_calls: int | None = None,
    max_tool_turns: int | None = None,
) -> Bounds:
    """Assert, in one line of a test, that the table terminates under ``policy`` and that its
    worst case is at most the given numbers; returns the bounds. Raises
    :class:`BoundsAssertionError` with the derivation when it is not."""
    proof = prove()
    limits = limits_of(policy, verification=verification, models=models)
    if not proof.covers(limits):
        unset = ", ".join(b.value for b in proof.unbounded_by(limits)) or "the table"
        raise BoundsAssertionError(f"termination is not proven for this policy ({unset})")
    computed = bounds(policy, verification=verification, models=models)
    for name, expected, actual, why in (
        ("model calls", max_model_calls, computed.max_model_calls, computed.model_calls_derivation),
        ("tool turns", max_tool_turns, computed.max_tool_turns, computed.tool_turns_derivation),
    ):
        if expected is not None and (actual is None or actual > expected):
            raise BoundsAssertionError(
                f"a run may make {actual if actual is not None else 'unboundedly many'} {name}, "
                f"more than {expected}: {why}"
            )
    return computed
