"""Tool-call deadlines: each call is cut at its own timeout, with its one error result, while
the calls beside it go on, and any other cancel goes on as a cancel."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import time

import pytest

from fsm_agent import Policy, Role, StopReason, ToolCall, ToolResult, tool
from fsm_agent.testing import text, tool_call, tool_calls
from helpers import make_agent


def results(messages: list) -> list[ToolResult]:  # type: ignore[type-arg]
    """Every tool result of a history, in order."""
    return [r for m in messages if m.role is Role.TOOL for r in m.tool_results]


@tool(timeout_s=0.05)
async def hang() -> str:
    """Never answers in time."""
    await asyncio.sleep(10)
    return "late"


@tool(timeout_s=5.0)
async def fast() -> str:
    """Answers soon."""
    await asyncio.sleep(0.01)
    return "fast"


def test_a_hanging_call_is_cut_at_its_own_timeout_while_a_fast_sibling_is_not() -> None:
    """Two calls of one concurrent turn share the timer: the hanging one gets its timed-out
    result, the fast one its answer, and the run goes on."""
    agent, _, _ = make_agent(
        [tool_calls(("hang", {}), ("fast", {})), text("ok")],
        tools=[hang, fast],
        policy=Policy(parallel_tool_calls=True),
    )
    started = time.monotonic()
    result = agent.run_sync("go")
    assert time.monotonic() - started < 2.0
    assert result.stop_reason is StopReason.COMPLETED
    cut, answered = results(result.messages)
    assert cut.is_error and "timed out after 0.05 s" in cut.content
    assert not answered.is_error and answered.content == "fast"


def test_a_later_call_with_an_earlier_deadline_re_arms_the_timer() -> None:
    """In order, a call with a 5 s timeout then one with 0.05 s: the second is cut at its own
    deadline, not at the first call's, which the timer was armed for."""
    agent, _, _ = make_agent(
        [tool_call("fast", {}, id="a"), tool_call("hang", {}, id="b"), text("ok")],
        tools=[hang, fast],
    )
    started = time.monotonic()
    result = agent.run_sync("go")
    assert time.monotonic() - started < 2.0
    first, second = results(result.messages)
    assert first.content == "fast"
    assert second.is_error and "timed out after 0.05 s" in second.content


def test_a_call_after_one_that_ended_is_cut_when_the_timer_re_arms_for_it() -> None:
    """The timer armed for a call that ended fires, finds it done, and re-arms for the call
    running now, which is cut at its own (later) deadline."""

    @tool(timeout_s=0.02)
    async def quick() -> str:
        """Answers at once."""
        return "quick"

    @tool(timeout_s=0.15)
    async def slow() -> str:
        """Never answers in time."""
        await asyncio.sleep(10)
        return "late"

    agent, _, _ = make_agent(
        [tool_call("quick", {}, id="a"), tool_call("slow", {}, id="b"), text("ok")],
        tools=[quick, slow],
    )
    result = agent.run_sync("go")
    first, second = results(result.messages)
    assert first.content == "quick"
    assert second.is_error and "timed out after 0.15 s" in second.content


def test_cancelling_the_caller_while_a_tool_waits_cancels_it_and_the_cancel_goes_on() -> None:
    """The caller's cancel is not a timeout: the waiting tool sees it, the run ends cancelled
    and the CancelledError reaches the caller."""
    waiting = asyncio.Event()
    seen: list[str] = []

    @tool(timeout_s=5.0)
    async def wait() -> str:
        """Wait for a long time."""
        waiting.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "late"

    agent, _, _ = make_agent([tool_call("wait", {}), text("ok")], tools=[wait])

    async def main() -> None:
        task = asyncio.create_task(agent.run("go"))
        await waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    asyncio.run(main())
    assert seen == ["cancelled"]


def test_a_tool_that_raises_timeout_error_itself_is_not_reported_as_cut() -> None:
    """A TimeoutError the tool raises is its own error, not the call's timeout."""

    @tool(timeout_s=5.0)
    async def flaky() -> str:
        """Time out on its own."""
        raise TimeoutError("upstream took too long")

    call = ToolCall.create("c", "flaky", {})
    execution = asyncio.run(flaky.execute(call, None))
    assert execution.result.content == "Error: TimeoutError: upstream took too long"


def test_a_cancel_the_tool_swallows_after_its_deadline_leaves_no_cancel_behind() -> None:
    """A tool that catches the deadline's cancel and returns keeps its answer, and the task's
    count of cancel requests is back where it was: nothing cancels the caller later."""

    @tool(timeout_s=0.02)
    async def stubborn() -> str:
        """Refuse to stop."""
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "kept"
        return "late"

    async def main() -> int:
        execution = await stubborn.execute(ToolCall.create("c", "stubborn", {}), None)
        assert execution.result.content == "kept"
        await asyncio.sleep(0)  # no cancel lands here
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()

    assert asyncio.run(main()) == 0


_CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")


seen: list[str] = []  # the caller's context variable, as each cut call saw it


@tool(timeout_s=0.05)
async def hang_seen() -> str:
    """Never answers in time; says whose context it runs in when it is cut."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        seen.append(_CALLER.get())
        raise
    return "late"


def test_deadlines_hold_on_the_loops_of_several_threads_at_once() -> None:
    """The timers of calls in flight on event loops of several threads fire together: each
    call is cut at its own timeout, and runs in its caller's context variables."""

    def cut_calls(name: str) -> list[ToolResult]:
        async def main() -> list[ToolResult]:
            _CALLER.set(name)
            calls = [ToolCall.create(f"c{i}", "hang_seen", {}) for i in range(50)]
            done = await asyncio.gather(*(hang_seen.execute(c, None) for c in calls))
            return [execution.result for execution in done]

        return asyncio.run(main())

    seen.clear()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        found = list(pool.map(cut_calls, ["a", "b", "c", "d"]))
    assert all(r.is_error and "timed out after 0.05 s" in r.content for rs in found for r in rs)
    assert sorted(set(seen)) == ["a", "b", "c", "d"] and len(seen) == 200
