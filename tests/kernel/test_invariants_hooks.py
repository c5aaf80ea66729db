"""Property tests: the DESIGN §8 invariants still hold with generated hooks (sync, async,
raising, hanging, wrong answers), approvals (allow / deny / ask, then resume), tool faults
(raising, hanging, asking a human), the loop guard and tool output limits."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import invariants
from fsm_agent import (
    Agent,
    FinishReason,
    Message,
    ModelResponse,
    Policy,
    RunHandle,
    Runtime,
    State,
    StopReason,
    ToolCall,
    ToolContext,
    tool,
)
from fsm_agent.approval import Approval
from fsm_agent.events import Event
from fsm_agent.hooks import MockResult, SkipTool
from fsm_agent.policy import ToolOutputSettings, limits_of
from fsm_agent.testing import ScriptedModel, Turn, VirtualClock, tool_call, tool_calls
from invariants import RunRecord, check_invariants
from strategies import TOOLS, policies, turns

# The kernel issue's invariants know the stop reasons of its own table; these two are new rows.
invariants.ABORT_REASONS.add(StopReason.HOOK_ERROR)
invariants.DONE_REASONS.add(StopReason.REPEATED_TOOL_CALLS)


@tool
def ask(ctx: ToolContext[None], question: str) -> str:
    """Ask the human."""
    ctx.ask_human(question or "?")


@tool(timeout_s=0.002)
async def hang() -> str:
    """Never answers in time."""
    await asyncio.sleep(1)
    return "late"


@tool(needs_approval=True)
def guarded(x: int) -> int:
    """Needs a human's approval."""
    return x


@tool
def big(n: int) -> str:
    """A long output."""
    return "z" * (n * 1_000)


FAULT_TOOLS = [*TOOLS, ask, hang, guarded, big]
_calls = st.one_of(
    st.tuples(st.just("ask"), st.fixed_dictionaries({"question": st.text(max_size=4)})),
    st.tuples(st.just("hang"), st.just({})),
    st.tuples(st.just("guarded"), st.fixed_dictionaries({"x": st.integers(0, 3)})),
    st.tuples(st.just("big"), st.fixed_dictionaries({"n": st.integers(0, 3)})),
    st.tuples(st.just("add"), st.just({"a": 1, "b": 1})),
)
fault_turns: st.SearchStrategy[Turn] = st.one_of(
    _calls.map(lambda c: tool_call(c[0], c[1])),
    st.lists(_calls, min_size=2, max_size=3).map(lambda cs: tool_calls(*cs)),
)
_repeats = st.tuples(_calls, st.integers(2, 4)).map(lambda r: [tool_call(*r[0])] * r[1])
scripts = st.lists(
    st.one_of(turns.map(lambda t: [t]), fault_turns.map(lambda t: [t]), _repeats), max_size=8
).map(lambda chunks: [turn for chunk in chunks for turn in chunk])

ACTIONS = ["none", "raise", "wrong", "hang", "change"]


@dataclass
class Generated:
    """Hooks whose behaviour at each call comes from drawn lists (cycled)."""

    model_calls: list[str]
    tool_calls: list[str]
    approvals: list[str]
    after_tools: list[str]
    transitions: list[str]
    counters: dict[str, itertools.cycle[str]] = field(default_factory=dict)

    def next(self, point: str) -> str:
        if point not in self.counters:
            self.counters[point] = itertools.cycle(getattr(self, point) or ["none"])
        return next(self.counters[point])

    async def before_model_call(self, *, request: Any, **kw: Any) -> Any:
        action = self.next("model_calls")
        if action == "raise":
            raise RuntimeError("before_model_call")
        if action == "wrong":
            return 42
        if action == "hang":
            await asyncio.sleep(1)
        if action == "change":
            return ModelResponse(
                message=Message.assistant("supplied"), finish_reason=FinishReason.STOP
            )
        return None

    def before_tool(self, *, call: ToolCall, **kw: Any) -> Any:
        action = self.next("tool_calls")
        if action == "raise":
            raise RuntimeError("before_tool")
        if action == "wrong":
            return "nope"
        if action == "hang":
            return MockResult("mocked")
        if action == "change":
            return SkipTool("skipped")
        return None

    async def approve_tool(self, **kw: Any) -> Any:
        action = self.next("approvals")
        return {
            "allow": Approval.allow(),
            "deny": Approval.deny("no"),
            "ask": Approval.ask("ok?"),
            "raise": None,
            "none": None,
        }[action]

    def after_tool(self, *, result: Any, **kw: Any) -> Any:
        action = self.next("after_tools")
        if action == "raise":
            raise RuntimeError("after_tool")
        if action == "change":
            return result.model_copy(update={"content": result.content + "!"})
        return None

    async def on_transition(self, **kw: Any) -> None:
        if self.next("transitions") == "raise":
            raise RuntimeError("on_transition")


hooks_strategy = st.builds(
    Generated,
    st.lists(st.sampled_from(ACTIONS), max_size=4),
    st.lists(st.sampled_from(ACTIONS), max_size=4),
    st.lists(st.sampled_from(["allow", "deny", "ask", "none"]), max_size=4),
    st.lists(st.sampled_from(["none", "raise", "change"]), max_size=4),
    st.lists(st.sampled_from(["none", "raise"]), max_size=4),
)


@st.composite
def hook_policies(draw: st.DrawFn) -> Policy:
    """The kernel's generated policies plus hook failure mode, timeouts, loop guard, limits."""
    base = draw(policies()).model_dump()
    return Policy.model_validate(
        {
            **base,
            "hook_failure_mode": draw(st.sampled_from(["continue", "continue", "fail"])),
            "hook_timeout_s": 0.002,
            "max_repeated_tool_calls": draw(st.none() | st.integers(2, 3)),
            "on_repeated_tool_calls": draw(st.sampled_from(["warn", "finalize"])),
            "tool_output": ToolOutputSettings(
                max_chars=1_000, keep_recent=draw(st.none() | st.integers(0, 2)), old_max_chars=5
            ),
        }
    )


def _decision(request: Any, choice: bool) -> Any:
    if request.kind == "question":
        return "answer"
    return True if choice else Approval.deny("human says no")


def run_with_resumes(
    script: list[Turn], policy: Policy, hooks: Generated, choices: list[bool]
) -> RunRecord:
    """Run, then resume every suspension with drawn decisions; one record of all events."""
    clock = VirtualClock()
    model = ScriptedModel(script)
    agent = Agent(
        model,
        tools=FAULT_TOOLS,
        system_prompt="You are tested.",
        policy=policy,
        hooks=[hooks],
        runtime=Runtime(sleep=clock.sleep, clock=clock.now),
    )
    events: list[Event] = []
    decisions = itertools.cycle(choices or [True])

    async def main() -> Any:
        handle = RunHandle()
        async for event in agent.run_stream("Do the task.", handle=handle):
            events.append(event)
        result = handle.result
        for _ in range(50):
            assert result is not None
            if result.state is not State.SUSPENDED:
                break
            assert result.resume_handle is not None
            events.pop()  # the suspended event ends an invocation, not the run
            answers = {
                r.call.id: _decision(r, next(decisions)) for r in result.resume_handle.requests
            }
            handle = RunHandle()
            async for event in agent.resume_stream(result.resume_handle, answers, handle=handle):
                events.append(event)
            result = handle.result
        return result

    result = asyncio.run(main())
    return RunRecord(
        result=result,
        events=events,
        model=model,
        policy=policy,
        limits=limits_of(policy, verification=False),
    )


@given(scripts, hook_policies(), hooks_strategy, st.lists(st.booleans(), max_size=4))
def test_invariants_hold_with_hooks_approvals_and_tool_faults(
    script: list[Turn], policy: Policy, hooks: Generated, choices: list[bool]
) -> None:
    """Invariants 1–9 over run + every resume: termination (no run stays suspended once each
    suspension is answered), bounded work, legal moves only, one ending, well-formed history
    at every request, stop reason agrees, usage adds up, counters within limits."""
    record = run_with_resumes(script, policy, hooks, choices)
    assert record.result.state is not State.SUSPENDED
    check_invariants(record)


@given(
    st.lists(st.one_of(_repeats, fault_turns.map(lambda t: [t])), max_size=5).map(
        lambda chunks: [turn for chunk in chunks for turn in chunk]
    ),
    hook_policies(),
    st.lists(st.sampled_from(["allow", "deny", "ask", "none"]), max_size=4),
    st.integers(2, 3),
    st.lists(st.booleans(), max_size=4),
)
def test_invariants_hold_with_the_loop_guard_and_approvals(
    script: list[Turn],
    policy: Policy,
    approvals: list[str],
    max_repeats: int,
    choices: list[bool],
) -> None:
    """The same invariants on scripts of repeated calls with the loop guard on (warn or
    finalize) and only permission hooks, so that the guard's rows are taken."""
    policy = Policy.model_validate(
        {**policy.model_dump(), "max_repeated_tool_calls": max_repeats, "max_steps": 8}
    )
    hooks = Generated([], [], approvals, [], [])
    record = run_with_resumes(script, policy, hooks, choices)
    assert record.result.state is not State.SUSPENDED
    check_invariants(record)
