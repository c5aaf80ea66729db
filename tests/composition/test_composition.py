"""An agent used as a tool: the child's output is the call's result, and the child shares its
parent's limits, deadline, cancellation and event stream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from fsm_agent import (
    Agent,
    AgentToolError,
    AuthenticationError,
    ConfigurationError,
    Policy,
    RunHandle,
    Runtime,
    SQLiteCheckpointer,
    State,
    StopReason,
    ToolContext,
    UsageLimits,
    tool,
)
from fsm_agent.events import (
    ChildEvent,
    FinalEvent,
    StateChangedEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from fsm_agent.messages import Role, ToolResult
from fsm_agent.testing import ScriptedModel, VirtualClock, fail, text, tool_call, tool_calls
from helpers import make_agent, stream


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def results_of(result: Any) -> list[ToolResult]:
    """The tool results in a run's history, in order."""
    return [
        part
        for message in result.messages
        if message.role is Role.TOOL
        for part in message.parts
        if isinstance(part, ToolResult)
    ]


def researcher(turns: list[Any], **kwargs: Any) -> tuple[Agent[Any, Any], ScriptedModel]:
    child, model, _ = make_agent(turns, tools=[lookup], **kwargs)
    return child, model


def test_child_output_is_the_tool_result() -> None:
    """The parent's call runs the child on the task; the child's answer is the call's result."""
    child, child_model = researcher([tool_call("lookup", {"query": "x"}), text("x is 42")])
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "find x"}), text("done: 42")],
        tools=[child.as_tool(name="research", description="Research a question.")],
    )
    result = parent.run_sync("What is x?")
    assert result.ok and result.output == "done: 42"
    (call_result,) = results_of(result)
    assert call_result.content == "x is 42" and not call_result.is_error
    assert child_model.requests[0].messages[-1].text == "find x"
    assert result.model_calls == 4  # two of the parent's and two of the child's
    assert result.usage.requests == 4


def test_typed_child_output_is_the_result_as_json() -> None:
    """A child with an output_type gives its validated answer, serialised, as the result."""

    class Finding(BaseModel):
        fact: str
        confidence: float

    child, _, _ = make_agent([text('{"fact": "x is 42", "confidence": 0.9}')], output_type=Finding)
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "find x"}), text("ok")],
        tools=[child.as_tool(name="research", description="Research a question.")],
    )
    result = parent.run_sync("What is x?")
    (call_result,) = results_of(result)
    assert Finding.model_validate_json(call_result.content) == Finding(
        fact="x is 42", confidence=0.9
    )


def test_the_task_argument_is_required_and_described() -> None:
    """The tool's schema asks for one string, the task, with a description for the model."""
    child, _ = researcher([])
    built = child.as_tool(name="research", description="Research a question.")
    schema = built.definition.parameters
    assert schema["required"] == ["task"]
    assert schema["properties"]["task"]["type"] == "string"  # type: ignore[index,call-overload]
    assert "description" in schema["properties"]["task"]  # type: ignore[operator,call-overload]


def test_child_cannot_exceed_the_parents_max_requests() -> None:
    """With max_requests=3, parent and child together make at most 3 model calls: the child is
    stopped by the limit it shares, and its stop is a result, not a crash."""
    child, child_model = researcher([tool_call("lookup", {"query": "q"})] * 10)
    parent, parent_model, _ = make_agent(
        [tool_call("research", {"task": "dig"}), text("never reached")],
        tools=[child.as_tool(name="research", description="Research a question.")],
        policy=Policy(usage_limits=UsageLimits(max_requests=3)),
    )
    result = parent.run_sync("Go.")
    assert parent_model.calls + child_model.calls == 3
    assert child_model.calls == 2
    assert result.model_calls == 3
    assert result.stop_reason is StopReason.USAGE_LIMIT
    (call_result,) = results_of(result)
    assert call_result.is_error and "usage_limit" in call_result.content


def test_a_child_under_its_share_of_the_limits_runs_the_agent_as_built() -> None:
    """A child under a narrower policy (its share of the parent's limits) runs a plan compiled
    for that policy from its own plan; its ``before_run`` hook gets the child agent as built,
    whose own policy is left as it was."""
    seen: list[tuple[object, int | None]] = []

    class Watch:
        def before_run(self, *, agent: Any, run_state: Any, **kw: Any) -> None:
            seen.append((agent, agent.policy.usage_limits.max_requests))

    child, _ = researcher([text("found it")], hooks=[Watch()])
    plan = child._plan
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "dig"}), text("done")],
        tools=[child.as_tool(name="research", description="Research a question.")],
        policy=Policy(usage_limits=UsageLimits(max_requests=3)),
    )
    assert parent.run_sync("Go.").output == "done"
    assert seen == [(child, None)]
    assert child._plan is plan


def test_children_of_one_turn_share_the_parents_budget() -> None:
    """Two children run concurrently: together they get what the parent has left, not each."""
    first, first_model = researcher([tool_call("lookup", {"query": "q"})] * 10)
    second, second_model = researcher([tool_call("lookup", {"query": "q"})] * 10)
    parent, parent_model, _ = make_agent(
        [
            tool_calls(("one", {"task": "a"}), ("two", {"task": "b"})),
            text("never reached"),
        ],
        tools=[
            first.as_tool(name="one", description="First researcher."),
            second.as_tool(name="two", description="Second researcher."),
        ],
        policy=Policy(usage_limits=UsageLimits(max_requests=5), parallel_tool_calls=True),
    )
    result = parent.run_sync("Go.")
    assert parent_model.calls + first_model.calls + second_model.calls == 5
    assert result.model_calls == 5


def test_token_limit_is_shared() -> None:
    """The child's tokens count against the parent's token cap."""
    child, child_model = researcher([tool_call("lookup", {"query": "q"})] * 10)
    parent, parent_model, _ = make_agent(
        [tool_call("research", {"task": "dig"}), text("never reached")],
        tools=[child.as_tool(name="research", description="Research a question.")],
        policy=Policy(usage_limits=UsageLimits(max_total_tokens=45)),  # 15 per call
    )
    result = parent.run_sync("Go.")
    assert parent_model.calls + child_model.calls == 3
    assert result.usage.total_tokens == 45
    assert result.stop_reason is StopReason.USAGE_LIMIT


def test_child_abort_is_a_tool_result_the_parent_acts_on() -> None:
    """A child aborted by a model error gives an error result; the parent's model goes on."""
    child, _ = researcher([fail(AuthenticationError("bad key"))])
    parent, parent_model, _ = make_agent(
        [tool_call("research", {"task": "dig"}), text("I could not research it.")],
        tools=[child.as_tool(name="research", description="Research a question.")],
    )
    result = parent.run_sync("Go.")
    assert result.ok and result.output == "I could not research it."
    (call_result,) = results_of(result)
    assert call_result.is_error
    assert "AgentToolError" in call_result.content and "model_error" in call_result.content
    assert "bad key" in call_result.content
    assert parent_model.requests[1].messages[-1].parts[0] == call_result


def test_child_step_limit_is_a_tool_result_with_its_last_answer() -> None:
    """A child that runs out of steps stops; the result says so and carries its summary."""
    child, _ = researcher(
        [tool_call("lookup", {"query": "q"}), text("partial: q found")],
        policy=Policy(max_steps=1),
    )
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "dig"}), text("fine")],
        tools=[child.as_tool(name="research", description="Research a question.")],
    )
    result = parent.run_sync("Go.")
    assert result.ok
    (call_result,) = results_of(result)
    assert call_result.is_error and "max_steps" in call_result.content
    assert "partial: q found" in call_result.content


def test_child_abort_fails_the_parent_under_fail_mode() -> None:
    """Under tool_failure_mode="fail" a child's stop aborts the parent, with the cause kept."""
    child, _ = researcher([fail(AuthenticationError("bad key"))])
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "dig"})],
        tools=[child.as_tool(name="research", description="Research a question.")],
        policy=Policy(tool_failure_mode="fail"),
    )
    result = parent.run_sync("Go.")
    assert result.state is State.ABORTED and result.stop_reason is StopReason.TOOL_ERROR
    assert isinstance(result.error.__cause__, AgentToolError)  # type: ignore[union-attr]


def test_cancelling_the_parent_cancels_the_child() -> None:
    """A cancel of the parent while the child's tool runs ends both runs: the child's tool is
    cut off, and the parent ends cancelled with the call's result saying so."""
    started = asyncio.Event()
    cut: list[bool] = []

    @tool
    async def slow(query: str) -> str:
        """Take forever."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cut.append(True)
            raise
        return "never"

    child, child_model, _ = make_agent(
        [tool_call("slow", {"query": "q"}), text("no")], tools=[slow]
    )
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "dig"}), text("no")],
        tools=[child.as_tool(name="research", description="Research a question.")],
    )
    handle = RunHandle()

    async def main() -> Any:
        run = asyncio.create_task(parent.run("Go.", handle=handle))
        await started.wait()
        handle.cancel()
        return await run

    result = asyncio.run(main())
    assert cut == [True]
    assert result.stop_reason is StopReason.CANCELLED
    assert child_model.calls == 1
    (call_result,) = results_of(result)
    assert call_result.is_error and "interrupted" in call_result.content


def test_a_listened_parents_cancel_reaches_the_child_at_its_next_move() -> None:
    """Cancelling a streamed parent from one of the child's events stops the child before its
    next model call."""
    child, child_model = researcher([tool_call("lookup", {"query": "q"})] * 5)
    parent, parent_model, _ = make_agent(
        [tool_call("research", {"task": "dig"}), text("no")],
        tools=[child.as_tool(name="research", description="Research a question.")],
    )

    def cancel_on_child_result(event: Any, handle: RunHandle) -> None:
        if isinstance(event, ChildEvent) and isinstance(event.event, ToolResultEvent):
            handle.cancel()

    _, result = stream(parent, on_event=cancel_on_child_result)
    assert child_model.calls == 1 and parent_model.calls == 1
    assert result.stop_reason is StopReason.CANCELLED


def test_the_parents_deadline_reaches_the_child() -> None:
    """The child's wall clock is the parent's time left: a child whose tool spends it stops at
    its next move, and the parent stops on its deadline."""
    clock = VirtualClock()

    @tool
    async def spend(query: str) -> str:
        """Spend ten seconds."""
        await clock.sleep(10)
        return "spent"

    child, child_model, _ = make_agent(
        [tool_call("spend", {"query": "q"})] * 5, tools=[spend], clock=clock
    )
    parent, parent_model, _ = make_agent(
        [tool_call("research", {"task": "dig"}), text("no")],
        tools=[child.as_tool(name="research", description="Research a question.")],
        policy=Policy(max_wall_clock_s=5),
        clock=clock,
    )
    result = parent.run_sync("Go.")
    assert child_model.calls == 1 and parent_model.calls == 1
    assert result.stop_reason is StopReason.TIMEOUT
    (call_result,) = results_of(result)
    assert call_result.is_error and "timeout" in call_result.content


def test_child_events_are_nested_under_the_parents_call() -> None:
    """In the parent's stream, the child's events come between the call and its result, each
    wrapped with the call id, the child's run id and depth 1; the stream's only terminal event
    is the parent's."""
    child, _ = researcher([tool_call("lookup", {"query": "x"}), text("x is 42")])
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "find x"}, id="c1"), text("done")],
        tools=[child.as_tool(name="research", description="Research a question.")],
    )
    events, result = stream(parent)
    call_at = next(i for i, e in enumerate(events) if isinstance(e, ToolCallEvent))
    result_at = next(i for i, e in enumerate(events) if isinstance(e, ToolResultEvent))
    nested = [e for e in events if isinstance(e, ChildEvent)]
    assert nested and all(call_at < events.index(e) < result_at for e in nested)
    assert {(e.run_id, e.call_id, e.depth, e.tool_name) for e in nested} == {
        (result.run_id, "c1", 1, "research")
    }
    (child_run,) = {e.child_run_id for e in nested}
    assert child_run != result.run_id
    assert all(e.event.run_id == child_run for e in nested)
    assert isinstance(nested[-1].event, FinalEvent) and nested[-1].event.output == "x is 42"
    assert [type(e) for e in events].count(FinalEvent) == 1 and isinstance(events[-1], FinalEvent)


def test_grandchild_events_carry_depth_two() -> None:
    """A child's own child: its events reach the top stream with depth 2, under the child."""
    grandchild, _ = researcher([text("deep fact")])
    child, _, _ = make_agent(
        [tool_call("dig", {"task": "deeper"}), text("fact: deep fact")],
        tools=[grandchild.as_tool(name="dig", description="Dig deeper.")],
    )
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "find"}), text("done")],
        tools=[child.as_tool(name="research", description="Research a question.")],
    )
    events, result = stream(parent)
    nested = [e for e in events if isinstance(e, ChildEvent)]
    children = {e.child_run_id for e in nested if e.depth == 1}
    deep = [e for e in nested if e.depth == 2]
    assert deep and {e.run_id for e in deep} == children
    assert isinstance(deep[-1].event, FinalEvent) and deep[-1].event.output == "deep fact"
    assert result.output == "done"


def test_child_events_of_concurrent_calls_come_before_their_results() -> None:
    """With parallel tool calls, each child's events reach the stream when the turn's calls
    end, before the machine moves out of dispatching."""
    first, _ = researcher([text("a")])
    second, _ = researcher([text("b")])
    parent, _, _ = make_agent(
        [tool_calls(("one", {"task": "a"}), ("two", {"task": "b"})), text("done")],
        tools=[
            first.as_tool(name="one", description="First researcher."),
            second.as_tool(name="two", description="Second researcher."),
        ],
        policy=Policy(parallel_tool_calls=True),
    )
    events, result = stream(parent)
    finals = [e for e in events if isinstance(e, ChildEvent) and isinstance(e.event, FinalEvent)]
    assert sorted(e.tool_name for e in finals) == ["one", "two"]
    turn_end = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, StateChangedEvent) and e.source is State.DISPATCHING
    )
    assert all(events.index(e) < turn_end for e in finals)
    assert result.output == "done"


def test_an_agent_tool_outside_a_run_is_an_error_result() -> None:
    """Called by hand, outside an agent's run, the tool answers with an error saying why."""
    child, child_model = researcher([text("x")])
    built = child.as_tool(name="research", description="Research a question.")
    from fsm_agent.messages import ToolCall

    context: ToolContext[None] = ToolContext(run_id="r", call_id="c", step=0, deps=None)
    execution = asyncio.run(built.execute(ToolCall.create("c", "research", {"task": "t"}), context))
    assert execution.result.is_error and "inside an agent's run" in execution.result.content
    assert child_model.calls == 0


def test_a_child_with_a_checkpointer_is_refused(tmp_path: Any) -> None:
    """A child is saved in its parent's store, never one of its own: as_tool refuses a child
    with a checkpointer."""
    child = Agent(
        ScriptedModel([]),
        checkpointer=SQLiteCheckpointer(str(tmp_path / "runs.db")),
        runtime=Runtime(),
    )
    with pytest.raises(ConfigurationError, match="checkpointer"):
        child.as_tool(name="research", description="Research a question.")


def test_an_agent_tool_needs_a_description() -> None:
    """The parent's model picks tools by their descriptions: an empty one is refused."""
    child, _ = researcher([])
    with pytest.raises(ConfigurationError, match="description"):
        child.as_tool(name="research", description=" ")


def test_a_listener_that_leaves_during_the_child_ends_both_runs() -> None:
    """Closing the parent's stream at one of the child's events unwinds the child and the
    parent where they stand: no error, and neither makes another model call."""
    child, child_model = researcher([tool_call("lookup", {"query": "q"})] * 5)
    parent, parent_model, _ = make_agent(
        [tool_call("research", {"task": "dig"}), text("no")],
        tools=[child.as_tool(name="research", description="Research a question.")],
    )

    async def main() -> None:
        events = parent.run_stream("Go.")
        async for event in events:
            if isinstance(event, ChildEvent) and isinstance(event.event, ToolCallEvent):
                break
        await events.aclose()  # type: ignore[attr-defined]

    asyncio.run(main())
    assert child_model.calls == 1 and parent_model.calls == 1


def test_a_childs_invocation_span_is_under_the_parents_tool_span() -> None:
    """Observed by the same OpenTelemetry hooks, the child's invoke_agent span is a child of
    the parent's execute_tool span for the call, in the parent's trace."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fsm_agent.observability import OpenTelemetryHooks, trace_id_of

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hooks = OpenTelemetryHooks(tracer_provider=provider)
    child, _ = researcher([text("x is 42")], hooks=[hooks])
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "find x"}), text("done")],
        tools=[child.as_tool(name="research", description="Research a question.")],
        hooks=[hooks],
    )
    result = parent.run_sync("Go.")
    spans = exporter.get_finished_spans()
    (tool_span,) = [s for s in spans if s.name == "execute_tool research"]
    invocations = [s for s in spans if s.name.startswith("invoke_agent")]
    (child_span,) = [
        s
        for s in invocations
        if s.parent is not None
        and s.parent.span_id
        == (
            tool_span.context.span_id  # type: ignore[union-attr]
        )
    ]
    assert child_span.attributes is not None
    assert child_span.attributes["fsm_agent.run_id"] != result.run_id
    assert {s.context.trace_id for s in spans} == {trace_id_of(result.run_id)}  # type: ignore[union-attr]


def test_a_child_observed_alone_is_a_trace_of_its_own() -> None:
    """Hooks on the child only: its span cannot nest under an unseen call, and it keeps the
    trace its own run id gives."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fsm_agent.observability import OpenTelemetryHooks, trace_id_of

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    child, _ = researcher([text("x is 42")], hooks=[OpenTelemetryHooks(tracer_provider=provider)])
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "find x"}), text("done")],
        tools=[child.as_tool(name="research", description="Research a question.")],
    )
    parent.run_sync("Go.")
    (child_span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke")]
    assert child_span.attributes is not None
    child_run = str(child_span.attributes["fsm_agent.run_id"])
    assert child_span.context.trace_id == trace_id_of(child_run)  # type: ignore[union-attr]
