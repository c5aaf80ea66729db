"""The loop guard: repeated identical tool calls and A,B,A,B cycles, warned or finalized, as a
guarded row of the table."""

from __future__ import annotations

from typing import Any

from fsm_agent import Outcome, Policy, State, StopReason, tool
from fsm_agent.events import LoopDetectedEvent
from fsm_agent.machine.agent_machine import default_machine
from fsm_agent.machine.table import GUARDS, Counters, Limits, loop_guard_finalizes, repeats_spent
from fsm_agent.messages import Role, ToolResult
from fsm_agent.testing import text, tool_call
from helpers import make_agent, stream


@tool
def look(path: str) -> str:
    """Look at a path."""
    return f"contents of {path}"


def results(messages: Any) -> list[ToolResult]:
    """Every tool result of a history, in order."""
    return [r for m in messages if m.role is Role.TOOL for r in m.tool_results]


def look_at(*paths: str) -> list[Any]:
    """One look call per turn, then a final answer."""
    return [*(tool_call("look", {"path": p}) for p in paths), text("done")]


def test_the_same_call_n_times_in_a_row_finalizes_with_repeated_tool_calls() -> None:
    """With on_repeated_tool_calls="finalize", the third identical call ends the run."""
    policy = Policy(max_repeated_tool_calls=3, on_repeated_tool_calls="finalize")
    agent, model, _ = make_agent(look_at("a", "a", "a", "a"), tools=[look], policy=policy)
    events, result = stream(agent)
    assert result.state is State.DONE
    assert result.stop_reason is StopReason.REPEATED_TOOL_CALLS
    assert len(model.requests) == 3
    assert result.tool_executions == 3
    (detected,) = [e for e in events if isinstance(e, LoopDetectedEvent)]
    assert (detected.action, detected.repeats, detected.tool_names) == ("finalize", 3, ["look"])
    assert [m.outcome for m in result.trace].count(Outcome.TOOLS_REPEATED) == 2


def test_warn_mode_tells_the_model_and_the_run_goes_on() -> None:
    """In warn mode the tripping turn's result carries a warning and the run continues."""
    policy = Policy(max_repeated_tool_calls=3)
    agent, model, _ = make_agent(look_at("a", "a", "a"), tools=[look], policy=policy)
    events, result = stream(agent)
    assert result.stop_reason is StopReason.COMPLETED
    contents = [r.content for r in results(model.requests[3].messages)]
    assert "loop guard" not in contents[1]
    assert "same tool calls 3 times in a row" in contents[2]
    (detected,) = [e for e in events if isinstance(e, LoopDetectedEvent)]
    assert detected.action == "warn"


def test_an_a_b_a_b_cycle_is_detected() -> None:
    """Alternating between two calls trips the guard as well."""
    policy = Policy(max_repeated_tool_calls=3, on_repeated_tool_calls="finalize")
    agent, model, _ = make_agent(look_at("a", "b", "a", "b", "a"), tools=[look], policy=policy)
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.REPEATED_TOOL_CALLS
    assert len(model.requests) == 4  # a, b, a (repeat 1), b (repeat 2: trips)


def test_a_different_call_breaks_the_streak() -> None:
    """Repeats must be in a row: another call resets the count."""
    policy = Policy(max_repeated_tool_calls=3, on_repeated_tool_calls="finalize")
    agent, _, _ = make_agent(look_at("a", "a", "b", "c", "c", "d"), tools=[look], policy=policy)
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.COMPLETED
    assert result.counters.repeated_turns == 0


def test_arguments_are_compared_as_json_values_not_as_text() -> None:
    """The same arguments written differently still count as the same call."""
    policy = Policy(max_repeated_tool_calls=2, on_repeated_tool_calls="finalize")
    agent, _, _ = make_agent(
        [tool_call("look", '{"path": "a"}'), tool_call("look", '{"path":"a"}'), text("x")],
        tools=[look],
        policy=policy,
    )
    assert agent.run_sync("go").stop_reason is StopReason.REPEATED_TOOL_CALLS


def test_the_guard_is_off_by_default() -> None:
    """Without max_repeated_tool_calls, repeats are ordinary turns."""
    agent, _, _ = make_agent(look_at("a", "a", "a", "a", "a"), tools=[look])
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.COMPLETED
    assert Outcome.TOOLS_REPEATED not in {m.outcome for m in result.trace}


def test_the_loop_guard_is_a_guarded_row_of_the_table() -> None:
    """The decision is the table's: a guarded tools_repeated row into finalizing, in GUARDS."""
    rows = [r for r in default_machine.rows if r.outcome is Outcome.TOOLS_REPEATED]
    assert [(r.guard_name, r.dest, r.stop) for r in rows] == [
        ("loop_guard_finalizes", State.FINALIZING, StopReason.REPEATED_TOOL_CALLS),
        ("steps_left", State.COMPACTING, None),
        (None, State.FINALIZING, StopReason.MAX_STEPS),
    ]
    assert GUARDS["loop_guard_finalizes"] is loop_guard_finalizes
    limits = Limits(max_repeated_tool_calls=3, finalize_repeated_tool_calls=True)
    assert not repeats_spent(Counters(repeated_turns=0), limits)
    assert repeats_spent(Counters(repeated_turns=1), limits)
    assert not loop_guard_finalizes(Counters(repeated_turns=1), Limits(max_repeated_tool_calls=3))
