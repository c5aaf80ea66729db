"""The parametric termination proof: one argument over the table, cross-checked by the explorer."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent import AgentMachine, Policy, RetryPolicy, UsageLimits
from fsm_agent.machine.bounds import bounds
from fsm_agent.machine.checker import CheckVerdict, FailureKind, check
from fsm_agent.machine.formulas import FORMULAS, FormulaError, evaluate, evaluate_all
from fsm_agent.machine.guards import Bound, Counter, Limits
from fsm_agent.machine.proof import BoundsAssertionError, assert_bounds, counterexample, prove
from fsm_agent.machine.table import TABLE, Outcome, State, Update
from fsm_agent.policy import limits_of
from seeded_bugs import ENDLESS_REJECTION, ENDLESS_RETRY, REENQUEUED_TOOLS
from strategies import policies

S, On = State, Outcome


def test_the_default_table_terminates_by_steps_then_model_switches_then_retries() -> None:
    """The built-in table is ranked by steps (the agent loop), then the moves down a fallback
    chain, then retries (between two steps or switches), relying on limits that are always set
    besides max_steps (max_total_errors, often None, is not needed)."""
    proof = prove()
    assert proof.terminates, "\n".join(proof.lines())
    assert [(m.counter, m.limit) for m in proof.measures] == [
        (Counter.STEPS, Bound.MAX_STEPS),
        (Counter.MODEL_SWITCHES, Bound.MAX_MODEL_SWITCHES),
        (Counter.RETRIES, Bound.MAX_RETRIES),
    ]
    assert proof.relies_on == (Bound.MAX_STEPS, Bound.MAX_RETRIES, Bound.MAX_MODEL_SWITCHES)
    assert proof.unreadable == ()


def test_an_unset_limit_the_proof_relies_on_is_named() -> None:
    """With max_steps=None the proof does not cover the policy, and says which limit is missing."""
    proof = prove()
    assert proof.covers(Limits())
    assert proof.unbounded_by(Limits(max_steps=None)) == (Bound.MAX_STEPS,)
    assert not proof.covers(Limits(max_steps=None))


@pytest.mark.parametrize(
    ("machine", "cycle"),
    [
        (ENDLESS_RETRY, (S.CALLING,)),
        (REENQUEUED_TOOLS, (S.DISPATCHING,)),
        (ENDLESS_REJECTION, (S.COMPACTING, S.CALLING, S.DISPATCHING, S.VERIFYING)),
    ],
    ids=["endless-retry", "reenqueued-tools", "endless-rejection"],
)
def test_a_planted_cycle_without_a_bounded_counter_is_rejected(
    machine: AgentMachine, cycle: tuple[State, ...]
) -> None:
    """Each seeded bug is rejected with its cycle, and the explorer agrees: it finds a
    non-terminating run of the same table (with the verifier where the cycle needs it)."""
    proof = prove(machine)
    assert not proof.terminates
    (stuck,) = proof.stuck
    assert stuck.states == cycle
    assert stuck.reasons
    report = check(Policy(max_steps=3), machine=machine, verification=True)
    assert report.verdict is CheckVerdict.VIOLATED
    assert any(f.kind is FailureKind.NON_TERMINATION for f in report.failures)
    path = counterexample(proof, machine)
    assert path and path[-1][0] in cycle  # the run ends going round the unranked cycle


def test_the_rejection_names_the_missing_guard_and_a_counterexample() -> None:
    """An unguarded retry row is named with the counter it advances and the limit no guard
    compares, and the explorer's shortest run loops on it."""
    proof = prove(ENDLESS_RETRY)
    text = "\n".join(proof.lines())
    assert "UNRANKED cycle through calling" in text
    assert "retries: rows" in text and "bounds it by max_retries (add the guard there)" in text
    path = counterexample(proof, ENDLESS_RETRY)
    assert path[:2] == ((S.IDLE, On.START), (S.COMPACTING, On.PROCEED))
    assert set(path[2:]) == {(S.CALLING, On.RETRYABLE_ERROR)}


def test_a_cycle_ranked_only_by_a_counter_it_resets_is_rejected() -> None:
    """A counter reset inside the cycle is no measure: a tools_done row that resets steps makes
    the loop unranked."""
    reset = Update(Counter.STEPS, reset=True)
    rows = [
        dataclasses.replace(r, updates=(*r.updates, reset))
        if (r.source, r.outcome) == (S.DISPATCHING, On.TOOLS_DONE) and r.guard is not None
        else r
        for r in TABLE
    ]
    proof = prove(AgentMachine(rows))
    assert not proof.terminates
    assert any("steps: reset on rows" in reason for s in proof.stuck for reason in s.reasons)


@settings(max_examples=40, deadline=None)
@given(
    base=policies(),
    verification=st.booleans(),
    unbounded=st.booleans(),
    models=st.integers(1, 3),
)
def test_the_proof_agrees_with_the_explorer_on_small_policies(
    base: Policy, verification: bool, unbounded: bool, models: int
) -> None:
    """DESIGN §8.1 for every policy at once: where the parametric proof covers a policy, the
    explorer proves it too and its worst run makes exactly the closed-form number of calls;
    where the proof needs a limit the policy leaves unset, the explorer proves termination only
    through the driver's request limit."""
    policy = Policy.model_validate(
        {
            **base.model_dump(),
            "max_steps": None if unbounded else base.max_steps,
            "usage_limits": {"max_requests": 3 if unbounded and verification else None},
            "max_wall_clock_s": 1.0 if unbounded else None,
        }
    )
    proof = prove()
    report = check(policy, verification=verification, models=models, max_states=200_000)
    if proof.covers(limits_of(policy, verification=verification, models=models)):
        assert report.proven, report.format()
        assert report.longest_path_model_calls == bounds(policy, models=models).max_model_calls
    else:
        assert policy.max_steps is None
        assert report.proven is (policy.usage_limits.max_requests is not None)


def test_assert_bounds_passes_and_fails_in_one_line() -> None:
    """The pytest helper returns the bounds when they hold and explains when they do not."""
    assert assert_bounds(Policy(max_steps=3), max_model_calls=19).max_model_calls == 19
    with pytest.raises(BoundsAssertionError, match="19 model calls, more than 10"):
        assert_bounds(Policy(max_steps=3), max_model_calls=10)
    with pytest.raises(BoundsAssertionError, match="max_steps"):
        assert_bounds(Policy(max_steps=None, usage_limits=UsageLimits(max_requests=4)))
    retry = RetryPolicy(max_retries=0)
    assert assert_bounds(Policy(max_steps=2, retry=retry), max_tool_turns=2).max_tool_turns == 2


@settings(max_examples=200, deadline=None)
@given(
    base=policies(),
    steps=st.none() | st.integers(1, 50),
    requests=st.none() | st.integers(1, 400),
    total_errors=st.none() | st.integers(1, 30),
    summarize=st.booleans(),
    models=st.integers(1, 4),
)
def test_the_printed_formulas_evaluate_to_the_closed_form_bounds(
    base: Policy,
    steps: int | None,
    requests: int | None,
    total_errors: int | None,
    summarize: bool,
    models: int,
) -> None:
    """The formulas `check` prints, evaluated as written, give the numbers of bounds() for every
    policy, unbounded limits included (invariant §8.2's bound, stated once)."""
    strategies = ["summarize", "sliding_window"] if summarize else ["sliding_window"]
    policy = Policy.model_validate(
        {
            **base.model_dump(),
            "max_steps": steps,
            "max_total_errors": total_errors,
            "usage_limits": {"max_requests": requests},
            "max_wall_clock_s": 1.0,  # a policy with neither limit needs one
            "compaction": {**base.compaction.model_dump(), "strategies": strategies},
        }
    )
    computed = bounds(policy, models=models)
    assert evaluate_all(policy, models=models) == {
        "model calls": computed.max_model_calls,
        "tool turns": computed.max_tool_turns,
        "tool executions": computed.max_tool_executions,
    }


def test_a_formula_reads_only_its_own_small_language() -> None:
    """None is infinite (min ignores it, 0 × it is 0, it is ≥ anything); other syntax and
    unknown names are errors."""
    values = {"a": 3.0, "n": math.inf}
    assert evaluate("min(a, n) + 0 * n + (n >= a)", values) == 4
    assert evaluate("a * n - 1", values) is None
    with pytest.raises(FormulaError, match="unknown name"):
        evaluate("b + 1", values)
    with pytest.raises(FormulaError, match="unsupported syntax"):
        evaluate("a / 2", values)
    assert set(FORMULAS) == {"model calls", "tool turns", "tool executions"}
