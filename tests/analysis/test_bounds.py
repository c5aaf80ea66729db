"""Worst-case budgets computed from a policy alone (issue 7, part 1)."""

from __future__ import annotations

import pytest

from fsm_agent import Policy, RetryPolicy, UsageLimits
from fsm_agent.machine.bounds import bounds


def test_default_policy_model_calls() -> None:
    """The default policy allows 200 turns × (1 + 5 retries) + 1 summary call = 1201 calls."""
    b = bounds(Policy())
    assert b.max_model_calls == 1201
    assert "200 turns" in b.model_calls_derivation
    assert "1 summary call" in b.model_calls_derivation
    assert b.max_tool_turns == 200


def test_no_compaction_means_no_extra_turn() -> None:
    """Without compaction attempts a length turn cannot buy a turn past max_steps."""
    b = bounds(Policy(max_steps=10, max_compaction_attempts=0))
    assert b.max_model_calls == 10 * 6 + 1


def test_no_summary_call_when_summarizing_is_off() -> None:
    """summarize_on_max_steps=False removes the one extra call at the step limit."""
    assert bounds(Policy(max_steps=10, summarize_on_max_steps=False)).max_model_calls == 10 * 6


def test_total_error_budget_caps_retries() -> None:
    """max_total_errors=E allows at most E - 1 retried failures in the whole run."""
    b = bounds(Policy(max_steps=10, max_total_errors=4))
    assert b.max_model_calls == 10 + 3 + 1
    assert "max_total_errors - 1 = 3" in b.model_calls_derivation


def test_requests_bound_a_run_without_max_steps() -> None:
    """With max_steps=None the request limit is the call bound."""
    b = bounds(Policy(max_steps=None, usage_limits=UsageLimits(max_requests=7)))
    assert b.max_model_calls == 7
    assert b.max_tool_turns == 7


def test_wall_clock_alone_does_not_bound_work() -> None:
    """max_steps=None with only a wall-clock limit leaves the calls unbounded, and says so."""
    b = bounds(Policy(max_steps=None, max_wall_clock_s=30))
    assert b.max_model_calls is None
    assert "max_wall_clock_s ends a run in time, not in work" in b.model_calls_derivation
    assert b.max_wall_clock_s == 30


def test_tool_executions_need_max_tool_calls() -> None:
    """Tool executions are unbounded (a turn may carry any number of calls) until capped."""
    assert bounds(Policy()).max_tool_executions is None
    assert "max_tool_calls" in bounds(Policy()).tool_executions_derivation
    assert bounds(Policy(max_tool_calls=12)).max_tool_executions == 12


def test_wall_clock_unknown_without_model_timeout() -> None:
    """Without a model-call timeout the work gives no time bound, and the derivation says so."""
    b = bounds(Policy())
    assert b.max_wall_clock_s is None
    assert "model_timeout_s" in b.wall_clock_derivation


def test_wall_clock_sums_calls_backoff_and_parallel_tool_turns() -> None:
    """Time = calls × model timeout + worst backoff (Retry-After: max_delay_s each) + turns ×
    tool timeout."""
    policy = Policy(max_steps=2, retry=RetryPolicy(max_retries=1, max_delay_s=10))
    b = bounds(policy, model_timeout_s=5)
    calls = 2 * 2 + 1
    assert b.max_model_calls == calls
    assert b.max_wall_clock_s == pytest.approx(calls * 5 + 2 * 10 + 2 * 30)


def test_backoff_without_retry_after_doubles_with_jitter_up_to_max_delay() -> None:
    """Computed waits grow as base × 2^(n-1) × (1 + jitter), capped at max_delay_s."""
    retry = RetryPolicy(
        max_retries=4, base_delay_s=1, max_delay_s=5, jitter=0.5, honour_retry_after=False
    )
    b = bounds(Policy(max_steps=1, max_compaction_attempts=0, retry=retry), model_timeout_s=1)
    calls = 1 + 4 + 1
    waits = 1.5 + 3 + 5 + 5
    assert b.max_model_calls == calls
    assert b.max_wall_clock_s == pytest.approx(calls * 1 + waits + 30)


def test_sequential_tools_without_a_cap_have_no_time_bound() -> None:
    """Sequential dispatch of an unbounded number of calls per turn takes unbounded time."""
    b = bounds(Policy(parallel_tool_calls=False), model_timeout_s=1)
    assert b.max_wall_clock_s is None
    assert "sequential" in b.wall_clock_derivation
    capped = bounds(Policy(parallel_tool_calls=False, max_tool_calls=3), model_timeout_s=1)
    assert capped.max_wall_clock_s == pytest.approx(1201 + 1000 * 60 + 3 * 30)


def test_policy_wall_clock_limit_wins_when_smaller() -> None:
    """The bound is the smaller of max_wall_clock_s and the worst time of the work."""
    b = bounds(Policy(max_wall_clock_s=60), model_timeout_s=1)
    assert b.max_wall_clock_s == 60
    assert b.wall_clock_derivation.startswith("max_wall_clock_s=60")


def test_lines_show_every_bound() -> None:
    """Bounds.lines prints one line per bound, unbounded ones as such."""
    lines = bounds(Policy()).lines()
    assert len(lines) == 4
    assert "1201" in lines[0]
    assert "unbounded" in lines[2]
