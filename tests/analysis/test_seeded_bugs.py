"""Seeded bugs: known-bad policies, tables and hooks that `check` and `fuzz` must each catch,
with a minimal counterexample. They prove that both checkers can fail.

Two of the bugs cannot be written as a `Policy` (validation refuses an unbounded verification
or retry budget), so they are planted as a custom `AgentMachine` table whose row ignores the
budget; `check` explores that table and `fuzz` runs the real kernel on it. A hook cannot be
seen by `check`, which only knows the table: there the re-enqueueing hook is planted as the
move it causes (`dispatching --tools_done--> dispatching`, the tool turn re-run without a
model turn), while `fuzz` runs the real hook.
"""

from __future__ import annotations

from typing import Any

import pytest

from fsm_agent import ModelResponse, Policy, RetryPolicy
from fsm_agent.fuzzing import FuzzReport, InvariantViolation, fuzz
from fsm_agent.machine.checker import FailureKind, check
from seeded_bugs import (
    ENDLESS_REJECTION,
    ENDLESS_RETRY,
    FEW_REQUESTS,
    NO_STEP_LIMIT,
    REENQUEUED_TOOLS,
    On,
    S,
    always_rejecting_verifier_agent,
    never_stopping_agent,
    reenqueueing_hook_agent,
    unlimited_retry_agent,
)


def _caught(report: FuzzReport, invariants: set[int], max_turns: int) -> None:
    """The fuzzer found a violation of one of ``invariants``, shrunk to at most ``max_turns``
    scripted turns, printed as a test that reproduces it."""
    failure = report.failure
    assert failure is not None, report.format()
    assert failure.invariant in invariants, failure.error
    assert len(failure.case.script) <= max_turns, failure.case.source()
    namespace: dict[str, Any] = {}
    exec(compile(failure.test_source, "<counterexample>", "exec"), namespace)
    with pytest.raises(InvariantViolation):
        namespace["test_fuzz_counterexample"]()


# -- check catches each -------------------------------------------------------------------------
def test_check_catches_an_always_rejecting_verifier_with_no_budget() -> None:
    """check: rejections that ignore the verification budget loop forever (shortest lasso)."""
    report = check(
        Policy(max_steps=2, max_compaction_attempts=0),
        machine=ENDLESS_REJECTION,
        verification=True,
    )
    failure = next(f for f in report.failures if f.kind is FailureKind.NON_TERMINATION)
    assert failure.loop_from is not None
    assert failure.path[failure.loop_from :] == (
        (S.VERIFYING, On.REJECTED),
        (S.COMPACTING, On.PROCEED),
        (S.CALLING, On.STOP),
    )


def test_check_catches_a_hook_that_reenqueues_tool_calls() -> None:
    """check: a tool turn that re-runs without a model turn is a one-move endless loop."""
    report = check(FEW_REQUESTS, machine=REENQUEUED_TOOLS)
    failure = next(f for f in report.failures if f.kind is FailureKind.NON_TERMINATION)
    assert failure.path == (
        (S.IDLE, On.START),
        (S.COMPACTING, On.PROCEED),
        (S.CALLING, On.TOOL_CALLS),
        (S.DISPATCHING, On.TOOLS_DONE),
    )
    assert failure.loop_from == 3


def test_check_catches_a_stop_condition_that_never_fires() -> None:
    """check: max_steps=None with only a wall-clock limit has a cycle no counter ends."""
    report = check(NO_STEP_LIMIT)
    assert not report.proven
    failure = next(f for f in report.failures if f.kind is FailureKind.NON_TERMINATION)
    assert len(failure.path) == 3  # idle, compacting, then calling --length--> compacting


def test_check_catches_a_retry_policy_with_no_limit() -> None:
    """check: retrying without the can_retry guard never ends (a one-move loop)."""
    report = check(Policy(max_steps=2, retry=RetryPolicy(max_retries=2)), machine=ENDLESS_RETRY)
    failure = next(f for f in report.failures if f.kind is FailureKind.NON_TERMINATION)
    retries = ((S.CALLING, On.RETRYABLE_ERROR),) * 3  # the counter stops at the limit + 1
    assert failure.path == ((S.IDLE, On.START), (S.COMPACTING, On.PROCEED), *retries)
    assert failure.path[failure.loop_from :] == ((S.CALLING, On.RETRYABLE_ERROR),)


# -- fuzz catches each --------------------------------------------------------------------------
def test_fuzz_catches_an_always_rejecting_verifier_with_no_budget() -> None:
    """fuzz: the real kernel passes max_steps (invariants 2/9), shrunk to a few answers."""
    report = fuzz(always_rejecting_verifier_agent, examples=300, seed=0)
    _caught(report, {2, 9}, max_turns=3)


def test_fuzz_catches_a_hook_that_reenqueues_tool_calls() -> None:
    """fuzz: the hook's tool turns pass the bound (invariant 2) with an empty script."""
    report = fuzz(reenqueueing_hook_agent, examples=300, seed=0)
    _caught(report, {2}, max_turns=0)


def test_fuzz_catches_a_stop_condition_that_never_fires() -> None:
    """fuzz: a run that never ends is stopped and reported (invariant 1), shrunk to a
    repeating script of at most two turns, one of them a tool call."""
    report = fuzz(never_stopping_agent, examples=300, seed=0)
    _caught(report, {1}, max_turns=2)
    assert report.failure is not None
    assert report.failure.case.cycle
    assert any(
        isinstance(t, ModelResponse) and t.message.tool_calls for t in report.failure.case.script
    )


def test_fuzz_catches_a_retry_policy_with_no_limit() -> None:
    """fuzz: retries pass max_retries (invariants 2/9), shrunk to one repeating failure."""
    report = fuzz(unlimited_retry_agent, examples=300, seed=0)
    _caught(report, {2, 9}, max_turns=1)
    assert report.failure is not None
    assert report.failure.case.cycle
