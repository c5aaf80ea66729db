"""An answer cut by the output cap is its own case: a bounded continuation, then output_limit."""

from __future__ import annotations

from fsm_agent import CompactionSettings, Message, Outcome, Policy, Role, State, StopReason, Usage
from fsm_agent.kernel.states.calling import CONTINUE_PROMPT
from fsm_agent.machine.checker import CheckReport
from fsm_agent.testing import ScriptedModel, finish, text
from helpers import make_agent

CUT = Usage(requests=1, input_tokens=71, output_tokens=256)  # a short history, cut at 256 tokens
WINDOW = Policy(compaction=CompactionSettings(context_window=8_000))


def test_a_fresh_run_cut_by_the_output_cap_ends_with_output_limit_and_no_compaction() -> None:
    """On a short history, an answer cut at the output cap (twice: the continuation is cut too)
    ends with stop reason output_limit and the partial text, and nothing is compacted."""
    agent, model, _ = make_agent(
        [finish("length", "The first half", usage=CUT), finish("length", ", then more", usage=CUT)],
        policy=WINDOW,
    )
    result = agent.run_sync("write a long essay")
    assert result.stop_reason is StopReason.OUTPUT_LIMIT
    assert result.output == "The first half, then more"
    outcomes = [m.outcome for m in result.trace]
    assert Outcome.COMPACTED not in outcomes and Outcome.LENGTH not in outcomes
    assert outcomes.count(Outcome.OUTPUT_CUT) == 2
    assert result.counters.continuations == 1
    continuation = model.requests[1].messages
    assert continuation[-2] == Message.assistant("The first half")
    assert continuation[-1].role is Role.USER and continuation[-1].text == CONTINUE_PROMPT


def test_a_continuation_that_finishes_completes_with_the_whole_answer() -> None:
    """A cut answer continued to a stop finish completes with both parts as the output."""
    agent, _, _ = make_agent([finish("length", "Once upon", usage=CUT), text(" a time.")])
    result = agent.run_sync("a story")
    assert result.stop_reason is StopReason.COMPLETED
    assert result.output == "Once upon a time."


def test_no_continuation_left_ends_at_the_first_cut() -> None:
    """With max_continuations=0 the first cut ends the run, keeping the partial text."""
    agent, model, _ = make_agent(
        [finish("length", "partial", usage=CUT)], policy=Policy(max_continuations=0)
    )
    result = agent.run_sync("hi")
    assert result.stop_reason is StopReason.OUTPUT_LIMIT
    assert result.output == "partial"
    assert len(model.requests) == 1


def test_a_length_finish_near_the_context_budget_still_compacts() -> None:
    """A length finish whose context plus output reaches the budget is context pressure: it
    forces a compaction, as before."""
    near = Usage(requests=1, input_tokens=7_000, output_tokens=256)  # 7,256 ≥ 0.8 × 8,000
    model = ScriptedModel([finish("length", "cut", usage=near), text("ok")])
    agent, _, _ = make_agent([], policy=WINDOW)
    agent = agent.with_effects(model=model)
    result = agent.run_sync("hi")
    outcomes = [m.outcome for m in result.trace]
    assert Outcome.LENGTH in outcomes and Outcome.OUTPUT_CUT not in outcomes
    assert [m.source for m in result.trace if m.outcome is Outcome.LENGTH] == [State.CALLING]
    assert result.trace[outcomes.index(Outcome.LENGTH) + 1].source is State.COMPACTING


def test_the_checker_proves_the_output_cap_rows_and_the_bound_is_unchanged(
    default_check: CheckReport,
) -> None:
    """Continuations spend steps, so the default bound stands and both output-cap rows are used."""
    report = default_check
    assert report.proven, report.format()
    assert report.longest_path_model_calls == report.bounds.max_model_calls == 1201
    assert StopReason.OUTPUT_LIMIT in report.stop_reasons
