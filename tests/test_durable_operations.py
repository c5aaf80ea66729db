"""What an operator's actions on stored runs promise, checked against SQLite and PostgreSQL:
abandoning a run keeps what its journal knows of each call, and returns the reason."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from durable_scenario import PROMPT, RUN_ID, make_agent
from fsm_agent import RunAbandonedError, State, StopReason
from fsm_agent.errors import CheckpointConflictError
from fsm_agent.messages import ToolResult, validate_history
from fsm_agent.persistence import Checkpointer, CrashingCheckpointer, SimulatedCrash
from test_durable_promises import _crashed_before_the_charge


class _CrashAfterTheCharge(CrashingCheckpointer):
    """Stops the run as a crash would right after the charge's result is journaled, before any
    checkpoint holds it."""

    def __init__(self, inner: Checkpointer) -> None:
        super().__init__(inner, 0)

    def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
        """Record, then crash when this is the charge's result."""
        self.inner.record_result(run_id, key, result, version=version)
        if key.endswith("/tool/c2"):
            raise SimulatedCrash("after the charge's result")


def _results(messages: object) -> dict[str, ToolResult]:
    return {r.call_id: r for m in messages for r in m.tool_results}  # type: ignore[attr-defined]


def test_abandon_keeps_the_recorded_result_of_a_call_that_ran(store: Checkpointer) -> None:
    """A call whose result the journal holds keeps that result when the run is abandoned; a
    call that never started reads "not run"; the result carries the reason."""
    with pytest.raises(SimulatedCrash):
        make_agent(_CrashAfterTheCharge(store), lambda _: None).run_sync(PROMPT)
    result = asyncio.run(make_agent(store, lambda _: None).abandon(RUN_ID, reason="refunded"))
    results = _results(result.messages)
    assert results["c2"].content == "charged 5" and not results["c2"].is_error
    assert results["c3"].content.startswith("Error: not run: the run was abandoned")
    assert isinstance(result.error, RunAbandonedError) and result.error.reason == "refunded"
    stored = store.load(RUN_ID).state
    assert stored.state is State.ABORTED and stored.stop_reason is StopReason.CANCELLED
    assert _results(stored.messages) == results
    assert stored.error == str(result.error)
    validate_history(stored.messages)


def test_abandon_says_outcome_unknown_for_a_call_another_worker_is_running(
    store: Checkpointer,
) -> None:
    """A call with an intent and no outcome (running in a worker, or cut short by a crash)
    reads "outcome unknown" when the run is abandoned; that worker's result is then refused."""
    seen: Counter[str] = Counter()
    _, version, key = _crashed_before_the_charge(store, seen)
    store.record_intent(RUN_ID, key, "tool", version=version)  # worker A starts the charge
    result = asyncio.run(make_agent(store, lambda _: None).abandon(RUN_ID, reason="stuck"))
    charge = _results(result.messages)["c2"]
    assert charge.content.startswith("Error: outcome unknown")
    assert "may or may not have taken effect" in charge.content
    with pytest.raises(CheckpointConflictError):
        store.record_result(RUN_ID, key, '{"result": "charged"}', version=version)
    validate_history(store.load(RUN_ID).state.messages)


def test_runs_abandon_prints_the_reason(
    store: Checkpointer, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fsm-agent runs abandon`` prints the reason it stored, not ``None``."""
    from fsm_agent.cli import runs

    _crashed_before_the_charge(store, Counter())
    runs._abandon(store, RUN_ID, "customer left")
    out = capsys.readouterr().out
    assert out.rstrip().endswith("; the run was abandoned: customer left"), out
