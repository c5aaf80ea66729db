"""A checkpoint row's body is the run state without the fields stored apart, encoded by a
serialiser whose schema leaves them out: the same JSON as the run state's own serialiser told to
exclude them, and it decodes back to the state. Its moves, written directly, are the text their
serialiser writes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fsm_agent.machine.agent_machine import Move
from fsm_agent.machine.table import Counters, Outcome, State, StopReason
from fsm_agent.persistence.sql_rows import MOVES, SEPARATE, body_json, row_json
from fsm_agent.run.state import moves_json
from fsm_agent.run_state import RunState
from fsm_agent.values.messages import Message, ToolCall, Usage
from fsm_agent.values.record import adapter


def _state() -> RunState:
    state = RunState(run_id="run_rows", state=State.DISPATCHING)
    state.counters = Counters(steps=3, retries=1)
    state.usage = Usage(requests=2, input_tokens=10)
    state.messages = [Message.user("hi")]
    state.pending_tool_calls = [ToolCall(id="c1", name="add", arguments_json='{"a": 1}')]
    state.trace = [Move(State.CALLING, Outcome.TOOL_CALLS, State.DISPATCHING, 7, Counters(steps=3))]
    state.tool_outputs = {"c0": "a long output"}
    state.answered_by = {"m": 2}
    state.stop_reason = StopReason.COMPLETED
    return state


def test_a_rows_body_is_the_state_without_the_fields_stored_apart() -> None:
    state = _state()
    expected = adapter(RunState).serializer.to_json(state, exclude=SEPARATE).decode()
    assert body_json(state) == expected
    decoded = RunState.model_validate_json(body_json(state))
    assert decoded.counters == state.counters and decoded.usage == state.usage
    assert decoded.messages == [] and decoded.trace == [] and decoded.tool_outputs == {}


def test_a_rows_moves_store_their_counters_and_names_by_name() -> None:
    _, _, moves = row_json(_state(), 0, 0)
    assert moves == (
        '[{"source":"calling","outcome":"tool_calls","dest":"dispatching","row":7,'
        '"counters":{"steps":3}}]'
    )


_COUNTS = st.integers(min_value=0, max_value=10**12)
_MOVES = st.lists(
    st.builds(
        Move,
        st.sampled_from(State),
        st.sampled_from(Outcome),
        st.sampled_from(State),
        st.integers(min_value=-1, max_value=10**6),
        st.builds(Counters, *[_COUNTS] * len(Counters._fields)),
        st.none() | st.sampled_from(StopReason),
    ),
    max_size=4,
)


@given(_MOVES)
def test_moves_written_directly_are_what_their_serialiser_writes(moves: list[Move]) -> None:
    """Invariant: for every move (any state, outcome, stop reason and counters), the text the
    checkpoint rows hold is byte for byte the stored moves' serialiser's, and reads back to the
    same moves."""
    text = moves_json(moves)
    assert text == MOVES.serializer.to_json(moves).decode()
    assert MOVES.validate_json(text) == moves
