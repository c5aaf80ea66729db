"""Policies: seed defaults, validation to PolicyError, serialisation, backoff maths."""

from __future__ import annotations

import math
import random

import pytest

from fsm_agent import Policy, PolicyError, RetryPolicy
from fsm_agent.policy import (
    CompactionSettings,
    ToolOutputSettings,
    UsageLimits,
    backoff_delay,
)


def test_defaults_come_from_the_seeds() -> None:
    """200 steps and 5 retries from 1 s to 60 s [S000 §1.1]; 3 consecutive errors [S002];
    3 compaction attempts [S001 §2]; 30 s tool timeout [S004]."""
    policy = Policy()
    assert policy.max_steps == 200
    assert (policy.retry.max_retries, policy.retry.base_delay_s, policy.retry.max_delay_s) == (
        5,
        1.0,
        60.0,
    )
    assert {429, 500, 502, 503, 504}.issubset(policy.retry.retryable_statuses)
    assert policy.max_consecutive_errors == 3
    assert policy.max_compaction_attempts == 3
    assert policy.tool_timeout_s == 30.0
    assert policy.require_done_tool is False


@pytest.mark.parametrize(
    "kind", [Policy, RetryPolicy, UsageLimits, CompactionSettings, ToolOutputSettings]
)
def test_the_unvalidated_defaults_are_the_validated_ones(kind: type[Policy]) -> None:
    """A policy's nested values start from their defaults without validation: the same value
    the constructor validates."""
    built = kind._defaults()
    assert built == kind() and type(built) is kind


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": -3}, "max_steps"),
        ({"max_steps": None}, "unbounded"),
        ({"tool_timeout_s": 0}, "tool_timeout_s"),
        ({"retry": {"base_delay_s": math.nan}}, "finite"),
        ({"retry": {"max_delay_s": -1}}, "max_delay_s"),
        ({"retry": {"base_delay_s": 90}}, "must not exceed"),
        ({"retry": {"max_retries": -1}}, "max_retries"),
        ({"max_stepz": 3}, "max_stepz"),
    ],
)
def test_invalid_values_raise_policy_error_saying_what_to_change(
    kwargs: dict[str, object], message: str
) -> None:
    """Invalid limits raise PolicyError (an FsmAgentError), naming the field."""
    with pytest.raises(PolicyError, match=message):
        Policy(**kwargs)  # type: ignore[arg-type]


def test_unbounded_steps_are_allowed_with_another_bound() -> None:
    """max_steps=None is fine when the wall clock or the request count bounds the run."""
    assert Policy(max_steps=None, max_wall_clock_s=60).max_steps is None
    assert Policy(max_steps=None, usage_limits={"max_requests": 10}).max_steps is None  # type: ignore[arg-type]


def test_policies_round_trip_through_json() -> None:
    """Policies are data: JSON out and back gives the same policy."""
    policy = Policy(max_steps=7, retry=RetryPolicy(max_retries=2), tool_failure_mode="fail")  # type: ignore[arg-type]
    assert Policy.model_validate_json(policy.model_dump_json()) == policy


def test_policies_are_immutable() -> None:
    """A policy cannot be changed after it is built (share it between agents safely)."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        Policy().max_steps = 3  # type: ignore[misc]


def test_backoff_doubles_with_jitter_and_caps() -> None:
    """Delays grow as base × 2^(n-1), jittered ± jitter, capped at max_delay_s."""
    retry = RetryPolicy(base_delay_s=1, max_delay_s=10, jitter=0.25)
    rng = random.Random(1)
    for attempt, base in [(1, 1), (2, 2), (3, 4), (4, 8)]:
        delay = backoff_delay(retry, attempt, None, rng)
        assert delay is not None and base * 0.75 <= delay <= base * 1.25
    assert (
        backoff_delay(retry, 10, None, rng) == pytest.approx(10, abs=0)
        or (backoff_delay(retry, 10, None, rng) or 0) <= 10
    )


def test_backoff_stays_capped_after_a_thousand_retries() -> None:
    """Retry number 1,025 and later (a budget of up to a million retries is valid) wait
    max_delay_s: the doubling no longer overflows a float."""
    retry = RetryPolicy(max_retries=10**6, base_delay_s=1, max_delay_s=10, jitter=0)
    rng = random.Random(0)
    assert [backoff_delay(retry, n, None, rng) for n in (1025, 10**6)] == [10.0, 10.0]


def test_retry_after_wins_and_too_long_gives_up() -> None:
    """A server Retry-After is used as is; one above max_delay_s (or not finite) gives up."""
    retry = RetryPolicy(max_delay_s=30)
    rng = random.Random(0)
    assert backoff_delay(retry, 1, 12.5, rng) == 12.5
    assert backoff_delay(retry, 1, 31, rng) is None
    assert backoff_delay(retry, 1, math.inf, rng) is None
    ignoring = RetryPolicy(honour_retry_after=False, jitter=0)
    assert backoff_delay(ignoring, 1, 31, rng) == 1.0
