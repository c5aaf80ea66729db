"""The oracle of invariant 3: which move the table allows, decided without the kernel's code.

The kernel moves with :meth:`~fsm_agent.machine.agent_machine.AgentMachine.deciding`: a compiled
lookup of the rows and remembered moves. Checking a run's moves with that same
code would prove nothing about it. :class:`MoveOracle` decides each move again from the rows
alone: a ``transitions`` machine of its own, with one transition per row in the rows' order, each
guarded by the guard's registered formula (:data:`~fsm_agent.machine.guards.GUARD_SPECS`, or the
guard function for a guard that is not registered) and each counter update applied one at a
time. A move the kernel made that the oracle does not make is a broken invariant 3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from transitions import EventData, Machine, MachineError

from ..machine.agent_machine import Move
from ..machine.guards import GUARD_SPECS
from ..machine.table import Counters, Limits, Outcome, Row, State

__all__ = ["MEMORY", "MoveOracle", "oracle_for"]

MEMORY = 100_000
"""The most answers an oracle remembers before it starts over."""


class _Position:
    """The oracle machine's model: where it is, and the row whose guard held last."""

    state: str
    row: int | None = None


def _holds(row: Row) -> Callable[[Counters, Limits], bool]:
    """The row's guard, as its registered formula when there is one."""
    if row.guard is None:
        return lambda counters, limits: True
    spec = GUARD_SPECS.get(row.guard.__name__)
    if spec is not None and spec.function is row.guard:
        return spec.holds
    return row.guard


class MoveOracle:
    """The moves ``rows`` allow, decided by a ``transitions`` machine built from them."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = tuple(rows)
        self._position = _Position()
        self._machine = Machine(
            model=None,
            states=[state.value for state in State],
            initial=State.IDLE.value,
            auto_transitions=False,
            send_event=True,
        )
        for index, row in enumerate(self.rows):
            self._machine.add_transition(
                row.outcome.value,
                row.source.value,
                row.dest.value,
                conditions=[self._condition(index, _holds(row))],
            )
        self._machine.add_model(self._position, initial=State.IDLE.value)
        self._decided: dict[tuple[State, Outcome, Counters, Limits], Move] = {}

    def _condition(self, index: int, holds: Callable[[Counters, Limits], bool]) -> Any:
        position = self._position

        def condition(event: EventData) -> bool:
            if holds(event.kwargs["counters"], event.kwargs["limits"]):
                position.row = index
                return True
            return False

        return condition

    def move(self, state: State, outcome: Outcome, counters: Counters, limits: Limits) -> Move:
        """The move the rows make from ``state`` on ``outcome``; raises ``ValueError`` when no
        row leaves ``state`` on it. (The oracle remembers its own answers: runs repeat moves.)"""
        key = (state, outcome, counters, limits)
        move = self._decided.get(key)
        if move is None:
            if len(self._decided) >= MEMORY:
                self._decided.clear()
            move = self._decided[key] = self._trigger(state, outcome, counters, limits)
        return move

    def _trigger(self, state: State, outcome: Outcome, counters: Counters, limits: Limits) -> Move:
        position = self._position
        self._machine.set_state(state.value, model=position)
        position.row = None
        try:
            fired = self._machine.events[outcome.value].trigger(
                position, counters=counters, limits=limits
            )
        except (KeyError, MachineError):
            fired = False
        if not fired or position.row is None:
            raise ValueError(f"no row leaves {state.value!r} on {outcome.value!r}")
        row = self.rows[position.row]
        for update in row.updates:
            counters = update.apply(counters)
        return Move(state, outcome, State(position.state), position.row, counters, row.stop)


_ORACLES: dict[tuple[Row, ...], MoveOracle] = {}


def oracle_for(rows: Sequence[Row]) -> MoveOracle:
    """The oracle of ``rows``, built once per table."""
    key = tuple(rows)
    oracle = _ORACLES.get(key)
    if oracle is None:
        oracle = _ORACLES[key] = MoveOracle(key)
    return oracle
