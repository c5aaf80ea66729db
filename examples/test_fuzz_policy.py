"""A policy proven and an agent fuzzed, in pytest: copy into your test suite.

Run: pytest examples/test_fuzz_policy.py (or python examples/test_fuzz_policy.py)
Needs hypothesis for ``fuzz_agent`` (the ``testing`` extra).
"""

from __future__ import annotations

from fsm_agent import Agent, Model, Policy, RunState, Verdict, tool
from fsm_agent.analysis.checker import check
from fsm_agent.testing import fuzz_agent

POLICY = Policy(max_steps=12, max_total_errors=6, max_verifications=2, max_repeated_tool_calls=3)


@tool
def lookup(sku: str) -> str:
    """The stock level of a product."""
    return f"{sku}: 4 in stock"


def grounded(*, output: str, run_state: RunState) -> Verdict:
    """Accept only answers that mention a stock level."""
    if "stock" in output:
        return Verdict.accept()
    return Verdict.reject("Say how many are in stock.")


def make_agent(model: Model) -> Agent:
    """The agent under test, around whatever model the fuzzer scripts."""
    return Agent(model, tools=[lookup], policy=POLICY, verifier=grounded)


def test_policy_terminates_within_budget() -> None:
    """Every run under POLICY ends, within 40 model calls, whatever the model does."""
    report = check(POLICY, verification=True, model_call_budget=40)
    assert report.proven, report.format()


def test_agent_keeps_the_invariants() -> None:
    """Generated model scripts never break an invariant of the real kernel with this agent."""
    report = fuzz_agent(make_agent, examples=100, seed=0)
    assert report.ok, report.failure
    assert report.examples == 100


if __name__ == "__main__":
    test_policy_terminates_within_budget()
    test_agent_keeps_the_invariants()
    print("policy proven; 100 fuzzed runs kept every invariant")
