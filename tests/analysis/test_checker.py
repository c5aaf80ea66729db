"""The exhaustive bounded model checker: proofs for sound policies, counterexamples for bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm_agent import (
    AgentMachine,
    DefinitionError,
    Policy,
    RetryPolicy,
    UsageLimits,
)
from fsm_agent.cli import main
from fsm_agent.machine.bounds import bounds
from fsm_agent.machine.checker import (
    CheckReport,
    CheckVerdict,
    Failure,
    FailureKind,
    check,
    replay,
)
from fsm_agent.machine.table import (
    DECLARATIONS,
    TABLE,
    Counter,
    Outcome,
    Row,
    State,
    StopReason,
    Update,
    verifications_left,
)
from fsm_agent.policy import HookFailureMode, LoopGuardAction
from strategies import policies

S, On = State, Outcome


def _without(source: State, outcome: Outcome) -> list[Row]:
    return [r for r in TABLE if not (r.source is source and r.outcome is outcome)]


def _only(report: CheckReport, kind: FailureKind) -> list[Failure]:
    assert report.verdict is CheckVerdict.VIOLATED, report.format()
    return [f for f in report.failures if f.kind is kind]


# --- sound policies are proven -----------------------------------------------------------------


def test_default_policy_is_proven(default_check: CheckReport) -> None:
    """The default policy terminates, stays within its bound, and the bound is reached (how
    long the search takes is measured in benchmarks/, not asserted here)."""
    report = default_check
    assert report.verdict is CheckVerdict.PROVEN, report.format()
    assert report.complete
    assert report.longest_path_model_calls == report.bounds.max_model_calls == 1201
    assert report.disabled_states == (S.VERIFYING,)
    assert StopReason.MAX_STEPS in report.stop_reasons


def test_worst_path_is_a_legal_run_that_spends_exactly_max_steps() -> None:
    """The longest path replays through decide() and takes exactly max_steps turns: a
    `length` turn at the last step cannot buy another one (DESIGN §8.9)."""
    report = check(Policy(max_steps=3))
    moves = replay(report.longest_path, report.limits)
    assert moves[-1].dest is S.DONE
    assert moves[-1].counters.steps == 3
    assert max(m.counters.steps for m in moves) == 3


def test_default_policy_with_a_verifier_is_proven() -> None:
    """With verification on, the verifying state is used and every row it needs fires."""
    report = check(Policy(max_steps=20), verification=True)
    assert report.proven, report.format()
    assert S.VERIFYING not in report.disabled_states
    assert StopReason.UNVERIFIED in report.stop_reasons


def test_rows_a_policy_disables_are_reported_not_failed() -> None:
    """Verifying rows with verification off, and rows a limit masks, are listed as disabled."""
    report = check(Policy(max_steps=3, max_verifications=3), verification=True)
    assert report.proven, report.format()
    unverified = next(
        i
        for i, r in enumerate(TABLE)
        if r.source is S.VERIFYING and r.stop is StopReason.UNVERIFIED
    )
    assert unverified in report.disabled_rows  # max_steps runs out before the verifier budget


def test_requests_bound_runs_without_max_steps() -> None:
    """max_steps=None with a request limit is proven, with exactly that many calls at most."""
    report = check(Policy(max_steps=None, usage_limits=UsageLimits(max_requests=4)))
    assert report.proven, report.format()
    assert report.longest_path_model_calls == 4


@st.composite
def _checked_policies(draw: st.DrawFn) -> tuple[Policy, bool]:
    base = draw(policies())
    steps = draw(st.none() | st.just(base.max_steps))
    requests = draw(st.none() | st.integers(1, 6)) if steps is not None else draw(st.integers(1, 6))
    repeats = draw(st.none() | st.integers(2, 3))
    policy = Policy.model_validate(
        {
            **base.model_dump(),
            "max_steps": steps,
            "usage_limits": {"max_requests": requests},
            "max_wall_clock_s": draw(st.none() | st.just(1.0)),
            "hook_failure_mode": draw(st.sampled_from(list(HookFailureMode))),
            "max_repeated_tool_calls": repeats,
            "on_repeated_tool_calls": draw(st.sampled_from(list(LoopGuardAction))),
        }
    )
    return policy, draw(st.booleans())


@given(_checked_policies())
def test_generated_policies_are_proven_within_a_tight_bound(case: tuple[Policy, bool]) -> None:
    """DESIGN §8.1 termination and §8.2 bounded work, for every run of a small policy: the
    checker proves the policy and its worst run makes exactly the computed number of calls."""
    policy, verification = case
    report = check(policy, verification=verification)
    assert report.proven, report.format()
    assert report.longest_path_model_calls == bounds(policy).max_model_calls
    replay(report.longest_path, report.limits)  # DESIGN §8.3: legal moves only


# --- seeded bugs are caught with minimal counterexamples ---------------------------------------


def test_unguarded_rejection_loop_is_non_termination() -> None:
    """A verifying --rejected--> compacting row with no guard loops past max_steps forever."""
    rows = [*_without(S.VERIFYING, On.REJECTED), Row(S.VERIFYING, On.REJECTED, S.COMPACTING)]
    report = check(
        Policy(max_steps=1, max_compaction_attempts=0),
        machine=AgentMachine(rows),
        verification=True,
    )
    (failure,) = _only(report, FailureKind.NON_TERMINATION)
    assert failure.path == (
        (S.IDLE, On.START),
        (S.COMPACTING, On.PROCEED),
        (S.CALLING, On.STOP),
        (S.VERIFYING, On.REJECTED),
        (S.COMPACTING, On.PROCEED),
        (S.CALLING, On.STOP),
    )
    assert failure.loop_from == 3  # reject, proceed, stop: back in verifying, steps spent
    assert "repeat forever" in report.format()


SMALL = Policy(max_steps=2, max_compaction_attempts=0, retry=RetryPolicy(max_retries=0))


@pytest.mark.parametrize("check_kind", ["verification", "output_validation"])
def test_an_answer_that_skips_verifying_is_an_unchecked_answer(check_kind: str) -> None:
    """The earlier table's ``other`` row ended a run ``completed`` straight from ``calling``;
    with a check on answers, that is a counterexample; without one, it is a plain ending."""
    rows = [
        *_without(S.CALLING, On.OTHER),
        Row(S.CALLING, On.OTHER, S.FINALIZING, stop=StopReason.COMPLETED),
    ]
    report = check(SMALL, machine=AgentMachine(rows), **{check_kind: True})  # type: ignore[arg-type]
    (failure,) = _only(report, FailureKind.UNCHECKED_ANSWER)
    assert failure.path == ((S.IDLE, On.START), (S.COMPACTING, On.PROCEED), (S.CALLING, On.OTHER))
    assert "without passing 'verifying'" in report.format()
    assert check(SMALL, machine=AgentMachine(rows)).verdict is CheckVerdict.PROVEN
    assert check(SMALL, **{check_kind: True}).verdict is CheckVerdict.PROVEN  # type: ignore[arg-type]


def test_retry_row_without_can_retry_is_non_termination() -> None:
    """A retry row without the can_retry guard retries forever: shortest lasso found."""
    rows = [
        *_without(S.CALLING, On.RETRYABLE_ERROR),
        Row(S.CALLING, On.RETRYABLE_ERROR, S.CALLING, updates=(Update(Counter.RETRIES),)),
    ]
    report = check(
        Policy(max_steps=2, retry=RetryPolicy(max_retries=2)), machine=AgentMachine(rows)
    )
    (failure,) = _only(report, FailureKind.NON_TERMINATION)
    retries = [(S.CALLING, On.RETRYABLE_ERROR)] * 3
    assert failure.path == ((S.IDLE, On.START), (S.COMPACTING, On.PROCEED), *retries)
    assert failure.path[failure.loop_from :] == ((S.CALLING, On.RETRYABLE_ERROR),)


def test_huge_retries_break_a_call_budget() -> None:
    """A policy with a million retries is caught against a call budget with the shortest run."""
    report = check(
        Policy(max_steps=3, retry=RetryPolicy(max_retries=1_000_000)),
        model_call_budget=20,
        max_states=20_000,
    )
    (failure,) = _only(report, FailureKind.OVER_BUDGET)
    assert failure.path[:-1] == (
        (S.IDLE, On.START),
        (S.COMPACTING, On.PROCEED),
        *[(S.CALLING, On.RETRYABLE_ERROR)] * 20,
    )
    assert failure.path[-1][0] is S.CALLING  # the 21st call, whatever it returns
    assert [f.kind for f in report.failures if f.kind is FailureKind.STATE_LIMIT]


def test_huge_retries_alone_are_inconclusive_not_proven() -> None:
    """Without a budget, a state space too large to search is never reported as proven."""
    report = check(Policy(retry=RetryPolicy(max_retries=1_000_000)), max_states=5_000)
    assert report.verdict is CheckVerdict.INCONCLUSIVE
    assert not report.complete


def test_wall_clock_only_policy_does_not_bound_work() -> None:
    """max_steps=None with only max_wall_clock_s has a cycle that no counter ends."""
    report = check(Policy(max_steps=None, max_wall_clock_s=60))
    (failure,) = _only(report, FailureKind.NON_TERMINATION)
    assert len(failure.path) == 3
    assert "max_wall_clock_s" in failure.message


def test_rejection_past_max_steps_exceeds_the_bound() -> None:
    """Letting a rejection go back while steps are spent makes more calls than the bound."""
    rows = [
        *_without(S.VERIFYING, On.REJECTED),
        Row(
            S.VERIFYING,
            On.REJECTED,
            S.COMPACTING,
            verifications_left,
            updates=(Update(Counter.VERIFICATIONS),),
        ),
        Row(S.VERIFYING, On.REJECTED, S.FINALIZING, stop=StopReason.UNVERIFIED),
    ]
    policy = Policy(max_steps=1, retry=RetryPolicy(max_retries=0), max_compaction_attempts=0)
    report = check(policy, machine=AgentMachine(rows), verification=True)
    (failure,) = _only(report, FailureKind.BOUND_EXCEEDED)
    calls = sum(1 for state, _ in failure.path if state is S.CALLING)
    assert calls == bounds(policy).max_model_calls + 1
    assert failure.path[-1][0] is S.CALLING  # the first call over the bound ends it


def test_missing_cancel_row_is_refused_when_built() -> None:
    """Dispatching declares the cancel interrupt; a table without that row cannot be built."""
    with pytest.raises(DefinitionError, match="'dispatching' declares 'cancel' but no row"):
        AgentMachine(_without(S.DISPATCHING, On.CANCEL))


def test_row_for_an_undeclared_outcome_is_refused_when_built() -> None:
    """A row for an outcome its state never reports is dead: building the machine refuses it."""
    rows = [*TABLE, Row(S.IDLE, On.DEADLINE, S.FINALIZING, stop=StopReason.TIMEOUT)]
    with pytest.raises(DefinitionError, match="leaves 'idle' on 'deadline', which it does not"):
        AgentMachine(rows)


def test_resume_into_a_new_turn_is_unbounded_work() -> None:
    """A resume that starts a new model turn lets suspend/resume cycles call the model forever."""
    rows = [*_without(S.SUSPENDED, On.RESUME), Row(S.SUSPENDED, On.RESUME, S.COMPACTING)]
    report = check(Policy(max_steps=1), machine=AgentMachine(rows))
    (failure,) = _only(report, FailureKind.UNBOUNDED_WORK)
    assert failure.loop_from is not None
    loop = failure.path[failure.loop_from :]
    assert (S.SUSPENDED, On.RESUME) in loop
    assert (S.CALLING, On.TOOL_CALLS) in loop


def test_every_counterexample_is_a_legal_path() -> None:
    """Counterexamples (but a missing row's last move) replay through the table they break."""
    machine = AgentMachine(
        [*_without(S.VERIFYING, On.REJECTED), Row(S.VERIFYING, On.REJECTED, S.COMPACTING)]
    )
    report = check(Policy(max_steps=2), machine=machine, verification=True)
    assert report.failures
    for failure in report.failures:
        replay(failure.path, report.limits, machine)


# --- the command line --------------------------------------------------------------------------


def _run(argv: list[str]) -> int:
    return main(["check", *argv])


def test_cli_gives_the_parametric_verdict_first(capsys: pytest.CaptureFixture[str]) -> None:
    """`check` alone proves the table for every policy, prints the formulas and this policy's
    values, and explores nothing."""
    assert _run([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("check (parametric): PROVEN for every policy that sets max_steps")
    assert "steps < max_steps ranks" in out
    assert "model calls      = min(max_steps + min((max_steps + max_model_switches)" in out
    assert "summarize_on_max_steps, max_requests) = 1201" in out
    assert "abstract states explored" not in out


def test_cli_counts_the_calls_of_a_fallback_chain(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`check --models 3` bounds the calls across a chain of three models (each switch a failed
    call that starts a fresh run of retries), and the explorer's worst run makes exactly that
    many."""
    policy = tmp_path / "policy.json"
    policy.write_text('{"max_steps": 2, "max_compaction_attempts": 0}')
    assert _run(["--policy", str(policy), "--models", "3"]) == 0
    out = capsys.readouterr().out
    assert "model_switches < max_model_switches ranks [calling]" in out
    # 2 turns + (2 + 2) × 5 retries + 2 switches + 1 summary call
    assert "(2 + 2) × 5 retries + 2 model switches + 1 summary call = 25" in out
    assert _run(["--policy", str(policy), "--models", "3", "--explore"]) == 0
    assert "longest path: 25 model calls" in capsys.readouterr().out
    assert _run(["--policy", str(policy), "--explore"]) == 0
    assert "longest path: 13 model calls" in capsys.readouterr().out


@pytest.mark.slow  # the search is test_default_policy_is_proven's, the output the test above's
def test_cli_proves_the_default_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """`check --explore` exits 0 on the default policy and prints the verdict, states, bounds
    and path after the parametric proof."""
    assert _run(["--explore"]) == 0
    out = capsys.readouterr().out
    assert "parametric proof: PROVEN" in out
    assert "check: PROVEN" in out
    assert "abstract states explored" in out
    assert "longest path: 1201 model calls" in out


def test_cli_fails_a_bad_policy_with_a_counterexample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`check --policy` exits 1 with a counterexample when the policy's work is unbounded."""
    policy = tmp_path / "policy.json"
    policy.write_text(Policy(max_steps=None, max_wall_clock_s=5).model_dump_json())
    assert _run(["--policy", str(policy)]) == 1
    out = capsys.readouterr().out
    assert "the proof relies on max_steps=None" in out
    assert "FAILED non_termination" in out
    assert "counterexample (3 moves)" in out


def test_cli_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check --json --verifier` prints the report as JSON."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"max_steps": 4}))
    assert _run(["--policy", str(policy), "--verifier", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "proven"
    assert data["verification"] is True
    assert data["bounds"]["max_model_calls"] == data["longest_path"]["model_calls"]
    assert data["parametric"]["terminates"] is True
    assert data["parametric"]["measures"] == [
        ["steps", "max_steps"],
        ["model_switches", "max_model_switches"],
        ["retries", "max_retries"],
    ]


@pytest.mark.parametrize("content", ["{not json", '{"max_steps": -1}', '{"nope": 1}'])
def test_cli_usage_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    """An unreadable or invalid policy file is a usage error: exit 2 and a message."""
    policy = tmp_path / "policy.json"
    policy.write_text(content)
    assert _run(["--policy", str(policy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fsm-agent check: error:") and "policy.json" in err


def test_cli_missing_policy_file_exits_2(tmp_path: Path) -> None:
    """A policy path that does not exist is a usage error."""
    assert _run(["--policy", str(tmp_path / "absent.json")]) == 2


def test_cli_budget_violation_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--model-call-budget` below the worst case fails with the shortest run over budget."""
    # A small policy: the default one's search (seconds) is test_default_policy_is_proven's.
    policy = tmp_path / "policy.json"
    policy.write_text(Policy(max_steps=3).model_dump_json())
    assert _run(["--policy", str(policy), "--model-call-budget", "3"]) == 1
    out = capsys.readouterr().out
    assert "FAILED over_budget" in out
    assert "counterexample (6 moves)" in out


def test_the_request_limit_caps_the_summary_call_too() -> None:
    """Under usage_limits.max_requests the bound is the request limit, the step-limit summary
    call included (the kernel does not make it past the limit), and the worst path reaches it."""
    capped = Policy(max_steps=2, usage_limits=UsageLimits(max_requests=2))
    report = check(capped)
    assert report.proven, report.format()
    assert report.bounds.max_model_calls == report.longest_path_model_calls == 2
    roomy = Policy(
        max_steps=2, retry=RetryPolicy(max_retries=0), usage_limits=UsageLimits(max_requests=3)
    )
    report = check(roomy)
    assert report.proven, report.format()
    assert report.bounds.max_model_calls == report.longest_path_model_calls == 3  # no cut


def test_the_checker_explores_every_declared_interrupt() -> None:
    """Finalizing declares the deadline (the step-limit summary call cut short), and the checker
    explores it under a wall-clock limit: it reads the declarations, it keeps no model of its
    own."""
    row = next(
        i for i, r in enumerate(TABLE) if r.source is S.FINALIZING and r.outcome is On.DEADLINE
    )
    report = check(Policy(max_steps=3, max_wall_clock_s=5.0))
    assert report.proven, report.format()
    assert row not in report.disabled_rows
    assert StopReason.TIMEOUT in report.stop_reasons
    to_limit = [(S.IDLE, On.START), (S.COMPACTING, On.PROCEED), (S.CALLING, On.TOOL_CALLS)]
    path = [*to_limit, (S.DISPATCHING, On.TOOLS_DONE), (S.COMPACTING, On.PROCEED)]
    path += [(S.CALLING, On.TOOL_CALLS), (S.DISPATCHING, On.TOOLS_DONE)]
    path += [(S.COMPACTING, On.PROCEED), (S.CALLING, On.TOOL_CALLS), (S.DISPATCHING, On.TOOLS_DONE)]
    moves = replay([*path, (S.FINALIZING, On.DEADLINE)], report.limits)
    assert moves[-2].stop is StopReason.MAX_STEPS
    assert moves[-1].dest is S.DONE and moves[-1].stop is StopReason.TIMEOUT


def test_every_declared_interrupt_is_explored_under_a_policy_that_enables_it() -> None:
    """With a verifier, a wall-clock limit, usage limits, stop conditions and
    hook_failure_mode="fail", the checker explores every interrupt every state declares: each
    such row is used, the step-limit summary call's deadline and usage limit included."""
    policy = Policy(
        max_steps=3,
        max_wall_clock_s=5.0,
        usage_limits=UsageLimits(max_requests=10),
        hook_failure_mode="fail",
    )
    report = check(policy, verification=True, stop_conditions=True)
    assert report.proven, report.format()
    interrupt_rows = [
        i for i, row in enumerate(TABLE) if row.outcome in DECLARATIONS[row.source].interrupts
    ]
    assert len(interrupt_rows) > 20
    assert [i for i in interrupt_rows if i in report.disabled_rows] == []
