"""The fuzzer: generated cases run the real kernel, every DESIGN §8 invariant is checked, a
failure prints as a test; the CLI and the one-line CI helper."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given

from fsm_agent import (
    Agent,
    CompactionSettings,
    ConfigurationError,
    MalformedResponseError,
    Policy,
    RateLimitError,
    RetryPolicy,
    Runtime,
    State,
    StopReason,
    UsageLimits,
)
from fsm_agent.cli import main
from fsm_agent.fuzzing import (
    DEFAULT_TOOLS,
    Choices,
    FuzzCase,
    HookPlan,
    InvariantViolation,
    check_case,
    check_invariants,
    fuzz,
    read_case,
    regression_test,
    run_case,
)
from fsm_agent.models import Model
from fsm_agent.policy import limits_of
from fsm_agent.testing import (
    ScriptedModel,
    cases,
    fail,
    finish,
    fuzz_agent,
    text,
    tool_call,
    tool_calls,
)


def small_agent(model: Model) -> Agent[Any, Any]:
    """A user's agent: two tools and a small policy."""
    return Agent(model, tools=DEFAULT_TOOLS[:2], policy=Policy(max_steps=3))


@given(cases())
def test_generated_cases_keep_every_invariant(case: FuzzCase) -> None:
    """Invariants 1–10 hold for generated cases on the built-in agent: scripts, policies,
    verifiers, hooks, approvals, cancel and pause points."""
    check_case(case)


def test_no_bytes_decode_to_the_simplest_case() -> None:
    """Shrinking ends at the simplest case: empty input is no script and default choices."""
    case = read_case(Choices(b""))
    assert case.script == ()
    assert not case.cycle and case.cancel_after is None and case.hooks == HookPlan()


def test_a_paused_run_resumed_from_json_equals_the_plain_run() -> None:
    """Invariant 10: pause, checkpoint as JSON, reload and resume ends like the plain run."""
    case = FuzzCase(
        script=(tool_calls(("add", {"a": 1, "b": 2}), ("add", {"a": 2, "b": 2})), text("4")),
        policy=Policy(max_steps=3, parallel_tool_calls=False),
        pause_after=5,
    )
    record = run_case(case)
    assert record.reference is not None
    assert len(record.invocations) == 2  # the pause suspended the run, the fuzzer resumed it
    assert record.paused
    assert check_case(case).result.output == "4"


def test_a_pause_that_took_no_effect_is_named_when_the_twin_runs_differ() -> None:
    """Invariant 10's report says when the pause came too late to take effect: both runs then
    ran uninterrupted, so their difference is not the checkpoint's."""
    case = FuzzCase(
        script=(tool_call("add", {"a": 1, "b": 2}), text("3")),
        policy=Policy(max_steps=3),
        pause_after=15,  # after the only tool turn, where a pause is taken
    )
    record = run_case(case)
    assert record.reference is not None
    record.reference = replace(record.reference, output="4")  # a twin that ended otherwise
    with pytest.raises(InvariantViolation, match="its pause took no effect: neither run paused"):
        check_invariants(record)
    assert not record.paused and len(record.invocations) == 1


def test_approvals_and_questions_are_resumed_with_the_decisions() -> None:
    """A needs-approval tool and a human question suspend; the fuzzer answers and resumes."""
    case = FuzzCase(
        script=(tool_call("guarded", {"x": 1}), tool_call("ask", {"question": "why"}), text("ok")),
        policy=Policy(max_steps=4),
        decisions=(False,),
    )
    record = check_case(case)
    assert len(record.invocations) == 3
    assert record.result.stop_reason is StopReason.COMPLETED


def test_cancel_inside_a_tool_ends_the_run_cancelled() -> None:
    """Invariant 8: a cancel from inside a running tool; nothing starts after it."""
    case = FuzzCase(
        script=(tool_calls(("interrupt", {}), ("add", {"a": 1, "b": 1})), text("no")),
        policy=Policy(max_steps=3, parallel_tool_calls=False),
    )
    record = check_case(case)
    assert record.result.stop_reason is StopReason.CANCELLED
    assert record.cancelled_at == (1, 1)


def test_hooks_that_fail_hang_and_supply_answers_keep_the_invariants() -> None:
    """Hooks that raise, hang past their timeout, return nonsense or supply a response."""
    case = FuzzCase(
        script=(tool_call("add", {"a": 1, "b": 1}), text("done")),
        policy=Policy(max_steps=3),
        hooks=HookPlan(
            before_model_call=("hang", "respond"),
            before_tool=("bad",),
            approve_tool=("raise",),
            after_tool=("args",),
        ),
    )
    assert check_case(case).result.output == "supplied by a hook"


def test_a_violation_names_its_invariant() -> None:
    """A record that claims a cancel the run ignored breaks invariant 8, by number."""
    record = run_case(FuzzCase(script=(text("a"),), policy=Policy(max_steps=1)))
    record.cancelled_at = (0, 0)
    with pytest.raises(InvariantViolation) as caught:
        check_invariants(record)
    assert caught.value.number == 8


def test_case_source_rebuilds_the_case() -> None:
    """FuzzCase.source() is Python that rebuilds an equal script and configuration."""
    case = FuzzCase(
        script=(
            text("hi", reasoning="hm"),
            tool_calls(("add", {"a": 1}, "c1"), ("boom", "not json")),
            finish("weird_reason", "x", tool_calls=[("add", {"a": 1, "b": 2})]),
            fail(RateLimitError("slow", retry_after=2.0)),
        ),
        cycle=True,
        policy=Policy(max_steps=2, usage_limits=UsageLimits(max_total_tokens=50)),
        hooks=HookPlan(approve_tool=("ask",)),
        cancel_after=4,
    )
    source = regression_test(case, "invariant 1 (termination): example", None, 1)
    namespace: dict[str, Any] = {}
    exec(compile(source, "<test>", "exec"), namespace)
    rebuilt = eval(case.source(), namespace)  # the test's imports cover the case
    assert rebuilt.policy == case.policy
    assert rebuilt.hooks == case.hooks
    assert [type(t) for t in rebuilt.script] == [type(t) for t in case.script]
    assert rebuilt.script[:3] == case.script[:3]


def test_fuzz_reports_the_summary() -> None:
    """fuzz() runs the examples and counts paths, invariants and the slowest example."""
    report = fuzz(small_agent, examples=60, seed=1)
    assert report.ok, report.format()
    assert report.examples == 60
    assert report.distinct_paths > 5
    assert report.invariants_checked >= 9 * 60
    assert "examples run:" in report.format()


def test_fuzz_agent_is_one_line_in_a_test_suite() -> None:
    """testing.fuzz_agent passes for a sound agent and returns the report."""
    assert fuzz_agent(small_agent, examples=30, seed=2).examples == 30


def test_fuzz_agent_fails_with_the_counterexample() -> None:
    """testing.fuzz_agent raises AssertionError holding a ready-to-paste test."""

    def broken(model: Model) -> Agent[Any, Any]:
        agent = small_agent(model)
        # The kernel decides by other limits than its policy's: the bound now disagrees.
        wrong = agent.machine.deciding(limits_of(Policy(max_steps=1), verification=False))
        agent._plan = dataclasses.replace(agent._plan, decide=wrong)
        return agent

    with pytest.raises(AssertionError, match="def test_fuzz_counterexample"):
        fuzz_agent(broken, examples=200, seed=0)


def test_cli_fuzzes_a_target_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """`fsm-agent fuzz module:factory --examples N` prints the summary and exits 0."""
    assert main(["fuzz", "test_fuzzing:small_agent", "--examples", "40", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "fuzz: OK (seed 3)" in out
    assert "distinct paths" in out


def test_cli_exits_1_on_a_violation(capsys: pytest.CaptureFixture[str]) -> None:
    """`fsm-agent fuzz` exits 1 and prints the shrunk test when an invariant breaks."""
    code = main(["fuzz", "seeded_bugs:unlimited_retry_agent", "--seed", "0"])
    assert code == 1
    assert "def test_fuzz_counterexample" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv", [["fuzz", "nope"], ["fuzz", "no_such_module:f"], ["fuzz", "test_fuzzing:missing"]]
)
def test_cli_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A target that is not module:factory, or cannot be imported, is a usage error."""
    assert main(argv) == 2
    assert "fsm-agent fuzz:" in capsys.readouterr().err


def test_importing_fsm_agent_does_not_import_hypothesis() -> None:
    """hypothesis is an optional extra: the package and its CLI import without it."""
    code = "import sys, fsm_agent.cli, fsm_agent.testing; print('hypothesis' in sys.modules)"
    run = [sys.executable, "-c", code]
    out = subprocess.run(run, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_suspended_run_may_end_with_calls_pending() -> None:
    """Invariant 5 allows a suspended run's last calls to wait for results; nothing else."""
    case = FuzzCase(
        script=(tool_call("guarded", {"x": 1}),), policy=Policy(max_steps=2), max_resumes=0
    )
    record = check_case(case)
    assert record.result.state is State.SUSPENDED


def test_request_limit_bounds_retried_attempts() -> None:
    """Invariant 2: with max_steps=None, max_requests=1 allows one model call in all, a failed
    and retried attempt included (found by the fuzzer)."""
    case = FuzzCase(
        script=(fail(), text("ok")),
        policy=Policy(max_steps=None, usage_limits=UsageLimits(max_requests=1)),
    )
    record = check_case(case)
    assert record.result.model_calls == 1
    assert record.result.stop_reason is StopReason.USAGE_LIMIT


def test_wall_clock_budget_is_kept_across_a_pause() -> None:
    """Invariant 10 (found by the fuzzer): a run paused and resumed from its JSON checkpoint
    spends the same wall-clock budget as the uninterrupted run, so the deadline falls at the
    same retry (the budget counts active time over all invocations)."""
    case = FuzzCase(
        script=(
            tool_calls(("wait", {"seconds": 0.5}, "c2"), ("guarded", {"x": -3}, "c2"), text="x y"),
            fail(MalformedResponseError("garbled")),
        ),
        stream=False,
        policy=Policy(
            max_steps=None,
            retry=RetryPolicy(max_retries=3, base_delay_s=0.5, max_delay_s=4.0),
            max_wall_clock_s=1.0,
            usage_limits=UsageLimits(max_requests=3),
        ),
        decisions=(True, False),
        pause_after=38,
    )
    record = check_case(case)
    assert record.reference is not None
    assert record.result.stop_reason is record.reference.stop_reason is StopReason.TIMEOUT
    assert record.result.run_state is not None
    assert record.result.run_state.active_s == pytest.approx(1.0)


def test_summarize_compaction_calls_are_within_the_bound() -> None:
    """Invariant 2 (found by the fuzzer): with the ``summarize`` strategy every compaction makes
    a model call, and bounds() counts them (turns × max_compaction_attempts)."""
    case = FuzzCase(
        script=(tool_calls(("add", {"a": -3, "b": -3})), text(""), text(""), text("")),
        policy=Policy(
            max_steps=3,
            retry=RetryPolicy(max_retries=0),
            max_consecutive_errors=1,
            max_compaction_attempts=1,
            max_verifications=2,
            require_done_tool=True,
            compaction=CompactionSettings(
                keep_recent_messages=1, strategies=("summarize", "sliding_window"), max_messages=4
            ),
        ),
    )
    record = check_case(case)
    assert record.result.model_calls == 5


def test_the_deadline_is_checked_between_tool_calls() -> None:
    """Invariant 10 (found by the fuzzer): a deadline that passes during one tool call stops
    the turn before the next call starts, in a run and in its paused-and-resumed copy alike."""
    case = FuzzCase(
        script=(tool_calls(("wait", {"seconds": 2.0}), ("add", {"a": -3, "b": -3})),),
        stream=False,
        policy=Policy(
            max_steps=1,
            retry=RetryPolicy(max_retries=0),
            parallel_tool_calls=False,
            max_wall_clock_s=1.0,
        ),
        pause_after=7,
    )
    record = check_case(case)
    assert record.result.stop_reason is StopReason.TIMEOUT
    assert record.result.tool_executions == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_seconds": 0}, "max_seconds must be a finite number of seconds greater than 0"),
        ({"max_seconds": float("nan")}, "max_seconds must be a finite number"),
        ({"examples": 0}, "examples must be at least 1"),
    ],
)
def test_fuzz_refuses_limits_that_would_run_nothing(kwargs: dict[str, float], message: str) -> None:
    """A session that could run no example is a configuration error, not an empty OK."""
    with pytest.raises(ConfigurationError, match=message):
        fuzz(**kwargs)  # type: ignore[arg-type]


def test_a_child_agent_waits_on_the_cases_virtual_clock() -> None:
    """A child agent (an agent used as a tool) retries on the case's virtual clock, as its
    parent does: its backoff takes no real time and draws no real sleep."""
    really_slept: list[float] = []

    async def real_sleep(seconds: float) -> None:
        really_slept.append(seconds)

    def make_agent(model: Model) -> Agent[Any, Any]:
        child = Agent(
            ScriptedModel([fail(), text("the child's answer")]),
            runtime=Runtime(sleep=real_sleep),
        )
        helper = child.as_tool(name="helper", description="Ask the helper.")
        return Agent(model, tools=[helper])

    case = FuzzCase(script=(tool_call("helper", {"task": "look"}), text("done")))
    record = run_case(case, make_agent)
    assert record.result.stop_reason is StopReason.COMPLETED
    assert record.result.tool_executions == 1
    assert really_slept == []
