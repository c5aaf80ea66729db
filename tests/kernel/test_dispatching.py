"""Dispatching: parallel and sequential tool calls, failure modes, limits, bad input, faults."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fsm_agent import (
    Policy,
    RunHandle,
    State,
    StopReason,
    Tool,
    ToolCall,
    ToolContext,
    ToolExecutionError,
    tool,
)
from fsm_agent.events import ToolCallEvent, ToolResultEvent
from fsm_agent.messages import Role, ToolResult
from fsm_agent.testing import text, tool_call, tool_calls
from fsm_agent.tools import ToolExecution
from helpers import add, boom, make_agent, stream
from invariants import check_history


def results(messages: Any) -> list[ToolResult]:
    """Every tool result of a history, in order."""
    return [r for m in messages if m.role is Role.TOOL for r in m.tool_results]


def test_parallel_results_are_recorded_in_call_order_whatever_order_they_finish() -> None:
    """Concurrent calls finishing in reverse order still get their results in call order."""
    finished: list[str] = []

    @tool
    async def wait(name: str, delay: float) -> str:
        """Sleep, then answer."""
        await asyncio.sleep(delay)
        finished.append(name)
        return name

    calls = [("wait", {"name": n, "delay": d}) for n, d in (("a", 0.03), ("b", 0.02), ("c", 0))]
    agent, _, _ = make_agent([tool_calls(*calls), text("done")], tools=[wait])
    result = agent.run_sync("go")
    assert finished == ["c", "b", "a"]
    assert [r.content for r in results(result.messages)] == ["a", "b", "c"]
    check_history(result.messages)


def test_parallel_calls_overlap_and_sequential_calls_do_not() -> None:
    """With parallel_tool_calls the calls run at once; without, one after another."""

    def run(parallel: bool) -> int:
        running = peak = 0

        @tool
        async def work() -> str:
            """Work a little."""
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.005)
            running -= 1
            return "ok"

        agent, _, _ = make_agent(
            [tool_calls(("work", {}), ("work", {}), ("work", {})), text("done")],
            tools=[work],
            policy=Policy(parallel_tool_calls=parallel),
        )
        assert agent.run_sync("go").stop_reason is StopReason.COMPLETED
        return peak

    assert run(True) == 3
    assert run(False) == 1


def test_fail_mode_aborts_on_the_first_tool_error_keeping_it() -> None:
    """tool_failure_mode="fail" aborts at the first tool error; later calls do not run."""
    ran: list[int] = []

    @tool
    def count(n: int) -> int:
        """Record n."""
        ran.append(n)
        return n

    agent, _, _ = make_agent(
        [tool_calls(("boom", {"reason": "bad"}), ("count", {"n": 1})), text("never")],
        tools=[boom, count],
        policy=Policy(tool_failure_mode="fail", parallel_tool_calls=False),
    )
    result = agent.run_sync("go")
    assert result.state is State.ABORTED
    assert result.stop_reason is StopReason.TOOL_ERROR
    assert isinstance(result.error, ToolExecutionError)
    assert isinstance(result.error.__cause__, RuntimeError)
    assert ran == []
    assert [r.is_error for r in results(result.messages)] == [True, True]
    check_history(result.messages)


def test_continue_mode_reports_the_error_to_the_model() -> None:
    """The default "continue" mode gives the model the error as an is_error result."""
    agent, model, _ = make_agent([tool_call("boom", {"reason": "bad"}), text("ok")], tools=[boom])
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.COMPLETED
    (only,) = results(model.requests[1].messages)
    assert only.is_error
    assert "RuntimeError: bad" in only.content


def test_max_tool_calls_caps_executions_per_run() -> None:
    """Calls past max_tool_calls are answered with an error and not run."""
    agent, _, _ = make_agent(
        [tool_calls(*[("add", {"a": i, "b": 0}) for i in range(4)]), text("ok")],
        tools=[add],
        policy=Policy(max_tool_calls=2),
    )
    result = agent.run_sync("go")
    assert result.tool_executions == 2
    contents = [r.content for r in results(result.messages)]
    assert contents[:2] == ["0", "1"]
    assert all("tool call limit (2)" in c for c in contents[2:])


def test_a_tool_asking_for_a_tool_context_gets_run_call_step_and_deps() -> None:
    """A ToolContext parameter receives the run id, call id, step and the user's deps."""
    seen: list[tuple[str, str, int, object]] = []

    @tool
    def where(ctx: ToolContext[dict[str, int]], x: int) -> int:
        """Report the context."""
        seen.append((ctx.run_id, ctx.call_id, ctx.step, ctx.deps))
        return x

    agent, _, _ = make_agent(
        [tool_call("where", {"x": 1}, id="c1"), text("ok")], tools=[where], deps={"k": 1}
    )
    result = agent.run_sync("go")
    assert seen == [(result.run_id, "c1", 1, {"k": 1})]
    assert "ctx" not in json.dumps(agent.tools["where"].definition.parameters)


def test_a_tool_context_is_built_only_for_the_tools_that_use_one() -> None:
    """A tool whose function takes no ToolContext is run without one (none is built); one that
    takes it, or a subclass that runs its calls its own way, gets the call's context."""
    seen: dict[str, object] = {}

    class Wrapped(Tool):
        async def execute(
            self,
            call: ToolCall,
            context: ToolContext[Any] | None,
            *,
            default_timeout_s: float | None = 30.0,
        ) -> ToolExecution:
            seen[call.name] = context
            return await super().execute(call, context, default_timeout_s=default_timeout_s)

    def plain(x: int) -> int:
        """Plain."""
        return x

    @tool
    def told(ctx: ToolContext[None], x: int) -> int:
        """Told."""
        seen["told"] = ctx
        return x

    wrapped = Wrapped(plain, name="wrapped")
    assert not tool(plain).uses_context
    assert told.uses_context and wrapped.uses_context
    calls = [tool_call(name, {"x": 1}, id=name) for name in ("plain", "told", "wrapped")]
    agent, _, _ = make_agent(
        [*calls, text("ok")], tools=[tool(plain), told, wrapped], policy=Policy(max_steps=10)
    )
    assert agent.run_sync("go").ok
    assert isinstance(seen["told"], ToolContext) and isinstance(seen["wrapped"], ToolContext)
    assert seen["wrapped"].call_id == "wrapped"  # type: ignore[attr-defined]
    ran = asyncio.run(tool(plain).execute(ToolCall.create("c", "plain", {"x": 2}), None))
    assert ran.result.content == "2"


# -- bad input and faults ----------------------------------------------------------------------
def test_malformed_json_arguments_reach_validation_and_show_raw_in_the_event() -> None:
    """Unparseable arguments: the event shows {"_raw": ...}, the model gets a validation error."""
    agent, _, _ = make_agent([tool_call("add", '{"a": 1, "b"'), text("ok")], tools=[add])
    events, result = stream(agent)
    (call_event,) = [e for e in events if isinstance(e, ToolCallEvent)]
    assert call_event.args == {"_raw": '{"a": 1, "b"'}
    (only,) = results(result.messages)
    assert only.is_error
    assert "invalid arguments for tool 'add'" in only.content


def test_arguments_that_fail_validation_give_an_error_result_the_model_can_fix() -> None:
    """Arguments of the wrong type become an is_error result naming the field."""
    agent, _, _ = make_agent([tool_call("add", {"a": "x", "b": 2}), text("ok")], tools=[add])
    (only,) = results(agent.run_sync("go").messages)
    assert only.is_error
    assert "a:" in only.content
    assert "Fix them" in only.content


def test_unknown_tool_gives_an_error_result_and_the_loop_continues() -> None:
    """A call to a tool that does not exist is answered with an error; the run goes on."""
    agent, _, _ = make_agent([tool_call("nope", {}), text("ok")], tools=[add])
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.COMPLETED
    (only,) = results(result.messages)
    assert only.is_error
    assert only.content == "Error: Unknown tool 'nope'"


def test_a_tool_that_raises_gives_an_error_result_and_an_error_event() -> None:
    """A raising tool is reported as is_error in the history and in tool_result."""
    agent, _, _ = make_agent([tool_call("boom", {"reason": "x"}), text("ok")], tools=[boom])
    events, _ = stream(agent)
    (event,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert event.is_error
    assert "RuntimeError: x" in event.content


def test_a_tool_that_hangs_past_its_timeout_is_cut_short() -> None:
    """A tool over its timeout gets a timed-out error result and the run goes on."""

    @tool(timeout_s=0.01)
    async def hang() -> str:
        """Never answers."""
        await asyncio.sleep(10)
        return "late"

    agent, _, _ = make_agent([tool_call("hang", {}), text("ok")], tools=[hang])
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.COMPLETED
    (only,) = results(result.messages)
    assert only.is_error
    assert "timed out after 0.01 s" in only.content


def test_the_policy_tool_timeout_applies_to_tools_without_their_own() -> None:
    """Policy.tool_timeout_s bounds a tool that sets no timeout."""

    @tool
    async def hang() -> str:
        """Never answers."""
        await asyncio.sleep(10)
        return "late"

    agent, _, _ = make_agent(
        [tool_call("hang", {}), text("ok")], tools=[hang], policy=Policy(tool_timeout_s=0.01)
    )
    (only,) = results(agent.run_sync("go").messages)
    assert "timed out" in only.content


def test_a_result_that_is_not_json_serialisable_is_shown_as_text() -> None:
    """A return value JSON cannot hold becomes text with a note; the run goes on."""

    @tool
    def odd() -> object:
        """Return an object."""
        return object()

    agent, _, _ = make_agent([tool_call("odd", {}), text("ok")], tools=[odd])
    (only,) = results(agent.run_sync("go").messages)
    assert not only.is_error
    assert "not JSON-serialisable" in only.content


def test_duplicate_call_ids_from_the_model_each_get_their_own_result() -> None:
    """Calls sharing an id are renamed so that every call has exactly one result."""
    agent, model, _ = make_agent(
        [tool_calls(("add", {"a": 1, "b": 1}, "x"), ("add", {"a": 2, "b": 2}, "x")), text("ok")],
        tools=[add],
    )
    result = agent.run_sync("go")
    ids = [r.call_id for r in results(result.messages)]
    assert len(set(ids)) == 2
    assert ids[0] == "x"
    assert [r.content for r in results(result.messages)] == ["2", "4"]
    check_history(model.requests[1].messages)


def test_cancel_while_tools_run_in_parallel_writes_no_half_result() -> None:
    """Cancelling mid-batch ends the run cancelled; finished calls keep their results, a call
    cut off while running says its outcome is unknown, and the history stays valid."""
    handle = RunHandle()

    @tool
    async def quick() -> str:
        """Answer at once."""
        return "quick"

    @tool
    async def slow() -> str:
        """Cancel the run, then wait."""
        handle.cancel()
        await asyncio.sleep(10)
        return "slow"

    agent, model, _ = make_agent(
        [tool_calls(("quick", {}), ("quick", {}), ("slow", {})), text("never")],
        tools=[quick, slow],
    )
    result = asyncio.run(agent.run("go", handle=handle))
    assert result.state is State.ABORTED
    assert result.stop_reason is StopReason.CANCELLED
    contents = [r.content for r in results(result.messages)]
    assert contents[:2] == ["quick", "quick"]
    assert "interrupted (cancel) while this call was running" in contents[2]
    assert len(model.requests) == 1
    check_history(result.messages)
