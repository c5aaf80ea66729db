"""The machine: the table of :mod:`fsm_agent.machine.table` validated and compiled, and the pure
:func:`decide` that turns (state, outcome, counters, limits) into a :class:`Move`.

The definition is a ``transitions`` machine built from the rows (callables as conditions, no
callback names). Its per-trigger cost (about 19 µs, and ``AsyncMachine`` swallows
``CancelledError``: transitions issue #704) is too high for the loop, so :class:`AgentMachine`
compiles a lookup from the rows, tried in the order that machine tries them;
``tests/machine/test_machine.py`` proves the two agree on every (state, outcome, guard values)
combination. A run never triggers the ``transitions`` machine, so it is built (and
``transitions`` imported) on first use of :attr:`AgentMachine.definition`. No I/O happens in
here.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import DefinitionError, FsmAgentError
from .guards import guard_value_combinations
from .table import (
    DECLARATIONS,
    LIMITS,
    NON_TERMINAL,
    TABLE,
    TERMINAL,
    Counter,
    Counters,
    Declaration,
    Guard,
    Limits,
    Outcome,
    Row,
    State,
    StopReason,
    Update,
)

if TYPE_CHECKING:
    from transitions import EventData, Machine

__all__ = [
    "AgentMachine",
    "IllegalMoveError",
    "Move",
    "decide",
    "default_machine",
    "guard_value_combinations",
]

_INTO_WITH_STOP = frozenset({State.ABORTED, State.SUSPENDED})

MEMO_SIZE = 1024
"""The most moves :meth:`AgentMachine.deciding` remembers per set of limits and (state,
outcome): a run of up to that many steps is remembered whole."""


MEMO_LIMITS = 64
"""The most sets of limits whose moves :meth:`AgentMachine.deciding` remembers at once (a
process that builds agents for ever new policies keeps a bounded memory)."""


class _SkipBindingFilter(logging.Filter):
    """Drops the warnings ``transitions`` logs for every trigger it does not bind to the model
    (the machine is built with ``model_override=True`` on purpose: the model stays bare)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Skip binding of" not in str(record.msg)


@contextlib.contextmanager
def _quiet_bindings() -> Iterator[None]:
    logger = logging.getLogger("transitions.core")
    quiet = _SkipBindingFilter()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


class IllegalMoveError(FsmAgentError):
    """An outcome was reported in a state that has no row for it (a bug in a handler)."""


class Move(NamedTuple):
    """One transition taken: which row fired and the counters after it. (A named tuple, like
    :class:`~fsm_agent.machine.table.Counters`: one is built per move on the hot path.)"""

    source: State
    outcome: Outcome
    dest: State
    row: int
    counters: Counters
    stop: StopReason | None = None


# (row index, guard, destination, stop reason, counter updates)
_Compiled = tuple[int, Guard | None, State, StopReason | None, tuple[Update, ...]]


def _compile(index: int, row: Row) -> _Compiled:
    return index, row.guard, row.dest, row.stop, row.updates


_Moves = dict[State, dict[Outcome, dict[Counters, Move]]]


class _Remembered(NamedTuple):
    """What :meth:`AgentMachine.deciding` keeps per set of limits: the moves it remembered and
    the function that looks them up (one for every agent under those limits)."""

    moves: _Moves
    decide: Callable[[State, Outcome, Counters], Move]


class _Probe:
    """The model object of the ``transitions`` machine (it holds the current state)."""

    state: str
    fired: int | None = None


class AgentMachine:
    """A validated table plus its ``transitions`` definition and a compiled lookup.

    Building one checks the table and raises one :class:`DefinitionError` listing every fault:
    an unknown state, an unreachable state, a non-terminal state without exits, a terminal state
    with exits, a shadowed row, an outcome whose rows can all be refused, a move into
    ``aborted``/``suspended`` without a stop reason; and every disagreement between the rows and
    the states' :class:`~fsm_agent.machine.table.Declaration`: a declared outcome with no row
    (a run would crash on it) or a row for an outcome its state never reports.
    """

    def __init__(
        self,
        rows: Iterable[Row] = TABLE,
        declarations: Mapping[State, Declaration] = DECLARATIONS,
    ) -> None:
        self.rows: tuple[Row, ...] = tuple(rows)
        self.declarations: Mapping[State, Declaration] = dict(declarations)
        faults = validate(self.rows) + validate_declarations(self.rows, self.declarations)
        if faults:
            raise DefinitionError(faults)
        grouped: dict[tuple[State, Outcome], list[_Compiled]] = {}
        for index, row in enumerate(self.rows):
            grouped.setdefault((row.source, row.outcome), []).append(_compile(index, row))
        self._index = {key: tuple(rows) for key, rows in grouped.items()}
        self._probe = _Probe()
        self._remembered: dict[Limits, _Remembered] = {}  # the most recently used last
        self.outcomes_by_state: dict[State, frozenset[Outcome]] = {
            state: frozenset(o for (s, o) in self._index if s is state) for state in State
        }

    def decide(self, state: State, outcome: Outcome, counters: Counters, limits: Limits) -> Move:
        """The move the table makes for this outcome: pure, no I/O."""
        rows = self._index.get((state, outcome))
        if rows is None:
            raise IllegalMoveError(f"no row leaves {state.value!r} on {outcome.value!r}")
        for index, guard, dest, stop, updates in rows:
            if guard is None or guard(counters, limits):
                for update in updates:
                    counters = update.apply(counters)
                return Move(state, outcome, dest, index, counters, stop)
        raise IllegalMoveError(  # unreachable for a validated table: each group ends unguarded
            f"no guard held for {state.value!r} on {outcome.value!r}"
        )

    def deciding(self, limits: Limits) -> Callable[[State, Outcome, Counters], Move]:
        """:meth:`decide` for these limits, remembering its moves: runs under the same limits
        take the same moves at the same counters, so most moves of a run are looked up instead
        of decided again, and the traces of all those runs share them (a ``Move`` is
        immutable). The memory is shared by every agent whose limits are equal, and bounded:
        each (state, outcome) starts over once it holds ``MEMO_SIZE`` moves, and the machine
        keeps the moves of the ``MEMO_LIMITS`` sets of limits asked for most recently. Agents
        under equal limits get the same function, so building one adds no object per agent."""
        remembered = self._remembered
        entry = remembered.pop(limits, None)
        if entry is None:
            while len(remembered) >= MEMO_LIMITS:  # forget the limits used longest ago
                del remembered[next(iter(remembered))]
            moves: _Moves = {state: {} for state in State}  # a dict per (state, outcome)
            for state, outcome in self._index:
                moves[state][outcome] = {}
            entry = _Remembered(moves, self._remembering(limits, moves))
        remembered[limits] = entry
        return entry.decide

    def _remembering(
        self, limits: Limits, moves: _Moves
    ) -> Callable[[State, Outcome, Counters], Move]:
        """:meth:`decide` under ``limits``, looking moves up in ``moves`` first."""
        decide = self.decide

        def decide_remembered(state: State, outcome: Outcome, counters: Counters) -> Move:
            by_counters = moves[state].get(outcome)
            if by_counters is None:  # no row leaves state on outcome: decide() says so
                return decide(state, outcome, counters, limits)
            move = by_counters.get(counters)
            if move is None:
                if len(by_counters) >= MEMO_SIZE:
                    by_counters.clear()
                move = by_counters[counters] = decide(state, outcome, counters, limits)
            return move

        return decide_remembered

    @cached_property
    def limit_states(self) -> frozenset[State]:
        """The states a reached limit interrupts (a deadline, a usage limit or a stop
        condition): those declaring every one of them."""
        return frozenset(
            s for s, declared in self.declarations.items() if declared.interrupts >= LIMITS
        )

    @cached_property
    def switch_rows(self) -> frozenset[int]:
        """The rows that move a model call down a fallback chain (with no backoff)."""
        return frozenset(
            i
            for i, row in enumerate(self.rows)
            if any(u.counter is Counter.MODEL_SWITCHES and not u.reset for u in row.updates)
        )

    @cached_property
    def definition(self) -> Machine:
        """The ``transitions`` machine of the rows, built on first use."""
        with _quiet_bindings():
            machine = _build_transitions_machine(self.rows)
            machine.add_model(self._probe, initial=State.IDLE.value)
        return machine

    def decide_with_transitions(
        self, state: State, outcome: Outcome, counters: Counters, limits: Limits
    ) -> Move:
        """The same decision taken by triggering the ``transitions`` machine (slow; for tests
        and for anyone who wants to check the compiled lookup against the definition)."""
        probe = self._probe
        self.definition.set_state(state.value, model=probe)
        probe.fired = None
        event = self.definition.events[outcome.value]
        if not event.trigger(probe, counters=counters, limits=limits):
            raise IllegalMoveError(f"no guard held for {state.value!r} on {outcome.value!r}")
        assert probe.fired is not None
        row = self.rows[probe.fired]
        for update in row.updates:
            counters = update.apply(counters)
        return Move(state, outcome, State(probe.state), probe.fired, counters, row.stop)


def _build_transitions_machine(rows: tuple[Row, ...]) -> Machine:
    """The ``transitions`` machine of the rows: each transition records its row's index."""
    from transitions import Machine

    machine = Machine(
        model=None,
        states=[s.value for s in State],
        initial=State.IDLE.value,
        auto_transitions=False,
        send_event=True,
        ignore_invalid_triggers=False,
        model_override=True,
    )
    for index, row in enumerate(rows):
        machine.add_transition(
            trigger=row.outcome.value,
            source=row.source.value,
            dest=row.dest.value,
            conditions=[_condition(row)] if row.guard is not None else [],
            after=[_recorder(index)],
        )
    return machine


def _condition(row: Row) -> Any:
    guard = row.guard
    assert guard is not None

    def condition(event: EventData) -> bool:
        return guard(event.kwargs["counters"], event.kwargs["limits"])

    return condition


def _recorder(index: int) -> Any:
    def record(event: EventData) -> None:
        probe = event.model
        assert isinstance(probe, _Probe)
        probe.fired = index

    return record


def validate(rows: tuple[Row, ...]) -> list[str]:
    """Every fault of a table, as sentences (empty when the table is sound)."""
    faults: list[str] = []
    for i, row in enumerate(rows):
        for name in ("source", "dest"):
            if not isinstance(getattr(row, name), State):
                faults.append(f"row {i}: unknown {name} state {getattr(row, name)!r}")
        if not isinstance(row.outcome, Outcome):
            faults.append(f"row {i}: unknown outcome {row.outcome!r}")
    if faults:  # the checks below need real states and outcomes
        return faults
    for i, row in enumerate(rows):
        if row.source in TERMINAL:
            faults.append(f"row {i}: terminal state {row.source.value!r} has an exit")
        if row.dest in _INTO_WITH_STOP and row.stop is None:
            faults.append(f"row {i}: a move into {row.dest.value!r} must set a stop reason")
    groups: dict[tuple[State, Outcome], list[tuple[int, Row]]] = {}
    for i, row in enumerate(rows):
        groups.setdefault((row.source, row.outcome), []).append((i, row))
    for (source, outcome), group in groups.items():
        seen_guards: set[str] = set()
        for position, (i, row) in enumerate(group):
            earlier = group[:position]
            if any(r.guard is None for _, r in earlier):
                faults.append(
                    f"row {i} ({source.value} --{outcome.value}) is shadowed by an earlier "
                    "unguarded row"
                )
            elif row.guard_name is not None and row.guard_name in seen_guards:
                faults.append(
                    f"row {i} ({source.value} --{outcome.value}) repeats guard "
                    f"{row.guard_name!r} and can never fire"
                )
            if row.guard_name is not None:
                seen_guards.add(row.guard_name)
        if group[-1][1].guard is not None:
            faults.append(
                f"{source.value} --{outcome.value}: every row is guarded, so the outcome can be "
                "refused; end the group with an unguarded row"
            )
    for state in NON_TERMINAL:
        if not any(row.source is state for row in rows):
            faults.append(f"non-terminal state {state.value!r} has no exit")
    reachable = _reachable(rows)
    for state in State:
        if state not in reachable:
            faults.append(f"state {state.value!r} is unreachable from 'idle'")
    return faults


def validate_declarations(
    rows: tuple[Row, ...], declarations: Mapping[State, Declaration]
) -> list[str]:
    """Every disagreement between the rows and the states' declarations, as sentences."""
    faults = [f"state {s.value!r} has no declaration" for s in State if s not in declarations]
    with_rows = {
        (row.source, row.outcome)
        for row in rows
        if isinstance(row.source, State) and isinstance(row.outcome, Outcome)
    }
    for state, declaration in declarations.items():
        for outcome in sorted(declaration.all, key=list(Outcome).index):
            if (state, outcome) not in with_rows:
                faults.append(
                    f"{state.value!r} declares {outcome.value!r} but no row leaves it on it"
                )
    for state, outcome in sorted(with_rows, key=lambda p: (list(State).index(p[0]), p[1])):
        known = declarations.get(state)
        if known is not None and outcome not in known.all:
            faults.append(
                f"a row leaves {state.value!r} on {outcome.value!r}, which it does not declare"
            )
    return faults


def _reachable(rows: tuple[Row, ...]) -> set[State]:
    seen = {State.IDLE}
    queue = deque([State.IDLE])
    while queue:
        state = queue.popleft()
        for row in rows:
            if row.source is state and row.dest not in seen:
                seen.add(row.dest)
                queue.append(row.dest)
    return seen


default_machine = AgentMachine()
"""The machine of the built-in table, built and validated once at import."""

decide = default_machine.decide
