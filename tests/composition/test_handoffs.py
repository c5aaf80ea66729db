"""Handoffs: an agent hands the conversation to another, which continues the same run under its
own prompt, tools and model; the run records who held it when, a crash mid-chain resumes under
the right agent, and the bounds, the explorer and the fuzzer cover the chain."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import (
    Agent,
    Approval,
    ConfigurationError,
    Handoff,
    HandoffError,
    Policy,
    RetryPolicy,
    State,
    StopReason,
    tool,
)
from fsm_agent.events import HandoffEvent, ToolResultEvent
from fsm_agent.kernel.composition import explored_model_calls
from fsm_agent.kernel.handoffs import without_tool_calls
from fsm_agent.messages import Message, Role
from fsm_agent.persistence.sqlite import SQLiteCheckpointer
from fsm_agent.testing import (
    ScriptedModel,
    crash_and_resume,
    resume_differences,
    text,
    tool_call,
    tool_calls,
)

NO_RETRY = RetryPolicy(max_retries=0)


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: paid twice"


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


def triage_and_billing(
    triage_turns: list[Any],
    billing_turns: list[Any],
    *,
    policy: Policy | None = None,
    back: bool = False,
    **handoff: Any,
) -> tuple[Agent[None, str], ScriptedModel, ScriptedModel]:
    """A triage agent that may hand off to billing (and billing back to triage when ``back``)."""
    billing_model = ScriptedModel(billing_turns)
    billing = Agent(billing_model, tools=[refund], system_prompt="You are billing.")
    triage_model = ScriptedModel(triage_turns)
    triage = Agent(
        triage_model,
        tools=[lookup],
        system_prompt="You are triage.",
        policy=policy,
        handoffs=[Handoff(billing, name="billing", description="Refunds.", **handoff)],
    )
    if back:
        billing.handoffs = [Handoff(triage, name="triage", description="Anything else.")]
    return triage, triage_model, billing_model


def test_the_target_continues_the_same_run_under_its_own_prompt_tools_and_model() -> None:
    """After the handoff the billing model answers with billing's prompt and tools, the run
    keeps its id, its history and its counters, and its state names billing as the holder."""
    triage, triage_model, billing_model = triage_and_billing(
        [tool_call("lookup", {"order": "A1"}), tool_call("transfer_to_billing", {})],
        [tool_call("refund", {"order": "A1"}), text("Refunded A1.")],
    )
    result = triage.run_sync("I was charged twice for A1.")
    assert result.output == "Refunded A1." and result.stop_reason is StopReason.COMPLETED
    assert len(triage_model.requests) == 2 and len(billing_model.requests) == 2
    first = billing_model.requests[0]
    assert first.messages[0] == Message.system("You are billing.")
    assert [t.name for t in first.tools] == ["refund"]
    assert [t.name for t in triage_model.requests[0].tools] == ["lookup", "transfer_to_billing"]
    assert any(m.text == "I was charged twice for A1." for m in first.messages)  # the same thread
    rs = result.run_state
    assert rs is not None and rs.agent == "billing" and result.model_calls == 4
    (change,) = rs.handoff_trace
    assert (change.source, change.dest, change.step) == (None, "billing", 2)
    assert rs.trace[change.move].source is State.DISPATCHING
    assert rs.trace[change.move].dest is State.COMPACTING  # the loop's own tools_done row


def test_a_listener_sees_the_handoff_after_the_calls_result() -> None:
    """The stream carries one handoff event, after the handoff call's result and before the
    target's first turn."""
    triage, _, _ = triage_and_billing([tool_call("transfer_to_billing", {})], [text("Done.")])

    async def main() -> list[Any]:
        return [event async for event in triage.run_stream("Refund A1.")]

    events = asyncio.run(main())
    handoffs = [e for e in events if isinstance(e, HandoffEvent)]
    assert [(e.source, e.dest, e.step) for e in handoffs] == [(None, "billing", 1)]
    at = events.index(handoffs[0])
    results = [i for i, e in enumerate(events) if isinstance(e, ToolResultEvent)]
    assert results and results[-1] < at
    assert getattr(events[results[-1]], "call_id", None) == handoffs[0].call_id
    after = [e.type for e in events[at:]]
    assert after.index("state_changed") < after.index("model_request")  # billing's turn next
    assert events[-1].type == "final"


def test_the_input_filter_chooses_what_the_target_sees() -> None:
    """With ``without_tool_calls`` the target's first request holds no tool call or result."""
    triage, _, billing_model = triage_and_billing(
        [tool_call("lookup", {"order": "A1"}), tool_call("transfer_to_billing", {})],
        [text("Refunded.")],
        input_filter=without_tool_calls,
    )
    result = triage.run_sync("Refund A1.")
    assert result.output == "Refunded."
    seen = billing_model.requests[0].messages
    assert [m.role for m in seen] == [Role.SYSTEM, Role.USER]
    assert not any(m.tool_calls or m.tool_results for m in seen)


def test_a_filter_that_leaves_an_answer_last_gives_the_target_its_turn() -> None:
    """Triage says something as it hands off; without its tool calls the conversation ends with
    that answer, which must not read as an answer cut short: the target is told it holds the
    conversation, and is never asked to continue triage's text."""
    from fsm_agent.kernel.handoffs import HANDED_OVER
    from fsm_agent.kernel.states.calling import CONTINUE_PROMPT

    triage, _, billing_model = triage_and_billing(
        [tool_call("transfer_to_billing", {}, text="You were charged twice.")],
        [text("Refunded.")],
        input_filter=without_tool_calls,
    )
    assert triage.run_sync("Refund A1.").output == "Refunded."
    seen = billing_model.requests[0].messages
    assert [m.text for m in seen[1:]] == [
        "Refund A1.",
        "You were charged twice.",
        HANDED_OVER.format(name="billing"),
    ]
    assert all(m.text != CONTINUE_PROMPT for m in seen)


@pytest.mark.parametrize(
    ("input_filter", "says"),
    [
        (lambda messages: 1 / 0, "raised ZeroDivisionError"),
        (lambda messages: [m for m in messages if m.role is not Role.TOOL], "invalid history"),
        (lambda messages: ["not a message"], "invalid history"),
    ],
)
def test_a_failing_input_filter_aborts_the_run_with_a_valid_history(
    input_filter: Any, says: str
) -> None:
    """A filter that raises or breaks the history ends the run ``tool_error`` with a
    HandoffError; the target never runs and every tool call keeps its one result."""
    triage, _, billing_model = triage_and_billing(
        [tool_call("lookup", {"order": "A1"}), tool_call("transfer_to_billing", {})],
        [text("never")],
        input_filter=input_filter,
    )
    result = triage.run_sync("Refund A1.")
    assert result.state is State.ABORTED and result.stop_reason is StopReason.TOOL_ERROR
    assert isinstance(result.error, HandoffError) and says in str(result.error)
    assert billing_model.requests == []
    rs = result.run_state
    assert rs is not None and rs.agent is None and rs.handoff_trace == ()
    calls = [c.id for m in rs.messages for c in m.tool_calls]
    results = [r.call_id for m in rs.messages for r in m.tool_results]
    assert calls == results


def test_max_handoffs_refuses_a_handoff_past_the_limit() -> None:
    """Triage and billing hand back and forth; with ``max_handoffs=2`` the third handoff call
    gets an error result, the conversation stays where it is and the run goes on."""
    triage, triage_model, billing_model = triage_and_billing(
        [tool_call("transfer_to_billing", {}), tool_call("transfer_to_billing", {})],
        [tool_call("transfer_to_triage", {}), text("Billing answers.")],
        policy=Policy(max_handoffs=2),
        back=True,
    )
    result = triage.run_sync("Help.")
    rs = result.run_state
    assert rs is not None
    moves = [(c.source, c.dest) for c in rs.handoff_trace]
    assert moves == [(None, "billing"), ("billing", "triage")]
    refused = [r for m in rs.messages for r in m.tool_results if r.is_error]
    assert len(refused) == 1 and "Policy.max_handoffs=2" in refused[0].content
    # Refused, the third call left triage holding the conversation: its model is asked next,
    # and its script is spent, so the run ends there.
    assert rs.agent == "triage" and len(triage_model.requests) == 3
    assert len(billing_model.requests) == 1


def test_one_handoff_per_turn() -> None:
    """Two handoff calls in one turn: the first hands off, the second gets an error result."""
    other = Agent(ScriptedModel([text("never")]))
    billing_model = ScriptedModel([text("Billing answers.")])
    triage = Agent(
        ScriptedModel(
            [tool_calls(("transfer_to_billing", {}), ("transfer_to_other", {}))],
        ),
        handoffs=[
            Handoff(Agent(billing_model), name="billing", description="Refunds."),
            Handoff(other, name="other", description="Other things."),
        ],
    )
    result = triage.run_sync("Help.")
    assert result.output == "Billing answers."
    rs = result.run_state
    assert rs is not None and [c.dest for c in rs.handoff_trace] == ["billing"]
    second = next(r for m in rs.messages for r in m.tool_results if r.name == "transfer_to_other")
    assert second.is_error and "one handoff per turn" in second.content


def test_a_suspended_run_resumes_under_the_agent_holding_the_conversation(
    tmp_path: Path,
) -> None:
    """Billing's tool waits for approval; a fresh triage agent resumes the stored run by its id
    and billing's model answers, under billing's prompt."""

    @tool(needs_approval=True)
    def refund_big(order: str) -> str:
        """Refund a large order."""
        return f"refunded {order}"

    def build(billing_turns: list[Any]) -> tuple[Agent[None, str], ScriptedModel]:
        billing_model = ScriptedModel(billing_turns)
        billing = Agent(billing_model, tools=[refund_big], system_prompt="You are billing.")
        store = SQLiteCheckpointer(tmp_path / "runs.db")
        triage = Agent(
            ScriptedModel([tool_call("transfer_to_billing", {})]),
            system_prompt="You are triage.",
            checkpointer=store,
            handoffs=[Handoff(billing, name="billing", description="Refunds.")],
        )
        return triage, billing_model

    triage, _ = build([tool_call("refund_big", {"order": "A1"})])
    suspended = triage.run_sync("Refund A1.")
    assert suspended.state is State.SUSPENDED
    assert suspended.run_state is not None and suspended.run_state.agent == "billing"
    again, billing_model = build([text("Refunded A1.")])
    handle = suspended.resume_handle
    assert handle is not None
    (call_id,) = [r.call.id for r in handle.requests]
    done = asyncio.run(again.resume(suspended.run_id, {call_id: Approval.allow()}))
    assert done.output == "Refunded A1."
    (request,) = billing_model.requests
    assert request.messages[0] == Message.system("You are billing.")
    assert [t.name for t in request.tools] == ["refund_big"]


def test_a_crash_anywhere_in_the_chain_resumes_to_the_same_result() -> None:
    """The run is stopped as a crash would after each of its store writes in turn, then
    resumed: every resumed run ends like the uninterrupted one, under billing."""

    def build() -> Agent[None, str]:
        triage, _, _ = triage_and_billing(
            [tool_call("lookup", {"order": "A1"}), tool_call("transfer_to_billing", {})],
            [tool_call("refund", {"order": "A1"}), text("Refunded A1.")],
        )
        return triage

    expected = build().run_sync("Refund A1.")
    crashed = 0
    for after in range(1, 40):
        result, crash = asyncio.run(crash_and_resume(build(), "Refund A1.", crash_after=after))
        if not crash:
            break
        crashed += 1
        assert resume_differences(expected, result) == [], after
        assert result.run_state is not None and result.run_state.agent == "billing"
    assert crashed >= 10  # the crashes covered the chain: before, at and after the handoff


def test_resuming_with_an_agent_that_does_not_declare_the_holder_is_refused(
    tmp_path: Path,
) -> None:
    """A run handed to 'billing' resumed by an agent without that handoff: a clear
    ConfigurationError naming it, not a run under the wrong agent, and the stored run is left
    as it was (the right agent resumes it afterwards)."""

    @tool(needs_approval=True)
    def refund_big(order: str) -> str:
        """Refund a large order."""
        return "refunded"

    store = SQLiteCheckpointer(tmp_path / "runs.db")
    billing = Agent(ScriptedModel([tool_call("refund_big", {"order": "A1"})]), tools=[refund_big])
    triage = Agent(
        ScriptedModel([tool_call("transfer_to_billing", {})]),
        checkpointer=store,
        handoffs=[Handoff(billing, name="billing", description="Refunds.")],
    )
    suspended = triage.run_sync("Refund A1.")
    lone = Agent(ScriptedModel([]), checkpointer=store)
    assert suspended.resume_handle is not None
    (request,) = suspended.resume_handle.requests
    with pytest.raises(ConfigurationError, match="'billing'"):
        asyncio.run(
            lone.resume(
                suspended.run_id, {request.call.id: Approval.allow()}, allow_changed_definition=True
            )
        )
    stored = store.load(suspended.run_id)
    assert stored is not None and stored.state.state is State.SUSPENDED
    billing.model = ScriptedModel([text("Refunded.")])
    billing.policy = billing.policy  # compiles the new model into its plan
    done = asyncio.run(triage.resume(suspended.run_id, {request.call.id: Approval.allow()}))
    assert done.output == "Refunded."


def test_declaring_handoffs_checks_them() -> None:
    """Bad declarations are refused when made, each with what to do."""
    billing = Agent(ScriptedModel([]))
    with pytest.raises(ConfigurationError, match="description"):
        Handoff(billing, name="billing", description=" ")
    with pytest.raises(ConfigurationError, match="letters, digits"):
        Handoff(billing, name="bill ing", description="x")
    with pytest.raises(ConfigurationError, match="Handoff values"):
        Agent(ScriptedModel([]), handoffs=[billing])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="must be a fsm_agent"):
        Agent(ScriptedModel([]), handoffs=[Handoff("billing", name="b", description="x")])  # type: ignore[arg-type]
    from fsm_agent.phases import Phase, Phases

    phased = Agent(ScriptedModel([]), phases=Phases([Phase("only")], [], goals=["only"]))
    with pytest.raises(ConfigurationError, match="phases cannot take a handoff"):
        Agent(ScriptedModel([]), handoffs=[Handoff(phased, name="p", description="x")])
    with pytest.raises(ConfigurationError, match="phases cannot hand off"):
        phased.handoffs = [Handoff(billing, name="billing", description="x")]
    typed = Agent(ScriptedModel([]), output_type=int)
    with pytest.raises(ConfigurationError, match="one type"):
        Agent(ScriptedModel([]), handoffs=[Handoff(typed, name="typed", description="x")])
    twin = Agent(ScriptedModel([]))
    a = Handoff(billing, name="billing", description="x")
    b = Handoff(twin, name="billing", description="y")
    with pytest.raises(ConfigurationError, match="two handoffs"):
        Agent(ScriptedModel([]), handoffs=[a, b])
    via = Handoff(Agent(ScriptedModel([]), handoffs=[b]), name="x", description="x")
    with pytest.raises(ConfigurationError, match="one agent in a handoff graph"):
        Agent(ScriptedModel([]), handoffs=[a, via]).bounds()


# -- bounds ------------------------------------------------------------------------------------


def test_a_cycle_of_handoffs_is_bounded_by_max_handoffs_and_the_bound_is_reached() -> None:
    """Triage and billing hand back and forth: the bound names the cycle and the limit, the
    explorer agrees on the model calls, and a script that spends everything reaches both."""
    policy = Policy(max_steps=4, max_handoffs=2, retry=NO_RETRY)
    triage, triage_model, _ = triage_and_billing(
        [tool_call("transfer_to_billing", {}), tool_call("lookup", {"order": "A1"})],
        [tool_call("transfer_to_triage", {})],
        policy=policy,
        back=True,
    )
    triage_model.turns.append(text("summary"))  # the step-limit summary call
    bound = triage.bounds()
    assert bound.max_handoffs == 2 and "Policy.max_handoffs=2" in bound.handoffs_derivation
    assert "a cycle of handoffs" in bound.handoffs_derivation
    assert bound.max_model_calls == 4 + 1 == explored_model_calls(triage)
    triage_model.turns.insert(2, tool_call("lookup", {"order": "A2"}))
    result = triage.run_sync("Help.")
    rs = result.run_state
    assert rs is not None and len(rs.handoff_trace) == bound.max_handoffs
    assert result.model_calls == bound.max_model_calls
    assert result.stop_reason is StopReason.MAX_STEPS
    assert any("handoffs" in line for line in bound.lines())


def test_without_max_handoffs_a_cycle_is_bounded_by_the_tool_turns() -> None:
    """No handoff limit: each handoff is a call of a tool turn, so max_steps bounds them."""
    triage, _, _ = triage_and_billing([], [], policy=Policy(max_steps=5), back=True)
    bound = triage.bounds()
    assert bound.max_handoffs == 5 and "one per tool turn (5)" in bound.handoffs_derivation


def test_an_acyclic_chain_is_bounded_by_its_longest_path() -> None:
    """triage -> billing -> refunds: at most 2 handoffs, whatever the steps."""
    refunds = Agent(ScriptedModel([]))
    billing = Agent(ScriptedModel([]), handoffs=[Handoff(refunds, name="refunds", description="x")])
    triage = Agent(
        ScriptedModel([]),
        policy=Policy(max_steps=50),
        handoffs=[Handoff(billing, name="billing", description="x")],
    )
    bound = triage.bounds()
    assert bound.max_handoffs == 2 and "longest chain" in bound.handoffs_derivation


def test_the_chain_bound_counts_the_targets_children_and_model_chain() -> None:
    """A child agent of the target, and the target's fallback chain, are part of the entry's
    bound (the explorer agrees): a chain is bounded as one run."""
    from fsm_agent import FallbackModel

    child = Agent(ScriptedModel([]), policy=Policy(max_steps=2, retry=NO_RETRY))
    billing = Agent(
        FallbackModel(ScriptedModel([]), ScriptedModel([])),
        tools=[child.as_tool(name="research", description="Research.")],
    )
    policy = Policy(max_steps=3, max_tool_calls=2, retry=RetryPolicy(max_retries=1))
    lone = Agent(ScriptedModel([]), policy=policy)
    triage = Agent(
        ScriptedModel([]),
        policy=policy,
        handoffs=[Handoff(billing, name="billing", description="x")],
    )
    alone, chained = lone.bounds(), triage.bounds()
    assert alone.max_model_calls is not None and chained.max_model_calls is not None
    # Two models: (3 + 1) × 1 retries + 1 switch; two research calls of 3 model calls each.
    assert chained.max_model_calls == 3 + 4 + 1 + 1 + 2 * 3
    assert chained.max_model_calls == explored_model_calls(triage)
    assert "research" in chained.model_calls_derivation


# -- the example and the fuzzer ----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_the_triage_example_runs_and_a_scripted_case_reaches_its_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/handoff_triage.py runs offline and prints the chain's bound; a script that
    fails before every turn and hands back and forth reaches its model calls, tool executions
    and handoffs exactly."""
    import runpy

    from fsm_agent.testing import fail

    example = runpy.run_path(str(ROOT / "examples" / "handoff_triage.py"))
    asyncio.run(example["main"]())
    out = capsys.readouterr().out
    assert "after turn 2: triage -> refunds" in out
    assert "handoffs                  2  Policy.max_handoffs=2; a cycle of handoffs" in out
    worst = example["build"](
        ScriptedModel(
            [
                fail(),
                tool_call("transfer_to_refunds", {}),
                fail(),
                tool_call("lookup_order", {"order": "1"}),
                fail(),
                tool_call("lookup_order", {"order": "2"}),
                text("summary"),
            ]
        ),
        ScriptedModel([fail(), tool_call("transfer_to_triage", {})]),
    )
    bound = worst.bounds()
    result = worst.run_sync("Help.")
    rs = result.run_state
    assert rs is not None and [c.dest for c in rs.handoff_trace] == ["refunds", "triage"]
    assert result.model_calls == bound.max_model_calls == 9
    assert result.tool_executions == bound.max_tool_executions == 4
    assert len(rs.handoff_trace) == bound.max_handoffs == 2


def test_the_fuzzer_hands_off_and_keeps_the_chain_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Generated scripts on a triage <-> billing pair call both agents' tools and the handoff
    tools; every run keeps the invariants, the chain's bound among them, and some hand off."""
    from fsm_agent.fuzzing import fuzz
    from fsm_agent.kernel import handover

    handed: list[str | None] = []
    enter = handover.enter_agent

    def entered(ctx: Any, name: str | None, agent: Any) -> None:
        handed.append(name)
        enter(ctx, name, agent)

    monkeypatch.setattr(handover, "enter_agent", entered)

    def make(model: Any) -> Agent[None, str]:
        billing = Agent(model, tools=[refund], system_prompt="You are billing.")
        triage = Agent(
            model,
            tools=[lookup],
            policy=Policy(max_steps=5, max_handoffs=2, max_tool_calls=6),
            handoffs=[Handoff(billing, name="billing", description="Refunds.")],
        )
        billing.handoffs = [Handoff(triage, name="triage", description="Back.")]
        return triage

    report = fuzz(make, examples=200, seed=3)
    assert report.ok, report.format()
    assert "billing" in handed


def test_adapting_the_model_of_an_agent_with_handoffs_is_refused() -> None:
    """``with_effects(model=...)`` (the durable engine's model steps) would leave the targets'
    model calls unadapted: refused with a clear error; tool adapters reach the targets' tools."""
    triage, _, billing_model = triage_and_billing(
        [tool_call("transfer_to_billing", {})], [tool_call("refund", {"order": "A1"}), text("ok")]
    )
    with pytest.raises(ConfigurationError, match="hands the conversation"):
        triage.with_effects(model=ScriptedModel([]))
    wrapped: list[str] = []

    def wrap(found: Any) -> Any:
        wrapped.append(found.name)
        return found

    assert triage.with_effects(wrap_tool=wrap).run_sync("Refund A1.").output == "ok"
    assert "refund" in wrapped and len(billing_model.requests) == 2


def test_the_drawing_shows_who_held_the_conversation_when(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handoff graph drawn with a run's trace: each agent once (a handoff back to the
    first agent lands on it), the handoffs made numbered in order, the holders coloured; the
    CLI writes it beside the agent's own drawing, with the bound."""
    from fsm_agent.cli import main
    from fsm_agent.diagrams.handoffs import handoffs_dot, handoffs_mermaid
    from fsm_agent.kernel.handoffs import declared_graph

    triage, _, _ = triage_and_billing(
        [tool_call("transfer_to_billing", {}), text("Triage answers.")],
        [tool_call("transfer_to_triage", {})],
        back=True,
    )
    result = triage.run_sync("Help.")
    assert result.run_state is not None
    graph = declared_graph(triage)
    assert graph == {"": ["billing"], "billing": ["triage"], "triage": ["billing"]}
    path = result.run_state.handoff_trace
    text_ = handoffs_mermaid(graph, path, entry="triage", aliases={"triage": ""})
    assert 'agent_start -- "transfer_to_billing #1" --> agent_billing' in text_
    assert 'agent_billing -- "transfer_to_triage #2" --> agent_start' in text_
    assert "class agent_billing visited" in text_ and "agent_triage" not in text_
    dot = handoffs_dot(graph, path, entry="triage", aliases={"triage": ""})
    assert 'agent_billing -> agent_start [label="transfer_to_triage #2"' in dot
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    assert main(["diagram", "--agent", "handoff_triage:triage", "-o", str(tmp_path / "t.mmd")]) == 0
    drawn = (tmp_path / "t-handoffs.mmd").read_text()
    assert 'agent_refunds -- "transfer_to_triage" --> agent_start' in drawn
    assert "Policy.max_handoffs=2" in drawn
