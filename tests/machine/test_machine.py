"""The table and the machine: validation at build time, and decide() as the one source of moves."""

from __future__ import annotations

import pytest

from fsm_agent import AgentMachine, Counters, DefinitionError, Limits, Outcome, State, StopReason
from fsm_agent.machine.agent_machine import (
    IllegalMoveError,
    default_machine,
    guard_value_combinations,
)
from fsm_agent.machine.guards import Counter
from fsm_agent.machine.table import NON_TERMINAL, TABLE, TERMINAL, Row, Update, steps_left

LIMIT_SETS = [
    Limits(),
    Limits(
        max_steps=3,
        max_retries=1,
        max_consecutive_errors=2,
        max_total_errors=3,
        max_compaction_attempts=1,
        max_verifications=1,
        verification=True,
        max_model_switches=1,
    ),
    Limits(max_steps=4, max_repeated_tool_calls=2, finalize_repeated_tool_calls=True),
    Limits(
        max_steps=None,
        max_retries=0,
        max_consecutive_errors=1,
        max_compaction_attempts=0,
        max_verifications=0,
        verification=False,
    ),
]


@pytest.mark.parametrize("limits", LIMIT_SETS)
def test_compiled_lookup_agrees_with_transitions_machine(limits: Limits) -> None:
    """The fast lookup and the `transitions` machine pick the same row, destination and
    counters for every (state, outcome, guard values) combination."""
    checked = 0
    pairs = {(r.source, r.outcome) for r in TABLE}
    for counters in guard_value_combinations(limits):
        for state, outcome in pairs:
            fast = default_machine.decide(state, outcome, counters, limits)
            slow = default_machine.decide_with_transitions(state, outcome, counters, limits)
            assert fast == slow
            checked += 1
    assert checked >= 2 * len(pairs)


@pytest.mark.parametrize("limits", LIMIT_SETS)
def test_remembered_moves_are_the_decided_moves(limits: Limits) -> None:
    """deciding(limits) gives decide()'s move for every (state, outcome, guard values)
    combination, the first time and when it remembers it; equal limits share the memory."""
    machine = AgentMachine()
    remembered = machine.deciding(limits)
    pairs = {(r.source, r.outcome) for r in TABLE}
    for counters in guard_value_combinations(limits):
        for state, outcome in pairs:
            first = remembered(state, outcome, counters)
            assert first == machine.decide(state, outcome, counters, limits)
            assert remembered(state, outcome, counters) is first
            again = machine.deciding(Limits(**{f: getattr(limits, f) for f in limits.__slots__}))
            assert again(state, outcome, counters) is first
    assert again is remembered  # one function per set of limits: an agent adds none


def test_remembered_moves_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory of moves starts over when full, and still answers right."""
    monkeypatch.setattr("fsm_agent.machine.agent_machine.MEMO_SIZE", 3)
    machine = AgentMachine()
    remembered = machine.deciding(Limits())
    for steps in range(10):
        counters = Counters(steps=steps)
        move = remembered(State.CALLING, Outcome.TOOL_CALLS, counters)
        assert move == machine.decide(State.CALLING, Outcome.TOOL_CALLS, counters, Limits())
        assert len(machine._remembered[Limits()].moves[State.CALLING][Outcome.TOOL_CALLS]) <= 3
    with pytest.raises(IllegalMoveError):
        remembered(State.IDLE, Outcome.TOOLS_DONE, Counters())


def test_every_non_terminal_state_can_be_cancelled() -> None:
    """`* cancel → aborted/cancelled` holds for every non-terminal state [S000 §2.3]."""
    for state in NON_TERMINAL:
        move = default_machine.decide(state, Outcome.CANCEL, Counters(), Limits())
        assert (move.dest, move.stop) == (State.ABORTED, StopReason.CANCELLED)


def test_successful_turn_spends_a_step_and_resets_retries() -> None:
    """A successful model turn counts a step and resets the retry counter (DESIGN §3)."""
    move = default_machine.decide(
        State.CALLING, Outcome.TOOL_CALLS, Counters(steps=2, retries=3), Limits()
    )
    assert move.counters.steps == 3 and move.counters.retries == 0
    assert move.dest is State.DISPATCHING


def test_retry_until_budget_then_max_errors() -> None:
    """Retryable errors loop calling → calling while retries are left, then abort with
    max_errors [S001 §7]."""
    limits = Limits(max_retries=2)
    counters = Counters()
    dests = []
    for _ in range(3):
        move = default_machine.decide(State.CALLING, Outcome.RETRYABLE_ERROR, counters, limits)
        dests.append(move.dest)
        counters = move.counters
    assert dests == [State.CALLING, State.CALLING, State.ABORTED]
    assert move.stop is StopReason.MAX_ERRORS


def test_fatal_model_error_aborts_at_once() -> None:
    """A non-retryable model error aborts with model_error whatever the retry budget."""
    move = default_machine.decide(State.CALLING, Outcome.FATAL_ERROR, Counters(), Limits())
    assert (move.dest, move.stop) == (State.ABORTED, StopReason.MODEL_ERROR)


def test_consecutive_failed_turns_abort_with_max_errors() -> None:
    """max_consecutive_errors failed tool turns abort the run with max_errors [S002]."""
    limits = Limits(max_consecutive_errors=3)
    counters = Counters()
    for expected in (State.COMPACTING, State.COMPACTING, State.ABORTED):
        move = default_machine.decide(State.DISPATCHING, Outcome.TOOLS_FAILED, counters, limits)
        assert move.dest is expected
        counters = move.counters
    assert move.stop is StopReason.MAX_ERRORS


def test_a_good_turn_resets_the_consecutive_error_count() -> None:
    """A tool turn with a success resets consecutive_error_turns."""
    move = default_machine.decide(
        State.DISPATCHING, Outcome.TOOLS_DONE, Counters(consecutive_error_turns=2), Limits()
    )
    assert move.counters.consecutive_error_turns == 0


def test_step_limit_goes_to_finalizing_with_max_steps() -> None:
    """At the step limit a finished tool turn goes to finalizing (summary call) [S000 §6]."""
    move = default_machine.decide(
        State.DISPATCHING, Outcome.TOOLS_DONE, Counters(steps=5), Limits(max_steps=5)
    )
    assert (move.dest, move.stop) == (State.FINALIZING, StopReason.MAX_STEPS)


def test_length_forces_compaction_until_attempts_are_spent() -> None:
    """`length` forces compaction while attempts are left, then ends with context_limit
    [S001 §6]."""
    limits = Limits(max_compaction_attempts=1)
    move = default_machine.decide(State.CALLING, Outcome.LENGTH, Counters(), limits)
    assert move.dest is State.COMPACTING
    move = default_machine.decide(State.CALLING, Outcome.LENGTH, Counters(compactions=1), limits)
    assert (move.dest, move.stop) == (State.FINALIZING, StopReason.CONTEXT_LIMIT)


def test_verification_rejections_are_bounded() -> None:
    """Rejections go back to the model max_verifications times, then end unverified [S002]."""
    limits = Limits(max_verifications=1, verification=True)
    first = default_machine.decide(State.VERIFYING, Outcome.REJECTED, Counters(), limits)
    assert first.dest is State.COMPACTING
    second = default_machine.decide(State.VERIFYING, Outcome.REJECTED, first.counters, limits)
    assert (second.dest, second.stop) == (State.FINALIZING, StopReason.UNVERIFIED)


def test_unknown_outcome_for_state_is_an_illegal_move() -> None:
    """An outcome a state has no row for raises IllegalMoveError, never a KeyError."""
    with pytest.raises(IllegalMoveError, match="no row leaves 'idle' on 'stop'"):
        default_machine.decide(State.IDLE, Outcome.STOP, Counters(), Limits())


def test_validation_reports_every_fault_at_once() -> None:
    """A broken table raises one DefinitionError that lists every fault."""
    rows = [row for row in TABLE if not (row.source is State.FINALIZING and row.dest is State.DONE)]
    rows.append(Row(State.CALLING, Outcome.STOP, State.FINALIZING, stop=StopReason.COMPLETED))
    rows.append(Row(State.DONE, Outcome.CANCEL, State.ABORTED, stop=StopReason.CANCELLED))
    rows.append(Row(State.DISPATCHING, Outcome.TOOLS_DONE, State.ABORTED))
    rows.append(Row(State.VERIFYING, Outcome.REJECTED, State.COMPACTING, steps_left))
    with pytest.raises(DefinitionError) as info:
        AgentMachine(rows)
    text = "\n".join(info.value.faults)
    assert "shadowed" in text
    assert "terminal state 'done' has an exit" in text
    assert "must set a stop reason" in text
    assert "state 'done' is unreachable" in text
    assert "every row is guarded" not in text or "rejected" in text
    assert len(info.value.faults) >= 4


def test_validation_finds_unreachable_and_exitless_states() -> None:
    """A state nothing leads to, and a non-terminal state with no exit, are both reported."""
    rows = [r for r in TABLE if r.dest is not State.VERIFYING and r.source is not State.SUSPENDED]
    with pytest.raises(DefinitionError) as info:
        AgentMachine(rows)
    faults = "\n".join(info.value.faults)
    assert "state 'verifying' is unreachable" in faults
    assert "non-terminal state 'suspended' has no exit" in faults


def test_validation_finds_a_group_that_can_refuse_an_outcome() -> None:
    """An outcome whose rows are all guarded could find no move: reported at build time."""
    rows = [
        r
        for r in TABLE
        if not (r.source is State.CALLING and r.outcome is Outcome.LENGTH and r.guard is None)
    ]
    with pytest.raises(DefinitionError, match="every row is guarded"):
        AgentMachine(rows)


def test_terminal_states_have_no_rows() -> None:
    """The built-in table never leaves done or aborted."""
    assert not [r for r in TABLE if r.source in TERMINAL]


def test_guard_combinations_fire_every_row() -> None:
    """Across the limit sets, the generated counters make every row of the table fire, so
    the agreement test above covers the whole table."""
    fired = set()
    for limits in LIMIT_SETS:
        for counters in guard_value_combinations(limits):
            for row in TABLE:
                fired.add(default_machine.decide(row.source, row.outcome, counters, limits).row)
    assert fired == set(range(len(TABLE)))


@pytest.mark.parametrize("counter", list(Counter))
def test_a_counter_update_changes_its_counter_only(counter: Counter) -> None:
    """Invariant: ``Update(c).apply`` adds one to counter ``c``, ``Update(c, reset=True)``
    sets it to zero, and every other counter keeps its value (the compiled lookup and the
    fuzzer's oracle both apply a row's updates through it)."""
    counters = Counters(*range(3, 3 + len(Counters._fields)))
    position = Counters._fields.index(counter.value)
    for update, expected in ((Update(counter), counters[position] + 1), (Update(counter, True), 0)):
        after = update.apply(counters)
        assert type(after) is Counters
        assert after[position] == expected
        assert [v for i, v in enumerate(after) if i != position] == [
            v for i, v in enumerate(counters) if i != position
        ]


def test_the_machine_names_its_limit_states_and_switch_rows_once() -> None:
    """The states a reached limit interrupts are the working states, and the rows that move a
    call down a fallback chain leave and re-enter `calling`; both are computed once per
    machine, so every agent on it shares them."""
    machine = AgentMachine()
    assert machine.limit_states == {
        State.COMPACTING,
        State.CALLING,
        State.DISPATCHING,
        State.VERIFYING,
    }
    switches = [machine.rows[i] for i in sorted(machine.switch_rows)]
    assert [(r.source, r.outcome, r.dest) for r in switches] == [
        (State.CALLING, Outcome.RETRYABLE_ERROR, State.CALLING),
        (State.CALLING, Outcome.FALLBACK, State.CALLING),
    ]
    assert machine.switch_rows is machine.switch_rows
    assert machine.limit_states is machine.limit_states
