"""Hooks: registration checks, order and chaining, every hook point, and hook faults."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from fsm_agent import (
    ConfigurationError,
    HookError,
    Message,
    ModelRequest,
    ModelResponse,
    Policy,
    State,
    StopReason,
    ToolCall,
    ToolResult,
    tool,
)
from fsm_agent.events import HookErrorEvent
from fsm_agent.hooks import HookSet, MockResult, SkipTool
from fsm_agent.messages import FinishReason, Role
from fsm_agent.testing import text, tool_call
from helpers import add, make_agent, stream
from invariants import check_history


def results(messages: Any) -> list[ToolResult]:
    """Every tool result of a history, in order."""
    return [r for m in messages if m.role is Role.TOOL for r in m.tool_results]


# -- registration ------------------------------------------------------------------------------
def test_a_hook_without_future_kwargs_is_refused_at_registration() -> None:
    """A hook method must end with **future_kwargs."""

    class Bad:
        def before_tool(self, *, call: ToolCall) -> None: ...

    with pytest.raises(ConfigurationError, match=r"Bad.before_tool must end with '\*\*future"):
        HookSet([Bad()])


def test_a_hook_with_a_positional_parameter_is_refused() -> None:
    """Hook arguments are keyword-only."""

    class Bad:
        def on_transition(self, move: object, **kw: Any) -> None: ...

    with pytest.raises(ConfigurationError, match="'move' must be keyword-only"):
        HookSet([Bad()])


def test_a_hook_asking_for_an_unknown_argument_is_refused() -> None:
    """A hook may only name the arguments its point passes."""

    class Bad:
        def before_run(self, *, prompt: str, **kw: Any) -> None: ...

    with pytest.raises(ConfigurationError, match="unknown argument 'prompt'; before_run passes"):
        HookSet([Bad()])


def test_an_object_with_no_hook_method_is_refused() -> None:
    """Registering something that implements no hook point is an error."""
    with pytest.raises(ConfigurationError, match="defines none of the hook methods"):
        HookSet([object()])


def test_a_bad_per_hook_timeout_is_refused() -> None:
    """A hook object's timeout_s must be a positive number."""
    with pytest.raises(ConfigurationError, match="timeout_s must be a positive number"):
        HookSet([SimpleNamespace(timeout_s=0, before_run=lambda **kw: None)])


def test_no_hooks_means_every_point_is_empty() -> None:
    """Without hooks each point is an empty tuple, so the kernel skips them for free."""
    hooks = HookSet()
    assert not hooks
    assert hooks.before_tool == ()
    assert hooks.on_transition == ()


# -- every point, sync and async ---------------------------------------------------------------
def test_run_and_transition_hooks_see_the_run_start_every_move_and_the_result() -> None:
    """before_run, on_transition (once per move) and after_run fire, sync or async."""
    seen: list[str] = []

    class Watch:
        def before_run(self, *, run_state: Any, **kw: Any) -> None:
            seen.append(f"start:{run_state.state}")

        async def on_transition(self, *, move: Any, **kw: Any) -> None:
            seen.append(f"{move.source}->{move.dest}")

        def after_run(self, *, result: Any, **kw: Any) -> None:
            seen.append(f"end:{result.stop_reason}")

    agent, _, _ = make_agent([text("hi")], hooks=[Watch()])
    result = agent.run_sync("go")
    moves = [f"{m.source}->{m.dest}" for m in result.trace]
    assert seen == ["start:idle", *moves, "end:completed"]


def test_before_model_call_hooks_chain_in_order_each_seeing_the_last_change() -> None:
    """Two hooks change the request in turn; the model gets both changes."""

    class First:
        def before_model_call(self, *, request: ModelRequest, **kw: Any) -> ModelRequest:
            return request.model_copy(update={"temperature": 0.5})

    class Second:
        def before_model_call(self, *, request: ModelRequest, **kw: Any) -> ModelRequest:
            assert request.temperature == 0.5
            return request.model_copy(update={"max_tokens": 7})

    agent, model, _ = make_agent([text("hi")], hooks=[First(), Second()])
    agent.run_sync("go")
    assert (model.requests[0].temperature, model.requests[0].max_tokens) == (0.5, 7)


def test_before_model_call_can_skip_the_call_with_a_supplied_response() -> None:
    """A returned ModelResponse replaces the call: the model is not called."""
    canned = ModelResponse(message=Message.assistant("cached"), finish_reason=FinishReason.STOP)

    class Cache:
        async def before_model_call(self, **kw: Any) -> ModelResponse:
            return canned

    agent, model, _ = make_agent([text("never")], hooks=[Cache()])
    result = agent.run_sync("go")
    assert result.output == "cached"
    assert model.requests == []
    assert result.model_calls == 0
    assert result.usage.requests == 0


def test_after_model_call_sees_the_request_and_response() -> None:
    """after_model_call observes each answered call."""
    seen: list[str] = []

    class Watch:
        def after_model_call(self, *, request: Any, response: Any, **kw: Any) -> None:
            seen.append(response.message.text)

    agent, _, _ = make_agent(
        [tool_call("add", {"a": 1, "b": 2}), text("3")], tools=[add], hooks=[Watch()]
    )
    agent.run_sync("go")
    assert seen == ["", "3"]


def test_model_call_hooks_see_the_chains_model_the_streaming_and_each_failure() -> None:
    """A fallback chain whose first model fails: before_run gets the agent, before_model_call
    the chain's model that takes each attempt and whether it streams, model_call_failed the
    failed attempt's request and its error."""
    from fsm_agent.errors import RateLimitError
    from fsm_agent.providers.fallback import FallbackModel
    from fsm_agent.testing import ScriptedModel, fail

    seen: list[object] = []

    class Watch:
        def before_run(self, *, agent: Any, **kw: Any) -> None:
            seen.append(agent)

        def before_model_call(self, *, model: Any, stream: bool, **kw: Any) -> None:
            seen.append((model.name, stream))

        def model_call_failed(self, *, request: Any, error: Any, **kw: Any) -> None:
            seen.append((request.messages[-1].text, type(error)))

    first = ScriptedModel([fail(RateLimitError("slow down"))], name="first")
    second = ScriptedModel([text("ok"), text("ok")], name="second")
    agent, _, _ = make_agent([], hooks=[Watch()])
    agent = agent.with_effects(model=FallbackModel(first, second))
    assert agent.run_sync("go").ok
    assert seen == [agent, ("first", False), ("go", RateLimitError), ("second", False)]
    seen.clear()
    _events, result = stream(agent.with_effects(model=second), "again")
    assert result.ok and seen[1:] == [("second", True)]


def test_before_tool_can_change_the_arguments() -> None:
    """A ToolCall returned by before_tool runs instead of the model's call."""

    class Double:
        def before_tool(self, *, call: ToolCall, **kw: Any) -> ToolCall:
            args = dict(call.arguments or {})
            return ToolCall.create(call.id, call.name, {"a": args["a"] * 2, "b": args["b"]})

    agent, _, _ = make_agent(
        [tool_call("add", {"a": 1, "b": 1}), text("ok")], tools=[add], hooks=[Double()]
    )
    assert [r.content for r in results(agent.run_sync("go").messages)] == ["3"]


def test_before_tool_can_mock_or_skip_the_tool() -> None:
    """MockResult answers without running the tool; SkipTool tells the model it was skipped."""
    ran: list[int] = []

    @tool
    def count(n: int) -> int:
        """Record n."""
        ran.append(n)
        return n

    class Fake:
        def before_tool(self, *, call: ToolCall, **kw: Any) -> MockResult | SkipTool:
            if (call.arguments or {}).get("n") == 1:
                return MockResult("mocked")
            return SkipTool("not today")

    turns = [tool_call("count", {"n": 1}), tool_call("count", {"n": 2}), text("ok")]
    agent, _, _ = make_agent(turns, tools=[count], hooks=[Fake()])
    got = results(agent.run_sync("go").messages)
    assert ran == []
    assert (got[0].content, got[0].is_error) == ("mocked", False)
    assert got[1].is_error
    assert "not today" in got[1].content


def test_after_tool_hooks_chain_and_keep_the_call_id() -> None:
    """after_tool hooks change the result in order; the call id and name are kept."""

    class Upper:
        def after_tool(self, *, result: ToolResult, **kw: Any) -> ToolResult:
            return ToolResult(call_id="wrong", name="wrong", content=result.content + "!")

    class Twice:
        async def after_tool(self, *, result: ToolResult, **kw: Any) -> ToolResult:
            return result.model_copy(update={"content": result.content * 2})

    agent, _, _ = make_agent(
        [tool_call("add", {"a": 1, "b": 1}, id="c"), text("ok")],
        tools=[add],
        hooks=[Upper(), Twice()],
    )
    (only,) = results(agent.run_sync("go").messages)
    assert (only.content, only.call_id, only.name) == ("2!2!", "c", "add")


def test_a_namespace_of_functions_works_as_a_hook() -> None:
    """Plain functions grouped in a SimpleNamespace are hooks too."""
    seen: list[str] = []
    hook = SimpleNamespace(before_run=lambda *, run_state, **kw: seen.append(run_state.run_id))
    agent, _, _ = make_agent([text("hi")], hooks=[hook])
    assert seen == [agent.run_sync("go").run_id]


# -- faults ------------------------------------------------------------------------------------
def test_a_hook_that_raises_emits_hook_error_and_the_run_goes_on() -> None:
    """A raising hook is reported and ignored; the history stays valid."""

    class Broken:
        def before_tool(self, **kw: Any) -> None:
            raise ValueError("oops")

    agent, _, _ = make_agent(
        [tool_call("add", {"a": 1, "b": 2}), text("3")], tools=[add], hooks=[Broken()]
    )
    events, result = stream(agent)
    (error,) = [e for e in events if isinstance(e, HookErrorEvent)]
    assert error.hook == "Broken.before_tool"
    assert "ValueError: oops" in error.error
    assert result.stop_reason is StopReason.COMPLETED
    assert [r.content for r in results(result.messages)] == ["3"]
    check_history(result.messages)


def test_a_hook_that_hangs_is_timed_out_and_the_run_goes_on() -> None:
    """An async hook past hook_timeout_s emits hook_error; its answer is ignored."""

    class Slow:
        async def before_model_call(self, **kw: Any) -> None:
            await asyncio.sleep(10)

    agent, model, _ = make_agent([text("hi")], hooks=[Slow()], policy=Policy(hook_timeout_s=0.01))
    events, result = stream(agent)
    (error,) = [e for e in events if isinstance(e, HookErrorEvent)]
    assert "timed out after 0.01 s" in error.error
    assert result.output == "hi"
    assert len(model.requests) == 1


def test_a_hook_object_timeout_overrides_the_policy() -> None:
    """A hook object's own timeout_s wins over hook_timeout_s."""

    class Slow:
        timeout_s = 0.01

        async def before_run(self, **kw: Any) -> None:
            await asyncio.sleep(10)

    agent, _, _ = make_agent([text("hi")], hooks=[Slow()])
    events, _ = stream(agent)
    assert any(isinstance(e, HookErrorEvent) for e in events)


def test_a_hook_returning_the_wrong_type_is_a_hook_error() -> None:
    """A return value a point does not accept is reported and ignored."""

    class Wrong:
        def before_tool(self, **kw: Any) -> str:
            return "yes"

    agent, _, _ = make_agent(
        [tool_call("add", {"a": 1, "b": 2}), text("3")], tools=[add], hooks=[Wrong()]
    )
    events, result = stream(agent)
    (error,) = [e for e in events if isinstance(e, HookErrorEvent)]
    assert "returned str" in error.error
    assert result.ok


def test_fail_mode_aborts_the_run_with_stop_reason_hook_error() -> None:
    """With hook_failure_mode="fail" a failing hook aborts the run; the history stays valid."""

    class Broken:
        def after_tool(self, **kw: Any) -> None:
            raise RuntimeError("audit down")

    agent, model, _ = make_agent(
        [tool_call("add", {"a": 1, "b": 2}), text("never")],
        tools=[add],
        hooks=[Broken()],
        policy=Policy(hook_failure_mode="fail"),
    )
    result = agent.run_sync("go")
    assert result.state is State.ABORTED
    assert result.stop_reason is StopReason.HOOK_ERROR
    assert isinstance(result.error, HookError)
    assert result.error.hook == "Broken.after_tool"
    assert len(model.requests) == 1
    check_history(result.messages)


def test_fail_mode_before_run_aborts_before_anything_happens() -> None:
    """A failing before_run in fail mode aborts from idle: no model call is made."""

    class Broken:
        def before_run(self, **kw: Any) -> None:
            raise RuntimeError("no")

    agent, model, _ = make_agent(
        [text("hi")], hooks=[Broken()], policy=Policy(hook_failure_mode="fail")
    )
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.HOOK_ERROR
    assert model.requests == []
    assert result.trace[-1].source is State.IDLE


def test_a_failing_after_run_hook_cannot_change_a_finished_run() -> None:
    """after_run runs after the ending: even in fail mode the result stands."""

    class Broken:
        def after_run(self, **kw: Any) -> None:
            raise RuntimeError("late")

    agent, _, _ = make_agent(
        [text("hi")], hooks=[Broken()], policy=Policy(hook_failure_mode="fail")
    )
    events, result = stream(agent)
    assert result.ok
    assert events[-1].type == "final"
    assert [e.type for e in events].count("hook_error") == 1


def test_the_step_limit_summary_call_goes_through_the_model_call_hooks() -> None:
    """The tools-off summary call is a model call like any other: before_model_call may answer
    it (the model is not called) and after_model_call observes what answered it."""
    seen: list[str] = []

    class Cache:
        def before_model_call(self, *, request: ModelRequest, **kw: Any) -> ModelResponse | None:
            if request.tool_choice == "none":  # the summary call
                return ModelResponse(
                    message=Message.assistant("cached summary"), finish_reason=FinishReason.STOP
                )
            return None

        def after_model_call(self, *, response: ModelResponse, **kw: Any) -> None:
            seen.append(response.message.text)

    agent, model, _ = make_agent(
        [tool_call("add", {"a": 1, "b": 1}), text("never")],
        tools=[add],
        policy=Policy(max_steps=1),
        hooks=[Cache()],
    )
    result = agent.run_sync("go")
    assert (result.output, result.stop_reason) == ("cached summary", StopReason.MAX_STEPS)
    assert len(model.requests) == 1  # the summary never reached the model
    assert result.model_calls == 1
    assert seen == ["", "cached summary"]
