"""A composition under a durable parent: the child is saved in the parent's store as a run of its
own, linked to the parent's call, and a crash after any write resumes both without running the
child's tool twice."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fsm_agent import Agent, RunFinishedError, RunResult, Runtime, UnknownRunError, tool
from fsm_agent.kernel.durable_child import child_run_id
from fsm_agent.messages import ModelRequest, ModelResponse, Role, ToolResult
from fsm_agent.persistence import InMemoryCheckpointer
from fsm_agent.testing import CrashingCheckpointer, SimulatedCrash, text, tool_call

PARENT_ID = "run_parent"


class RuleModel:
    """A model that answers by the request, not by a script position (a crash may cut a call
    short and have it asked again): a tool call first, the answer once a tool result is in."""

    name = "rule"
    context_window = None

    def __init__(self, call: tuple[str, dict[str, Any], str], answer: str) -> None:
        self.call = call
        self.answer = answer
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The tool call, or the answer after a tool result."""
        self.calls += 1
        await asyncio.sleep(0)
        if request.messages[-1].role is Role.TOOL:
            return text(self.answer)  # type: ignore[return-value]
        name, args, call_id = self.call
        return tool_call(name, args, id=call_id)  # type: ignore[return-value]


class World:
    """The parent and its child, and the charges the child's tool made (the outside world a
    crash does not reset)."""

    def __init__(self) -> None:
        self.charges: list[int] = []

        @tool
        def charge(amount: int) -> str:
            """Charge the customer (not idempotent)."""
            self.charges.append(amount)
            return f"charged {amount}"

        self.child = Agent(
            RuleModel(("charge", {"amount": 5}, "c1"), "charged 5"),
            tools=[charge],
            runtime=Runtime(),
        )
        self.parent = Agent(
            RuleModel(("pay", {"task": "Charge 5."}, "p1"), "paid"),
            tools=[self.child.as_tool(name="pay", description="Take a payment.")],
            checkpointer=InMemoryCheckpointer(),
            runtime=Runtime(new_id=lambda: PARENT_ID),
        )


def test_the_child_is_saved_as_a_run_linked_to_the_parents_call() -> None:
    """Without a crash: the child's run is in the parent's store under the id its call gives,
    ended with its answer."""
    world = World()
    result = world.parent.run_sync("Pay 5.")
    assert result.ok and result.output == "paid"
    store = world.parent.checkpointer
    assert store is not None
    (dispatch,) = [m for m in result.trace if m.source.value == "dispatching"]
    child = store.load(child_run_id(PARENT_ID, dispatch.counters.steps, "p1")).state
    assert child.output == "charged 5"
    assert {r.run_id for r in store.runs()} == {PARENT_ID, child.run_id}


def _writes() -> int:
    world = World()
    counting = CrashingCheckpointer(InMemoryCheckpointer(), crash_after=10**9, at="any")
    world.parent.checkpointer = counting
    world.parent.run_sync("Pay 5.")
    return counting.writes


@pytest.mark.parametrize("crash_after", range(1, _writes() + 1))
def test_a_crash_after_any_write_resumes_parent_and_child(crash_after: int) -> None:
    """Crash after write ``n`` (the parent's or the child's), resume the parent: the same
    answer, the child's run resumed from its own checkpoints, its tool run at most once."""
    world = World()
    inner = InMemoryCheckpointer()
    world.parent.checkpointer = CrashingCheckpointer(inner, crash_after, at="any")
    with pytest.raises(SimulatedCrash):
        world.parent.run_sync("Pay 5.")
    world.parent.checkpointer = inner
    try:
        result = asyncio.run(world.parent.resume(PARENT_ID))
    except UnknownRunError:  # the crash came before the parent's first checkpoint
        result = world.parent.run_sync("Pay 5.")
    except RunFinishedError:  # the crash came after the last write
        result = RunResult.of(inner.load(PARENT_ID).state)
    assert result.ok and result.output == "paid"
    assert len(world.charges) <= 1
    (call_result,) = [p for m in result.messages if m.role is Role.TOOL for p in m.parts]
    assert isinstance(call_result, ToolResult)
    assert call_result.content == "charged 5"  # the child's answer, not "outcome unknown"
    assert len(inner.runs()) == 2
