"""The agent's plan: compiled from what the user set, frozen, taken by each run when it starts."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from fsm_agent import Agent, Handoff, Policy, RunHandle, tool
from fsm_agent.events import ToolResultEvent
from fsm_agent.kernel.plan import handoff_plan, plan_of, with_policy
from fsm_agent.kernel.run import RunResult
from fsm_agent.testing import ScriptedModel, text, tool_call
from helpers import make_agent


def look(topic: str = "x") -> str:
    """Look a topic up."""
    return f"about {topic}"


def test_a_plan_is_frozen() -> None:
    """No field of a compiled plan can be assigned: a run reads it without copying it."""
    agent, _, _ = make_agent([text("hi")], tools=[look])
    with pytest.raises(dataclasses.FrozenInstanceError):
        agent._plan.policy = Policy(max_steps=1)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        agent._plan.tools = agent._plan.tools  # type: ignore[misc]


def test_a_new_policy_reaches_new_runs_and_a_run_in_flight_keeps_its_own() -> None:
    """A policy assigned while a run moves applies to the runs started after it; the run in
    flight asks its model under the policy it started with to its end."""
    turns = [tool_call("look"), text("first done"), tool_call("look"), text("second done")]
    agent, model, _ = make_agent(turns, tools=[look], policy=Policy(parallel_tool_calls=True))

    async def main() -> None:
        handle = RunHandle()
        async for event in agent.run_stream("go", handle=handle):
            if isinstance(event, ToolResultEvent):
                agent.policy = Policy(parallel_tool_calls=False, max_steps=3)
        assert handle.result is not None and handle.result.output == "first done"
        second = await agent.run("again")
        assert second.output == "second done"

    asyncio.run(main())
    asked = [request.parallel_tool_calls for request in model.requests]
    assert asked == [True, True, False, False]
    assert agent.policy.max_steps == 3 and agent._plan.limits.max_steps == 3


def test_the_definition_follows_every_policy_assigned() -> None:
    """The fingerprint checked on resume is the current policy's, however often the policy is
    replaced (a cache keyed by object ids could hand back a collected policy's)."""
    agent, _, _ = make_agent([], tools=[look])
    for steps in range(1, 40):
        agent.policy = Policy(max_steps=steps)
        fresh, _, _ = make_agent([], tools=[look], policy=Policy(max_steps=steps))
        assert agent._plan.definition == fresh._plan.definition


def test_a_plan_is_compiled_again_only_when_a_part_changes() -> None:
    """Runs started one after another share the agent's plan; ``with_effects`` with a new
    runtime only keeps it, with a tool adapter compiles its own and leaves the original's."""
    agent, _, _ = make_agent([text("a"), text("b")], tools=[look])
    plan = agent._plan
    agent.run_sync("one")
    agent.run_sync("two")
    assert agent._plan is plan
    assert agent.with_effects(runtime=agent.runtime)._plan is plan
    wrapped = agent.with_effects(wrap_tool=lambda tool: tool)
    assert wrapped._plan is not plan and agent._plan is plan


def test_a_plan_compiled_under_another_policy_is_the_agents_under_it() -> None:
    """``with_policy`` compiles a plan again from the parts it keeps: the same plan an agent
    built with that policy has, the original left as it was."""
    agent, _, _ = make_agent([], tools=[look], system_prompt="Be brief.")
    narrower = Policy(max_steps=2)
    plan = with_policy(agent._plan, narrower)
    built, _, _ = make_agent([], tools=[look], system_prompt="Be brief.", policy=narrower)
    assert plan.policy is narrower and plan.limits.max_steps == 2
    assert plan.definition == built._plan.definition != agent._plan.definition
    assert list(plan.tools) == list(agent._plan.tools)


def test_a_handoff_targets_plan_is_compiled_from_the_two_plans() -> None:
    """A handoff target's plan has the target's tools and prompt under the run's policy, is
    compiled once per run plan, again when the target's prompt changes, and the run's own
    agent taking the conversation back gets the run's plan itself."""
    billing, _, _ = make_agent([], tools=[look], system_prompt="You bill.")
    triage, _, _ = make_agent([], policy=Policy(max_steps=4))
    triage.handoffs = [Handoff(billing, name="billing", description="Refunds.")]
    origin = triage._plan
    plan = handoff_plan(origin, billing)
    assert plan.policy is origin.policy and plan.system_prompt == "You bill."
    assert "look" in plan.tools and "transfer_to_billing" not in plan.tools
    assert handoff_plan(origin, billing) is plan
    assert handoff_plan(origin, triage) is origin
    billing.system_prompt = "You refund."
    assert handoff_plan(origin, billing).system_prompt == "You refund."


def test_a_run_result_reads_its_run_state() -> None:
    """The result of a finished run carries its run state's values, and building it again
    from that run state gives an equal result."""
    agent, _, _ = make_agent([text("hi")])
    result = agent.run_sync("go")
    rs = result.run_state
    assert rs is not None
    for name in ("run_id", "stop_reason", "state", "usage", "counters", "model_calls"):
        assert getattr(result, name) == getattr(rs, name)
    assert result.messages == tuple(rs.messages) and result.trace == tuple(rs.trace)
    assert result.output == rs.output == "hi"
    assert RunResult.of(rs) == result


def test_a_new_system_prompt_reaches_the_model_of_later_runs() -> None:
    """Assigning ``system_prompt`` changes the system message the next runs send, and the
    definition their stored runs are checked against."""
    agent, model, _ = make_agent([text("a"), text("b")], system_prompt="Be brief.")
    before = agent._plan.definition
    agent.run_sync("one")
    agent.system_prompt = "Be thorough."
    agent.run_sync("two")
    firsts = [request.messages[0] for request in model.requests]
    assert [m.role.value for m in firsts] == ["system", "system"]
    assert [m.text for m in firsts] == ["Be brief.", "Be thorough."]
    assert agent._plan.definition != before


def test_a_definitions_fingerprint_is_the_one_stored_runs_hold() -> None:
    """The fingerprint of a given definition stays what earlier versions stored (a stored run
    resumes only under the same fingerprint), however it is computed."""

    @tool(idempotent=True)
    def lookup(order: str, limit: int = 3) -> str:
        """Look an order up."""
        return order

    agent = Agent(
        ScriptedModel([text("ok")]),
        tools=[lookup],
        system_prompt="Be brief.",
        policy=Policy(max_steps=7),
    )
    assert plan_of(agent).definition == (
        "tools=2bbd926a7b758bb8;system_prompt=fecef222d7732bb7;policy=88a3985efb948337"
    )


def test_agents_built_alike_share_the_immutable_parts_of_their_plans() -> None:
    """Agents built from equal policies and the same system prompt share their limits, loop
    settings and system message (a run reads parts every run reads, not cold copies); a
    different policy gets its own."""
    first = Agent(ScriptedModel([text("a")]), system_prompt="Be brief.", policy=Policy())
    second = Agent(ScriptedModel([text("b")]), system_prompt="Be brief.", policy=Policy())
    other = Agent(ScriptedModel([text("c")]), system_prompt="Be long.", policy=Policy(max_steps=3))
    one, two, three = plan_of(first), plan_of(second), plan_of(other)
    assert one.limits is two.limits and one.settings is two.settings
    assert one.system_message is two.system_message
    assert three.limits is not one.limits and three.limits.max_steps == 3
    assert three.system_message is not None and three.system_message.text == "Be long."
    assert first.run_sync("go").output == "a" and second.run_sync("go").output == "b"


def test_a_policy_that_cannot_be_hashed_still_builds_its_plan() -> None:
    """A policy holding an unhashable value (set around its constructor) is compiled on its
    own instead of shared."""
    policy = Policy(max_steps=4)
    object.__setattr__(policy.retry, "retryable_statuses", [429])  # what validation prevents
    agent = Agent(ScriptedModel([text("done")]), policy=policy)
    assert plan_of(agent).limits.max_steps == 4
    assert agent.run_sync("go").output == "done"
