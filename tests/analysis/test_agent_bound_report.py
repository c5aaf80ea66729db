"""One bound for one agent: ``agent.bounds()`` and ``fsm-agent check --agent`` cover the loop,
its phases (their budgets change the bound), its children and its handoffs, in one report with
its derivation; ``check --phases`` keeps the loop's bound beside the phase report."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fsm_agent import Agent, Handoff, Policy, RetryPolicy, StopReason, tool
from fsm_agent.cli import main
from fsm_agent.kernel.composition import explored_model_calls
from fsm_agent.phases import MOVE_TOOL, Phase, Phases
from fsm_agent.testing import ScriptedModel, text, tool_call

NO_RETRY = RetryPolicy(max_retries=0)


@tool
def read(path: str) -> str:
    """Read a file."""
    return "contents"


BUDGETED = Phases(
    [Phase("plan", ("read",), max_steps=2), Phase("act", ("read",), max_steps=3)],
    [("plan", "act")],
    goals=["act"],
)
"""Two turns of planning at most, then three of acting: a run takes at most 5 turns."""


def phased(model: ScriptedModel) -> Agent[None, str]:
    return Agent(model, tools=[read], phases=BUDGETED, policy=Policy(max_steps=20, retry=NO_RETRY))


PHASED = phased(ScriptedModel([]))
researcher = Agent(ScriptedModel([]), policy=Policy(max_steps=2, retry=NO_RETRY))
billing = Agent(
    ScriptedModel([]), tools=[researcher.as_tool(name="research", description="Research.")]
)
TRIAGE = Agent(
    ScriptedModel([]),
    policy=Policy(max_steps=3, max_tool_calls=2, max_handoffs=1, retry=NO_RETRY),
    handoffs=[Handoff(billing, name="billing", description="Billing questions.")],
)


def test_phase_budgets_change_the_bound_and_a_run_reaches_it() -> None:
    """The budgets allow 5 turns of the policy's 20: the bound is 5 model calls (no step-limit
    summary call can happen), the explorer agrees, and a run that spends both budgets makes
    exactly 5 and stops on the budget."""
    bound = PHASED.bounds()
    assert bound.max_model_calls == 5 == explored_model_calls(PHASED)
    assert "phases' step budgets" in bound.model_calls_derivation
    assert bound.max_tool_turns == 5
    script = [
        tool_call("read", {"path": "a"}),
        tool_call(MOVE_TOOL, {"phase": "act"}),
        tool_call("read", {"path": "b"}),
        tool_call("read", {"path": "c"}),
        tool_call("read", {"path": "d"}),
        text("never asked"),
    ]
    result = asyncio.run(phased(ScriptedModel(script)).run("Fix it."))
    assert result.model_calls == bound.max_model_calls
    assert result.stop_reason is StopReason.STOP_CONDITION


def test_check_agent_reports_the_loop_bound_under_its_phases_and_the_phase_report(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check --agent`` of an agent with phases: the loop's bound, derived from the budgets,
    and the phase report, in one output."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert main(["check", "--agent", "test_agent_bound_report:PHASED"]) == 0
    out = capsys.readouterr().out
    assert "model calls               5  5 turns (its phases' step budgets" in out
    assert "phase act" in out and "at most 3 turns per visit (its budget 3)" in out
    assert out.rstrip().endswith("PASSED")


def test_check_phases_keeps_the_loop_bound(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check --phases`` prints the loop's proof and bound, computed under the phases'
    budgets, before the phase report."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert main(["check", "--phases", "test_agent_bound_report:BUDGETED"]) == 0
    out = capsys.readouterr().out
    assert "PROVEN" in out and "for this policy, with the derivations:" in out
    assert "model calls              30  5 turns (its phases' step budgets" in out
    assert "phases: every run ends within 5 turns" in out and "PASSED" in out


def test_check_agent_reports_handoffs_and_the_targets_children(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check --agent`` of an agent with handoffs: the handoff bound with the declared graph,
    and the target's child counted in the composed bound and listed."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert main(["check", "--agent", "test_agent_bound_report:TRIAGE"]) == 0
    out = capsys.readouterr().out
    graph = "Policy.max_handoffs=1; no cycle ((start) -> billing)"
    assert f"handoffs                  1  {graph}" in out
    assert "the child 'research', called at most 2 times in a run:" in out
    assert "2 tool executions × 3 (the worst of the child 'research')" in out


def test_check_agent_refuses_a_second_phase_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--agent`` with ``--phases``: a usage error (the agent's own phases are checked)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    code = main(
        [
            "check",
            "--agent",
            "test_agent_bound_report:PHASED",
            "--phases",
            "test_agent_bound_report:BUDGETED",
        ]
    )
    assert code == 2
