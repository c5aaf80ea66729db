"""Fan-out: the children one turn of a parent calls share what is left of the parent's usage
limits by an equal split, their events reach the parent's stream while they run, and the
result accounts for each of them."""

from __future__ import annotations

import asyncio
from typing import Any

from fsm_agent import Agent, Policy, RetryPolicy, StopReason, UsageLimits, tool
from fsm_agent.events import ChildEvent, Event, FinalEvent, ToolCallEvent, ToolResultEvent
from fsm_agent.messages import Role, ToolResult
from fsm_agent.testing import ScriptedModel, text, tool_call, tool_calls
from helpers import look, make_agent, stream

SPECIALISTS = ("legal", "finance", "tech")


def results_of(result: Any) -> list[ToolResult]:
    """The tool results in a run's history, in order."""
    return [
        part
        for message in result.messages
        if message.role is Role.TOOL
        for part in message.parts
        if isinstance(part, ToolResult)
    ]


def specialist(name: str, lookups: int = 1) -> tuple[Agent[Any, Any], ScriptedModel]:
    """A child that looks something up ``lookups`` times, then answers."""
    turns = [tool_call("look", {"topic": name})] * lookups + [text(f"{name}: fine")]
    child, model, _ = make_agent(turns, tools=[look])
    return child, model


def orchestrator(
    children: list[Agent[Any, Any]], policy: Policy, names: tuple[str, ...] = SPECIALISTS
) -> tuple[Agent[Any, Any], ScriptedModel]:
    """A parent that calls every child in one turn, then answers."""
    parent, model, _ = make_agent(
        [tool_calls(*[(n, {"task": f"review {n}"}) for n in names]), text("all reviewed")],
        tools=[
            c.as_tool(name=n, description=f"The {n} specialist.")
            for n, c in zip(names, children, strict=True)
        ],
        policy=policy,
    )
    return parent, model


def test_three_specialists_under_one_max_requests_all_run() -> None:
    """Under max_requests=12, a turn calling three specialists (two model calls each) runs all
    three: they split the 11 requests left, none takes them all."""
    built = [specialist(n) for n in SPECIALISTS]
    parent, _ = orchestrator(
        [c for c, _ in built], Policy(usage_limits=UsageLimits(max_requests=12))
    )
    result = parent.run_sync("Review the contract.")
    assert result.ok and result.output == "all reviewed"
    assert [r.content for r in results_of(result)] == [f"{n}: fine" for n in SPECIALISTS]
    assert [m.calls for _, m in built] == [2, 2, 2]
    assert result.model_calls == 8


def test_the_turns_children_get_equal_shares_of_what_is_left() -> None:
    """Children that would each spend every request they get are held to an equal share of
    the 11 left (4, 4 and 3), and the run's total is exactly the limit."""
    built = [specialist(n, lookups=20) for n in SPECIALISTS]
    parent, _ = orchestrator(
        [c for c, _ in built], Policy(usage_limits=UsageLimits(max_requests=12))
    )
    result = parent.run_sync("Review the contract.")
    assert sorted(m.calls for _, m in built) == [3, 4, 4]
    assert result.model_calls == 12
    first = results_of(result)[0].content
    assert "it was granted max_requests=4, an equal share of the 11 the run had left" in first
    assert "among the turn's 3 agent calls not yet started, and used 4" in first


def test_a_refused_child_is_told_what_was_asked_granted_and_used() -> None:
    """With two requests left for three children, the third is refused, and its result says
    what it asked for, what the run granted and what was used."""
    built = [specialist(n, lookups=20) for n in SPECIALISTS]
    parent, _ = orchestrator(
        [c for c, _ in built], Policy(usage_limits=UsageLimits(max_requests=3))
    )
    result = parent.run_sync("Review the contract.")
    assert sorted(m.calls for _, m in built) == [0, 1, 1]
    refused = [r for r in results_of(result) if "was not run" in r.content]
    assert len(refused) == 1 and refused[0].is_error
    message = refused[0].content
    assert "max_requests=3" in message
    assert "1 used" in message and "2 granted" in message
    assert "asks for no limit of its own" in message


PARALLEL_PARENT = Policy(
    max_steps=2,
    max_tool_calls=3,
    retry=RetryPolicy(max_retries=0),
    usage_limits=UsageLimits(max_requests=8),
)
CHILD = Policy(max_steps=2, max_tool_calls=1, retry=RetryPolicy(max_retries=0))


def test_parallel_children_reach_the_explored_composed_bound() -> None:
    """Three children called together under a shared max_requests=8 spend exactly what is
    left (3, 2 and 2 of 7): the run makes the composed bound's model calls, which the explorer
    finds too."""
    from fsm_agent.kernel.composition import explored_model_calls

    children = []
    for _ in SPECIALISTS:
        child, _, _ = make_agent(
            [tool_call("look", {"topic": "t"})] * 5, tools=[look], policy=CHILD
        )
        children.append(child)
    parent, _ = orchestrator(children, PARALLEL_PARENT)
    computed = parent.bounds().max_model_calls
    assert computed == explored_model_calls(parent) == 8
    result = parent.run_sync("Review.")
    assert result.model_calls == 8
    assert result.stop_reason is StopReason.USAGE_LIMIT


def _parallel_composition(model: Any) -> Agent[Any, Any]:
    """A parent calling two children in parallel turns under a shared max_requests, all on
    one fuzzed model."""
    child = Policy(max_steps=2, max_tool_calls=1)
    first = Agent(model, tools=[look], policy=child)
    second = Agent(model, tools=[look], policy=child)
    return Agent(
        model,
        tools=[
            look,
            first.as_tool(name="one", description="First researcher."),
            second.as_tool(name="two", description="Second researcher."),
        ],
        policy=Policy(
            max_steps=3,
            max_tool_calls=3,
            parallel_tool_calls=True,
            usage_limits=UsageLimits(max_requests=9),
        ),
    )


def test_the_fuzzer_finds_no_violation_in_a_parallel_composition() -> None:
    """Under the fuzzer, children called together in one turn and sharing the parent's
    max_requests keep every run invariant: the composed bound holds and the usage adds up."""
    from fsm_agent.fuzzing import fuzz

    report = fuzz(_parallel_composition, examples=150, seed=0)
    assert report.failure is None, report.format()
    assert report.examples == 150


def _parallel_pair(
    first_turns: list[Any], second_turns: list[Any], tools: list[Any]
) -> Agent[Any, Any]:
    """A parent that calls two children, ``one`` and ``two``, in one parallel turn."""
    first, _, _ = make_agent(first_turns, tools=tools)
    second, _, _ = make_agent(second_turns, tools=tools)
    parent, _, _ = make_agent(
        [tool_calls(("one", {"task": "a"}, "c1"), ("two", {"task": "b"}, "c2")), text("done")],
        tools=[
            first.as_tool(name="one", description="First researcher."),
            second.as_tool(name="two", description="Second researcher."),
        ],
    )
    return parent


def test_parallel_children_stream_their_events_while_they_run() -> None:
    """With parallel calls, a child's events reach the listener while it runs: the listener
    sees child one's tool call while that tool waits on the listener, and child two goes on."""
    release = asyncio.Event()

    @tool
    async def wait_for_listener(topic: str) -> str:
        """Wait until the listener has seen this call."""
        await release.wait()
        return f"seen {topic}"

    parent = _parallel_pair(
        [tool_call("wait_for_listener", {"topic": "t"}), text("a")],
        [tool_call("look", {"topic": "u"}), text("b")],
        [wait_for_listener, look],
    )
    events: list[Event] = []

    async def main() -> None:
        async for event in parent.run_stream("Go."):
            events.append(event)
            inner = event.event if isinstance(event, ChildEvent) else None
            if isinstance(inner, ToolCallEvent) and inner.tool_name == "wait_for_listener":
                release.set()

    asyncio.run(asyncio.wait_for(main(), timeout=10))
    assert isinstance(events[-1], FinalEvent) and events[-1].output == "done"


def test_no_child_event_comes_after_its_calls_result() -> None:
    """With parallel calls, each child's events come between its call's tool_call and
    tool_result, and each carries its path from the listened run."""
    parent = _parallel_pair(
        [tool_call("look", {"topic": "t"}, id="l1"), text("a")],
        [tool_call("look", {"topic": "u"}, id="l2"), text("b")],
        [look],
    )
    events, _ = stream(parent)
    for call_id, name in (("c1", "one"), ("c2", "two")):
        called = next(
            i for i, e in enumerate(events) if isinstance(e, ToolCallEvent) and e.call_id == call_id
        )
        answered = next(
            i
            for i, e in enumerate(events)
            if isinstance(e, ToolResultEvent) and e.call_id == call_id
        )
        mine = [
            i for i, e in enumerate(events) if isinstance(e, ChildEvent) and e.call_id == call_id
        ]
        assert mine and all(called < i < answered for i in mine)
        assert {events[i].path for i in mine} == {(f"{name}:1.{call_id}",)}  # type: ignore[union-attr]


def test_a_grandchilds_events_carry_its_full_path() -> None:
    """A grandchild's events, under a child called in parallel, name both levels."""
    grandchild, _, _ = make_agent([text("deep")])
    child, _, _ = make_agent(
        [tool_call("dig", {"task": "deeper"}, id="g1"), text("found deep")],
        tools=[grandchild.as_tool(name="dig", description="Dig deeper.")],
    )
    other, _, _ = make_agent([text("other")])
    parent, _, _ = make_agent(
        [tool_calls(("research", {"task": "a"}, "c1"), ("other", {"task": "b"}, "c2")), text("ok")],
        tools=[
            child.as_tool(name="research", description="Research."),
            other.as_tool(name="other", description="Other."),
        ],
    )
    events, _ = stream(parent)
    deep = [e for e in events if isinstance(e, ChildEvent) and e.depth == 2]
    assert deep and {e.path for e in deep} == {("research:1.c1", "dig:1.g1")}
    result_at = next(
        i for i, e in enumerate(events) if isinstance(e, ToolResultEvent) and e.call_id == "c1"
    )
    assert all(events.index(e) < result_at for e in deep)


def test_tool_executions_count_the_childrens() -> None:
    """A parent that runs one child which looks something up twice reports three tool
    executions: its call of the child and the child's two."""
    child, _ = specialist("legal", lookups=2)
    parent, _, _ = make_agent(
        [tool_call("legal", {"task": "review"}), text("done")],
        tools=[child.as_tool(name="legal", description="The legal specialist.")],
    )
    result = parent.run_sync("Go.")
    assert result.tool_executions == 3
    assert result.own.tool_executions == 1


def test_the_result_accounts_for_each_child_by_path() -> None:
    """Each child and grandchild has its own entry, by path, with its model, usage, model
    calls and tool executions; the run's totals are its own plus every entry."""
    grandchild, _, _ = make_agent([tool_call("look", {"topic": "x"}), text("deep")], tools=[look])
    child, _, _ = make_agent(
        [tool_call("dig", {"task": "deeper"}, id="g1"), text("found deep")],
        tools=[grandchild.as_tool(name="dig", description="Dig deeper.")],
    )
    other, _ = specialist("other", lookups=3)
    parent, _, _ = make_agent(
        [tool_calls(("research", {"task": "a"}, "c1"), ("other", {"task": "b"}, "c2")), text("ok")],
        tools=[
            child.as_tool(name="research", description="Research."),
            other.as_tool(name="other", description="Other."),
        ],
    )
    result = parent.run_sync("Go.")
    children = result.children
    assert set(children) == {"research:1.c1", "research:1.c1/dig:1.g1", "other:1.c2"}
    assert (children["other:1.c2"].model_calls, children["other:1.c2"].tool_executions) == (4, 3)
    assert (children["research:1.c1"].model_calls, children["research:1.c1"].tool_executions) == (
        2,
        1,
    )
    deep = children["research:1.c1/dig:1.g1"]
    assert (deep.model_calls, deep.tool_executions, deep.model) == (2, 1, "scripted")
    assert (result.own.model_calls, result.own.tool_executions) == (2, 2)
    entries = [result.own, *children.values()]
    assert result.model_calls == sum(e.model_calls for e in entries) == 10
    assert result.tool_executions == sum(e.tool_executions for e in entries) == 7
    assert result.usage.total_tokens == sum(e.usage.total_tokens for e in entries)
    assert result.usage.requests == sum(e.usage.requests for e in entries)
    assert all(e.usage.total_tokens > 0 for e in entries)


def test_a_child_under_a_checkpointed_parent_stores_its_model(tmp_path: Any) -> None:
    """A child run saved in its checkpointed parent's store names its model, as the parent's
    run does."""
    from fsm_agent import SQLiteCheckpointer
    from fsm_agent.persistence.run_log import load_checkpoint

    store = SQLiteCheckpointer(str(tmp_path / "runs.db"))
    child, _ = specialist("legal")
    parent, _, _ = make_agent(
        [tool_call("legal", {"task": "review"}, id="c1"), text("done")],
        tools=[child.as_tool(name="legal", description="The legal specialist.")],
        checkpointer=store,
    )
    result = parent.run_sync("Go.")
    assert result.run_state is not None
    (child_run,) = result.run_state.child_runs.values()
    stored = asyncio.run(load_checkpoint(store, child_run)).state
    assert stored.model == "scripted" and stored.parent_run_id == result.run_id
    assert result.children["legal:1.c1"].model == "scripted"


def _exporter() -> tuple[Any, Any]:
    """An in-memory span exporter and the tracer provider that feeds it."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider


def _writer_and_researcher(parent_hooks: Any, child_hooks: Any) -> Agent[Any, Any]:
    child, _, _ = make_agent(
        [tool_call("look", {"topic": "x"}), text("x is 42")], tools=[look], hooks=[child_hooks]
    )
    parent, _, _ = make_agent(
        [tool_call("research", {"task": "find x"}), text("done")],
        tools=[child.as_tool(name="research", description="Research a question.")],
        hooks=[parent_hooks],
    )
    return parent


def test_one_hooks_object_names_each_agent_of_a_composition() -> None:
    """With one hooks object on writer and researcher, the child's invocation span carries the
    name its parent calls it by, the parent's the hooks' agent_name."""
    from fsm_agent.observability import OpenTelemetryHooks

    exporter, provider = _exporter()
    hooks = OpenTelemetryHooks(tracer_provider=provider, agent_name="writer")
    _writer_and_researcher(hooks, hooks).run_sync("Write.")
    names = sorted(
        str((s.attributes or {})["gen_ai.agent.name"])
        for s in exporter.get_finished_spans()
        if s.name.startswith("invoke_agent")
    )
    assert names == ["research", "writer"]


def test_a_child_with_hooks_of_its_own_nests_in_the_parents_trace() -> None:
    """With one hooks object each, the child's invocation span is still a child of the
    parent's execute_tool span, in the parent's trace."""
    from fsm_agent.observability import OpenTelemetryHooks, trace_id_of

    exporter, provider = _exporter()
    parent = _writer_and_researcher(
        OpenTelemetryHooks(tracer_provider=provider, agent_name="writer"),
        OpenTelemetryHooks(tracer_provider=provider, agent_name="researcher"),
    )
    result = parent.run_sync("Write.")
    spans = exporter.get_finished_spans()
    (tool_span,) = [s for s in spans if s.name == "execute_tool research"]
    (child_span,) = [s for s in spans if s.name == "invoke_agent research"]
    assert child_span.parent is not None
    assert child_span.parent.span_id == tool_span.context.span_id
    assert {s.context.trace_id for s in spans} == {trace_id_of(result.run_id)}


def test_invocation_spans_add_up_to_the_runs_usage_once() -> None:
    """Each invocation span's usage is its agent's own: summed over the composition's spans it
    is the run's usage, which the parent's span also gives as its total."""
    from fsm_agent.observability import OpenTelemetryHooks

    exporter, provider = _exporter()
    hooks = OpenTelemetryHooks(tracer_provider=provider)
    result = _writer_and_researcher(hooks, hooks).run_sync("Write.")
    runs = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    inputs = [int((s.attributes or {})["gen_ai.usage.input_tokens"]) for s in runs]
    assert sum(inputs) == result.usage.input_tokens
    (top,) = [s for s in runs if (s.attributes or {})["fsm_agent.run_id"] == result.run_id]
    attributes = top.attributes or {}
    assert attributes["fsm_agent.total.input_tokens"] == result.usage.input_tokens
    assert attributes["fsm_agent.total.model_calls"] == result.model_calls == 4
    assert attributes["fsm_agent.total.tool_executions"] == result.tool_executions == 2


def test_children_of_two_turns_with_one_call_id_have_their_own_entries() -> None:
    """Call ids repeat across turns (a provider numbers each answer's calls from one): each
    turn's child has its own entry, told apart by the parent's step."""
    turns = [tool_call("look", {"topic": "t"}), text("fine")]
    child, _, _ = make_agent(turns * 2, tools=[look])
    parent, _, _ = make_agent(
        [
            tool_call("legal", {"task": "first"}, id="c1"),
            tool_call("legal", {"task": "second"}, id="c1"),
            text("done"),
        ],
        tools=[child.as_tool(name="legal", description="The legal specialist.")],
    )
    result = parent.run_sync("Go.")
    assert set(result.children) == {"legal:1.c1", "legal:2.c1"}
    assert result.tool_executions == 4 and result.model_calls == 7


def test_a_listeners_cancel_on_a_parallel_childs_event_stops_every_child() -> None:
    """Cancelling the parent at a parallel child's event ends the turn's children there: no
    model call starts after the cancel, and the parent ends cancelled."""
    first, first_model, _ = make_agent([tool_call("look", {"topic": "t"})] * 5, tools=[look])
    second, second_model, _ = make_agent([tool_call("look", {"topic": "u"})] * 5, tools=[look])
    parent, parent_model, _ = make_agent(
        [tool_calls(("one", {"task": "a"}), ("two", {"task": "b"})), text("no")],
        tools=[
            first.as_tool(name="one", description="First researcher."),
            second.as_tool(name="two", description="Second researcher."),
        ],
    )
    at_cancel: list[int] = []

    def cancel_on_child_result(event: Event, handle: Any) -> None:
        if (
            not at_cancel
            and isinstance(event, ChildEvent)
            and isinstance(event.event, ToolResultEvent)
        ):
            at_cancel.append(first_model.calls + second_model.calls)
            handle.cancel()

    _, result = stream(parent, on_event=cancel_on_child_result)
    assert result.stop_reason is StopReason.CANCELLED
    assert at_cancel and first_model.calls + second_model.calls == at_cancel[0] <= 2
    assert parent_model.calls == 1
