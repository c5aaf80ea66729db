"""Invariant 3's oracle: a ``transitions`` machine built from the rows decides every move again,
so a move the kernel's compiled ``decide()`` got wrong is caught."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from fsm_agent import Agent
from fsm_agent.events import StateChangedEvent
from fsm_agent.fuzzing import (
    DEFAULT_TOOLS,
    FuzzCase,
    InvariantViolation,
    check_case,
    check_invariants,
)
from fsm_agent.fuzzing.oracle import MoveOracle, oracle_for
from fsm_agent.machine.agent_machine import AgentMachine, Move, decide
from fsm_agent.machine.guards import guard_value_combinations
from fsm_agent.machine.table import TABLE, Counters, Limits, Outcome, Row, State, StopReason
from fsm_agent.models import Model
from fsm_agent.policy import Policy, RetryPolicy
from fsm_agent.testing import fail, finish, text, tool_calls

CASE = FuzzCase(
    script=(fail(), tool_calls(("add", {"a": 1, "b": 2})), text("3")),
    policy=Policy(max_steps=4, retry=RetryPolicy(max_retries=2)),
)


def _plant(record_index: int, **changes: object) -> InvariantViolation:
    """Run ``CASE``, rewrite move ``record_index`` (in the trace and its event) with ``changes``,
    and return what the invariant check raises."""
    record = check_case(CASE)
    trace = list(record.result.trace)
    trace[record_index] = trace[record_index]._replace(**changes)  # type: ignore[arg-type]
    record.result = dataclasses.replace(record.result, trace=tuple(trace))
    moves = [i for i, e in enumerate(record.events) if isinstance(e, StateChangedEvent)]
    event = record.events[moves[record_index]]
    assert isinstance(event, StateChangedEvent)
    record.events[moves[record_index]] = event.model_copy(
        update={k: v for k, v in changes.items() if k in ("row", "dest")}
    )
    with pytest.raises(InvariantViolation) as caught:
        check_invariants(record)
    return caught.value


def test_the_oracle_accepts_the_moves_of_a_real_run() -> None:
    record = check_case(CASE)
    assert [m.outcome for m in record.result.trace][:4] == [
        Outcome.START,
        Outcome.PROCEED,
        Outcome.RETRYABLE_ERROR,
        Outcome.TOOL_CALLS,
    ]


def test_a_planted_wrong_row_is_rejected() -> None:
    """The retry (row 16: back to calling) planted as the give-up row (17: aborted)."""
    violation = _plant(2, row=17, dest=State.ABORTED)
    assert violation.number == 3
    assert "the table says row 16" in str(violation)


def test_a_planted_wrong_counter_update_is_rejected() -> None:
    """The right row, but a retry that forgot to count itself."""
    violation = _plant(2, counters=Counters())
    assert violation.number == 3


def test_a_planted_move_with_no_row_is_rejected() -> None:
    oracle = oracle_for(TABLE)
    with pytest.raises(ValueError, match="no row leaves 'idle' on 'stop'"):
        oracle.move(State.IDLE, Outcome.STOP, Counters(), Limits())


def test_the_oracle_agrees_with_decide_on_every_guard_value() -> None:
    """The oracle is a second implementation of the same table: on the counters that drive
    every guard both ways, it makes the kernel's move."""
    oracle = MoveOracle(TABLE)
    limits = Limits(max_steps=3, max_total_errors=2, max_repeated_tool_calls=3, verification=True)
    pairs = sorted({(r.source, r.outcome) for r in TABLE if r.guard is not None})
    for counters in itertools.islice(guard_value_combinations(limits), 0, None, 7):
        for state, outcome in pairs:
            assert oracle.move(state, outcome, counters, limits) == decide(
                state, outcome, counters, limits
            )


class _ForgetfulMachine(AgentMachine):
    """A machine whose compiled lookup drifted from its rows: a retry does not count itself."""

    def decide(self, state: State, outcome: Outcome, counters: Counters, limits: Limits) -> Move:
        move = super().decide(state, outcome, counters, limits)
        if outcome is Outcome.RETRYABLE_ERROR and move.dest is State.CALLING:
            return move._replace(counters=counters)
        return move


def _forgetful_agent(model: Model) -> Agent[None]:
    return Agent(model, policy=CASE.policy, tools=DEFAULT_TOOLS[:1], machine=_ForgetfulMachine())


def test_a_kernel_whose_decide_drifted_from_the_rows_is_caught() -> None:
    """The kernel moves with the drifted ``decide()``; checking the moves with that same
    ``decide()`` would agree with it, the oracle does not."""
    with pytest.raises(InvariantViolation) as caught:
        check_case(CASE, _forgetful_agent)
    assert caught.value.number == 3
    assert "retryable_error" in str(caught.value)


UNCHECKED_OTHER = AgentMachine(
    [
        *(r for r in TABLE if not (r.source is State.CALLING and r.outcome is Outcome.OTHER)),
        Row(State.CALLING, Outcome.OTHER, State.FINALIZING, stop=StopReason.COMPLETED),
    ]
)
"""An earlier table's rows for an ``other`` finish: straight to ``completed``, past the check."""


def test_an_answer_that_skips_its_check_is_caught() -> None:
    """Invariant 6: a run whose answers must pass a check (a verifier, an output type, the done
    tool) ends ``completed`` only from ``verifying``; an ``other`` finish on the earlier table's
    row broke it, and every row of ``decide()`` agreed with that table."""
    case = FuzzCase(script=(finish("other", ""), text("x")), verifier=(True,))

    def agent(model: Model) -> Agent[None]:
        return Agent(model, verifier=lambda **_: True, machine=UNCHECKED_OTHER)

    with pytest.raises(InvariantViolation) as caught:
        check_case(case, agent)
    assert caught.value.number == 6
    assert "without the answer's check" in str(caught.value)
    check_case(case, lambda model: Agent(model, verifier=lambda **_: True))
