"""A child's time: the call of an agent tool is cut off at the tool's ``timeout_s`` or the
child's own ``max_wall_clock_s``, never at the parent's per-tool default; and the composed
wall-clock bound counts each tool run of the parent once, as long as its longest call, so a
run that takes every call's worst time comes close to it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from fsm_agent import Agent, Policy, RetryPolicy, tool
from fsm_agent.kernel.composition import AgentTool
from fsm_agent.messages import ModelRequest, ModelResponse
from fsm_agent.testing import ScriptedModel, Turn, text, tool_call, tool_calls

NO_RETRY = RetryPolicy(max_retries=0)


class SlowModel(ScriptedModel):
    """A scripted model whose every call takes ``delay_s`` seconds."""

    def __init__(self, turns: list[Turn], delay_s: float) -> None:
        super().__init__(turns)
        self.delay_s = delay_s

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Wait ``delay_s``, then play the next turn."""
        await asyncio.sleep(self.delay_s)
        return await super().complete(request)


def _writer(researcher: Agent[Any, Any], timeout_s: float | None = None) -> Agent[Any, Any]:
    return Agent(
        ScriptedModel([tool_call("research", {"task": "Why tides?"}, id="r1"), text("Done.")]),
        tools=[researcher.as_tool(name="research", description="Research.", timeout_s=timeout_s)],
        policy=Policy(tool_timeout_s=0.2),
    )


def _research_result(result: Any) -> str:
    (found,) = [r for m in result.messages for r in m.tool_results if r.call_id == "r1"]
    return str(found.content)


def test_a_child_is_not_cut_at_the_parents_per_tool_timeout() -> None:
    """A child with no time limit of its own, called by a parent whose tool_timeout_s is
    0.2 s, answers after 0.4 s: the parent's per-tool default is not the child's limit."""
    researcher = Agent(SlowModel([text("Tides follow the moon.")], delay_s=0.4))
    result = asyncio.run(_writer(researcher).run("Write on tides."))
    assert _research_result(result) == "Tides follow the moon."


def test_a_child_is_cut_at_its_tools_timeout_or_its_own_wall_clock() -> None:
    """The tool's timeout_s cuts the call; so does the child's own max_wall_clock_s."""
    slow = Agent(SlowModel([text("Tides follow the moon.")], delay_s=0.4))
    cut = asyncio.run(_writer(slow, timeout_s=0.1).run("Write on tides."))
    assert _research_result(cut) == "Error: tool 'research' timed out after 0.1 s"
    limited = Agent(
        SlowModel([text("Tides follow the moon.")], delay_s=0.4),
        policy=Policy(max_wall_clock_s=0.1),
    )
    stopped = _research_result(asyncio.run(_writer(limited).run("Write on tides.")))
    assert "research" in stopped and "Tides follow the moon." not in stopped


MODEL_S = 0.12  # the model-call time the bound assumes; the models below take 0.1 s
TOOL_S = 0.12


def _orchestrator() -> tuple[Agent[Any, Any], list[str]]:
    """Three specialists, each one tool call then an answer, called by an orchestrator in two
    parallel turns (two, then one) until its step limit."""
    done: list[str] = []

    @tool
    async def work(topic: str) -> str:
        """Work on a topic (takes 0.1 s)."""
        await asyncio.sleep(0.1)
        done.append(topic)
        return f"worked on {topic}"

    specialists = [
        Agent(
            SlowModel([tool_call("work", {"topic": name}), text(f"{name}: done")], 0.1),
            tools=[work],
            policy=Policy(
                max_steps=2,
                max_tool_calls=1,
                retry=NO_RETRY,
                summarize_on_max_steps=False,
                tool_timeout_s=TOOL_S,
            ),
        ).as_tool(name=name, description=f"The {name} specialist.")
        for name in ("law", "tax", "audit")
    ]
    orchestrator = Agent(
        SlowModel(
            [
                tool_calls(("law", {"task": "Check."}), ("tax", {"task": "Check."})),
                tool_calls(("audit", {"task": "Check."})),
            ],
            0.1,
        ),
        tools=specialists,
        policy=Policy(
            max_steps=2,
            max_tool_calls=3,
            retry=NO_RETRY,
            summarize_on_max_steps=False,
            tool_timeout_s=TOOL_S,
        ),
    )
    return orchestrator, done


def test_the_composed_wall_clock_bound_counts_a_parallel_turn_once() -> None:
    """The orchestrator's bound is its own 2 model calls plus its 2 parallel tool turns, each
    as long as one specialist's worst time (2 model calls and 1 tool run): not the three
    specialists' times added on top of its own tool time."""
    orchestrator, _ = _orchestrator()
    specialist = 2 * MODEL_S + 1 * TOOL_S
    bound = orchestrator.bounds(model_timeout_s=MODEL_S)
    assert bound.max_wall_clock_s == pytest.approx(2 * MODEL_S + 2 * specialist)
    assert "2 parallel turns × 0.36 s (the child 'law', its worst time)" in (
        bound.wall_clock_derivation
    )


def test_a_run_that_takes_every_worst_time_comes_close_to_the_bound() -> None:
    """A run whose calls each take 0.1 s of the 0.12 s the bound assumes, in the orchestrator's
    worst shape (two parallel tool turns, every specialist its full work), takes at least
    three quarters of the bound and never more."""
    orchestrator, done = _orchestrator()
    bound = orchestrator.bounds(model_timeout_s=MODEL_S).max_wall_clock_s
    assert bound is not None
    started = time.perf_counter()
    result = asyncio.run(orchestrator.run("Review the contract."))
    took = time.perf_counter() - started
    assert sorted(done) == ["audit", "law", "tax"] and result.model_calls == 2 + 3 * 2
    assert 0.75 * bound <= took <= bound, (took, bound)


def test_a_tools_timeout_shorter_than_the_childs_worst_time_bounds_the_call() -> None:
    """as_tool(timeout_s=...) shorter than the child's worst time is what one call of it
    counts in the parent's bound, and the derivation says so."""
    orchestrator, _ = _orchestrator()
    law = orchestrator.tools["law"]
    assert isinstance(law, AgentTool)
    quick = Agent(
        ScriptedModel([]),
        tools=[law.agent.as_tool(name="law", description="Law.", timeout_s=0.2)],
        policy=orchestrator.policy,
    )
    bound = quick.bounds(model_timeout_s=MODEL_S)
    assert bound.max_wall_clock_s == pytest.approx(2 * MODEL_S + 2 * 0.2)
    assert "0.2 s (the child 'law', its tool's timeout_s)" in bound.wall_clock_derivation
