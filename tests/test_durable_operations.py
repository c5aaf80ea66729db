"""What operators rely on, checked against SQLite and PostgreSQL: abandoning a run keeps what
its journal knows of each call and returns the reason; the PostgreSQL store keeps working while
the server ends its connections."""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter

import pytest

from durable_scenario import PROMPT, RUN_ID, make_agent
from fsm_agent import RunAbandonedError, State, StopReason
from fsm_agent.errors import CheckpointConflictError, CheckpointError
from fsm_agent.messages import ToolResult, validate_history
from fsm_agent.persistence import Checkpointer, CrashingCheckpointer, SimulatedCrash
from fsm_agent.run_state import RunState
from postgres_store import DSN, postgres_checkpointer
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


# -- the PostgreSQL store under a storm of terminated backends -------------------------------------

_ROUNDS = 20


def _storm(schema: str, done: threading.Event, killed: list[int]) -> None:
    """End every backend of the store's pool, every 0.1 to 0.3 s, ``_ROUNDS`` times."""
    import psycopg

    pause = random.Random(29)
    try:
        with psycopg.connect(DSN, autocommit=True) as admin:
            for _ in range(_ROUNDS):
                row = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (f"fsm_agent:{schema}",),
                ).fetchone()
                killed.append(0 if row is None else int(row[0]))
                done.wait(pause.uniform(0.1, 0.3))
    finally:
        done.set()


def _latest_version(store: Checkpointer, run_id: str) -> int:
    """The stored version of ``run_id``, read again while a read loses its connection."""
    for _ in range(50):
        try:
            return store.load(run_id).version
        except CheckpointError:
            continue
    raise AssertionError("the store never answered a read")


@pytest.mark.postgres
def test_the_postgres_store_works_through_a_storm_of_terminated_backends() -> None:
    """While the server ends every connection of the store's pool again and again, the store
    takes fresh connections: no call waits out its timeout for one, calls keep succeeding, and
    every write that returned is stored."""
    pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")
    with postgres_checkpointer() as store:
        state = RunState(run_id="storm", state=State.CALLING)
        store.save(state, version=1)
        version, recorded, failures, done = 1, set(), [], threading.Event()
        killed: list[int] = []
        killer = threading.Thread(target=_storm, args=(store.schema, done, killed))
        killer.start()
        try:
            while not done.is_set():
                try:
                    store.save(state, version=version + 1)
                    version += 1
                    store.record_result("storm", f"{version}/tool/c", '"ok"', version=version)
                    recorded.add(f"{version}/tool/c")
                except CheckpointError as exc:  # the call's own connection was ended under it
                    failures.append(str(exc))
                    version = _latest_version(store, "storm")
        finally:
            done.set()
            killer.join()
        assert not [f for f in failures if "no connection" in f], failures
        assert len(recorded) >= _ROUNDS and len(recorded) > len(failures), failures
        assert sum(killed) >= _ROUNDS // 2, killed  # the storm did reach the store
        assert _latest_version(store, "storm") >= version
        assert recorded <= set(store.effects("storm"))
