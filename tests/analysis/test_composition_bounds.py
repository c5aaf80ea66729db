"""The bounds of an agent with children: its worst case includes each child's worst case times
the most times it can be called; the bound holds for any script and some script reaches it."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import Agent, Policy, ProviderServerError, RetryPolicy, UsageLimits, tool
from fsm_agent.machine.bounds import ChildBounds, bounds
from fsm_agent.testing import ScriptedModel, Turn, fail, text, tool_call, tool_calls
from helpers import make_agent

ROOT = Path(__file__).resolve().parents[2]
NO_RETRY = RetryPolicy(max_retries=0)


class Counted:
    """A lookup tool that counts its executions, in every agent that holds it."""

    def __init__(self) -> None:
        self.runs = 0

        @tool
        def lookup(query: str) -> str:
            """Look something up."""
            self.runs += 1
            return f"found {query}"

        self.tool = lookup


def pair(
    parent_turns: list[Turn],
    child_turns: list[Turn],
    *,
    parent_policy: Policy,
    child_policy: Policy,
) -> tuple[Agent[Any, Any], ScriptedModel, ScriptedModel, Counted]:
    lookup = Counted()
    child, child_model, _ = make_agent(child_turns, tools=[lookup.tool], policy=child_policy)
    parent, parent_model, _ = make_agent(
        parent_turns,
        tools=[lookup.tool, child.as_tool(name="research", description="Research.")],
        policy=parent_policy,
    )
    return parent, parent_model, child_model, lookup


CHILD = Policy(max_steps=2, max_tool_calls=1, retry=NO_RETRY)
PARENT = Policy(max_steps=2, max_tool_calls=2, retry=NO_RETRY, parallel_tool_calls=False)


def test_composed_bound_adds_each_childs_worst_case_per_call() -> None:
    """Own 3 calls and 2 executions, plus 2 executions × the child's 3 calls and 1 execution."""
    parent, _, _, _ = pair([], [], parent_policy=PARENT, child_policy=CHILD)
    computed = parent.bounds()
    assert (computed.max_model_calls, computed.max_tool_executions) == (9, 4)
    assert computed.model_calls_derivation == (
        "3 of its own + 2 tool executions × 3 (the worst of the child 'research') = 9"
    )


def test_composed_bound_is_reached_by_a_scripted_run() -> None:
    """A run whose every turn calls tools and whose children each spend their budget makes
    exactly the bound's model calls and tool executions."""
    child_turns = [tool_call("lookup", {"query": "q"}), tool_call("lookup", {"query": "r"})]
    parent, parent_model, child_model, lookup = pair(
        [
            tool_calls(("research", {"task": "a"}), ("research", {"task": "b"})),
            tool_call("lookup", {"query": "over the limit"}),
            text("summary"),
        ],
        [*child_turns, text("child summary")] * 2,
        parent_policy=PARENT,
        child_policy=CHILD,
    )
    computed = parent.bounds()
    result = parent.run_sync("Go.")
    assert parent_model.calls + child_model.calls == computed.max_model_calls == 9
    assert result.model_calls == 9
    assert result.tool_executions == computed.max_tool_executions == 4  # the children's counted
    assert lookup.runs == 2


def test_shared_request_limit_caps_the_composition() -> None:
    """The parent's max_requests caps its children's calls too: the bound is the limit, and a
    run that would go past it stops there."""
    policy = PARENT.model_copy(update={"usage_limits": UsageLimits(max_requests=5)})
    child_turns = [tool_call("lookup", {"query": "q"}), tool_call("lookup", {"query": "r"})]
    parent, parent_model, child_model, _ = pair(
        [
            tool_calls(("research", {"task": "a"}), ("research", {"task": "b"})),
            text("summary"),
        ],
        [*child_turns, text("child summary")] * 2,
        parent_policy=policy,
        child_policy=CHILD,
    )
    computed = parent.bounds()
    assert computed.max_model_calls == 5
    assert "usage_limits.max_requests=5, shared with the children" in (
        computed.model_calls_derivation
    )
    parent.run_sync("Go.")
    assert parent_model.calls + child_model.calls == 5


def test_children_make_the_bound_unbounded_without_max_tool_calls() -> None:
    """Without max_tool_calls a child may be called any number of times: no bound, and the
    derivation names the setting that would give one."""
    parent, _, _, _ = pair(
        [], [], parent_policy=Policy(max_steps=2, retry=NO_RETRY), child_policy=CHILD
    )
    computed = parent.bounds()
    assert computed.max_model_calls is None
    assert "Policy.max_tool_calls" in computed.model_calls_derivation


def test_grandchildren_count_through_their_parent() -> None:
    """A child's bound already includes its own children's, so a grandchild counts twice over."""
    lookup = Counted()
    grandchild, _, _ = make_agent([], tools=[lookup.tool], policy=CHILD)
    child, _, _ = make_agent(
        [], tools=[grandchild.as_tool(name="dig", description="Dig.")], policy=CHILD
    )
    parent, _, _ = make_agent(
        [], tools=[child.as_tool(name="research", description="Research.")], policy=PARENT
    )
    assert child.bounds().max_model_calls == 3 + 1 * 3
    assert parent.bounds().max_model_calls == 3 + 2 * (3 + 1 * 3)


def test_the_wall_clock_bound_counts_each_tool_call_as_its_longest_tool() -> None:
    """Each tool call of the parent takes at most its longest tool's time, here the child's
    worst time (longer than tool_timeout_s), counted once per call, not on top of it; the
    parent's own limit caps the sum."""
    child_bound = bounds(CHILD, model_timeout_s=10)
    composed = bounds(PARENT, model_timeout_s=10, children=[ChildBounds("c", child_bound)])
    assert child_bound.max_wall_clock_s == 60.0 > PARENT.tool_timeout_s
    assert composed.max_wall_clock_s == 3 * 10 + 2 * 60.0
    capped = PARENT.model_copy(update={"max_wall_clock_s": 50.0})
    limited = bounds(capped, model_timeout_s=10, children=[ChildBounds("c", child_bound)])
    assert limited.max_wall_clock_s == 50.0
    assert "shared with the children" in limited.wall_clock_derivation


def _random_turns(rng: random.Random, tools: list[str], count: int) -> list[Turn]:
    turns: list[Turn] = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.1:
            turns.append(text("answer"))
        elif kind < 0.2:
            turns.append(fail(ProviderServerError("scripted 503")))
        else:
            names = [rng.choice(tools) for _ in range(rng.randint(1, 3))]
            turns.append(tool_calls(*((name, _args(name, rng)) for name in names)))
    return turns


def _args(name: str, rng: random.Random) -> dict[str, str]:
    return {"task" if name == "research" else "query": f"{rng.random()}"}


@pytest.mark.parametrize("seed", range(40))
def test_composed_bound_holds_for_random_scripts(seed: int) -> None:
    """Whatever the models answer (tool calls, answers, failures that are retried), parent
    and child together stay within the composed bound."""
    rng = random.Random(seed)
    retry = RetryPolicy(max_retries=1, base_delay_s=0.0, jitter=0.0)
    child_policy = Policy(max_steps=3, max_tool_calls=2, retry=retry)
    parent_policy = Policy(
        max_steps=3, max_tool_calls=3, retry=retry, parallel_tool_calls=rng.random() < 0.5
    )
    lookup = Counted()
    child, child_model, _ = make_agent(
        _random_turns(rng, ["lookup"], 60), tools=[lookup.tool], policy=child_policy
    )
    parent, parent_model, _ = make_agent(
        _random_turns(rng, ["lookup", "research"], 12),
        tools=[lookup.tool, child.as_tool(name="research", description="Research.")],
        policy=parent_policy,
    )
    computed = parent.bounds()
    result = parent.run_sync("Go.")
    assert computed.max_model_calls is not None and computed.max_tool_executions is not None
    assert parent_model.calls + child_model.calls <= computed.max_model_calls
    assert result.tool_executions <= computed.max_tool_executions  # the child's included


def test_check_prints_the_composed_bound_of_the_example() -> None:
    """``fsm-agent check --agent`` on the writer example prints the pair's bound, its
    derivation, and the researcher's own."""
    import subprocess

    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "fsm_agent",
            "check",
            "--agent",
            "writer_researcher:writer",
            "--model-timeout",
            "60",
        ],
        cwd=ROOT / "examples",
        env={"PYTHONPATH": str(ROOT), "PATH": "", "PYTHONIOENCODING": "utf-8"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert "for this agent and its children, with the derivations:" in out
    assert (
        "model calls              20  usage_limits.max_requests=20, shared with the children "
        "(9 of its own + 2 tool executions × 7 (the worst of the child 'research') = 23)"
    ) in out
    assert "the child 'research', called at most 2 times in a run:" in out


def _fuzzed_pair(model: Any) -> Agent[Any, Any]:
    """A parent and a child on one fuzzed model: the child's generated turns make it loop,
    fail, abort or answer, as the parent's do."""
    lookup = Counted()
    child = Agent(model, tools=[lookup.tool], policy=Policy(max_steps=2, max_tool_calls=1))
    return Agent(
        model,
        tools=[lookup.tool, child.as_tool(name="research", description="Research.")],
        policy=Policy(max_steps=3, max_tool_calls=3, parallel_tool_calls=False),
    )


def test_the_fuzzer_finds_no_violation_in_a_composition() -> None:
    """Under the fuzzer, children that never stop, abort or run out of budget leave every run
    invariant intact: the composed bound holds (invariant 2) and the usage, the children's
    included, adds up (invariant 7)."""
    from fsm_agent.fuzzing import fuzz

    report = fuzz(_fuzzed_pair, examples=150, seed=0)
    assert report.failure is None, report.format()
    assert report.examples == 150


class _ReachingPair:
    """A parent (its own counted lookup) and a child (a counted search) on one fuzzed model,
    without retries, so that a generated script can spend every budget."""

    def __init__(self) -> None:
        self.parent_tool, self.child_tool = Counted(), Counted()

    def __call__(self, model: Any) -> Agent[Any, Any]:
        child = Agent(
            model,
            tools=[self.child_tool.tool],
            policy=Policy(max_steps=2, max_tool_calls=1, retry=NO_RETRY),
        )
        return Agent(
            model,
            tools=[self.parent_tool.tool, child.as_tool(name="research", description="Research.")],
            policy=Policy(max_steps=2, max_tool_calls=2, retry=NO_RETRY, parallel_tool_calls=False),
        )


def test_the_fuzzers_generator_yields_a_script_that_reaches_the_composed_bound() -> None:
    """Among the cases the fuzzer generates for a composition (its seed-0 stream, read as
    ``fsm-agent fuzz`` reads it), one makes exactly the composed bound's model calls and tool
    executions, the children's counted, and keeps every invariant."""
    from fsm_agent.fuzzing import check_case
    from fsm_agent.fuzzing.decoding import Choices, read_case
    from fsm_agent.fuzzing.engine import definitions_of, example_bytes

    make = _ReachingPair()
    definitions = definitions_of(make)
    computed = make(ScriptedModel([])).bounds()
    worst = (computed.max_model_calls, computed.max_tool_executions)
    assert worst == (3 + 2 * 3, 2 + 2 * 1)
    reached = []
    for index in range(2000):
        make.child_tool.runs = 0
        record = check_case(read_case(Choices(example_bytes(0, index)), definitions), make)
        done = (record.result.model_calls, record.result.tool_executions)
        assert done[0] <= worst[0] and done[1] <= worst[1]
        if done == worst:
            reached.append(index)
            break
    assert reached, f"no generated case of the first 2000 reaches {worst}"


EXPLORED_PAIRS = [
    (CHILD, PARENT),
    (
        Policy(max_steps=2, max_tool_calls=1),  # the default retries
        Policy(max_steps=3, max_tool_calls=2),
    ),
    (
        Policy(max_steps=3, retry=RetryPolicy(max_retries=1), summarize_on_max_steps=False),
        PARENT.model_copy(update={"usage_limits": UsageLimits(max_requests=7)}),
    ),
]


@pytest.mark.parametrize(("child_policy", "parent_policy"), EXPLORED_PAIRS)
def test_the_explorer_finds_the_composed_bound(child_policy: Policy, parent_policy: Policy) -> None:
    """The exhaustive search over the parent's machine, each tool run a call of the child
    (itself explored), finds exactly the composed bound's model calls: the parametric proof
    and the explorer agree on a composition."""
    from fsm_agent.kernel.composition import AgentTool, explored_model_calls

    parent, _, _, _ = pair([], [], parent_policy=parent_policy, child_policy=child_policy)
    (child,) = [t.agent for t in parent.tools.values() if isinstance(t, AgentTool)]
    assert explored_model_calls(child) == child.bounds().max_model_calls
    assert explored_model_calls(parent) == parent.bounds().max_model_calls


def test_the_explorer_finds_the_bound_of_a_grandchild_composition() -> None:
    """Three levels (a parent, a child, a grandchild): explored and computed bounds agree,
    and a parent without max_tool_calls is unbounded for both."""
    from fsm_agent.kernel.composition import explored_model_calls

    grandchild, _, _ = make_agent([], policy=CHILD)
    child, _, _ = make_agent(
        [], tools=[grandchild.as_tool(name="dig", description="Dig.")], policy=CHILD
    )
    parent, _, _ = make_agent(
        [], tools=[child.as_tool(name="research", description="Research.")], policy=PARENT
    )
    assert explored_model_calls(parent) == parent.bounds().max_model_calls == 3 + 2 * (3 + 3)
    loose, _, _ = make_agent(
        [],
        tools=[child.as_tool(name="research", description="Research.")],
        policy=Policy(max_steps=2, retry=NO_RETRY),
    )
    assert explored_model_calls(loose) is None and loose.bounds().max_model_calls is None
