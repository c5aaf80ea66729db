"""Resume anywhere: a run stopped at any write continues from its checkpoint to the same result
(DESIGN §8, invariant 10); the write-ahead journal reuses recorded results and never re-runs a
non-idempotent tool; suspended runs resume by id; two workers cannot both own a run."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_scenario import PROMPT, RUN_ID, make_agent
from fsm_agent import Agent, Approval, RunResult, State, tool
from fsm_agent.errors import (
    CheckpointConflictError,
    ResumeError,
    RunFinishedError,
    UnknownRunError,
)
from fsm_agent.kernel.resuming import resume_context
from fsm_agent.persistence import Checkpoint, Checkpointer, InMemoryCheckpointer, SQLiteCheckpointer
from fsm_agent.testing import (
    CrashingCheckpointer,
    ScriptedModel,
    SimulatedCrash,
    Turn,
    crash_and_resume,
    resume_differences,
    text,
    tool_call,
)


def _baseline(parallel: bool = False) -> tuple[RunResult, int, int]:
    """The uninterrupted run, and how many checkpoints and writes it makes."""
    counting = CrashingCheckpointer(InMemoryCheckpointer(), 10**9, at="any")
    result = make_agent(counting, lambda _: None, parallel=parallel).run_sync(PROMPT)
    checkpoints = len(result.trace)
    return result, checkpoints, counting.writes


BASELINE, CHECKPOINTS, WRITES = _baseline()


def _crash(
    crash_after: int, at: str = "checkpoint", **kwargs: object
) -> tuple[RunResult, Counter[str]]:
    seen: Counter[str] = Counter()
    agent = make_agent(None, lambda what: seen.update([what]), **kwargs)  # type: ignore[arg-type]
    result, crashed = asyncio.run(crash_and_resume(agent, PROMPT, crash_after=crash_after, at=at))  # type: ignore[arg-type]
    assert crashed
    return result, seen


def test_the_scenario_makes_a_checkpoint_per_move_and_journals_its_calls() -> None:
    """The baseline run passes through retries, tools and verification, and completes."""
    assert BASELINE.ok and BASELINE.output == "Charged 5 after looking up a and b."
    assert BASELINE.counters.retries == 0 and BASELINE.counters.total_errors == 1
    assert WRITES > CHECKPOINTS >= 15


@pytest.mark.parametrize("crash_after", range(1, CHECKPOINTS + 1))
def test_a_crash_after_any_checkpoint_resumes_to_the_same_result(crash_after: int) -> None:
    """Invariant 10 at every checkpoint: output, stop reason, usage and thread are the same,
    and every tool ran exactly once."""
    result, seen = _crash(crash_after)
    assert resume_differences(BASELINE, result) == []
    assert result.counters == BASELINE.counters
    assert result.model_calls == BASELINE.model_calls
    assert result.tool_executions == BASELINE.tool_executions
    assert seen == Counter(model=5, lookup=2, charge=1)


@pytest.mark.parametrize("crash_after", range(1, WRITES + 1))
def test_a_crash_after_any_write_never_runs_the_charge_twice(crash_after: int) -> None:
    """At every write (intents and results too) the run resumes to an equivalent result; a
    charge whose intent was the last write is reported as outcome unknown, never re-run."""
    result, seen = _crash(crash_after, at="any")
    assert resume_differences(BASELINE, result) == []
    assert seen["charge"] <= 1
    assert seen["model"] == 5  # a recorded response is reused, never asked again
    unknown = [
        r
        for m in result.messages
        for r in m.tool_results
        if r.content.startswith("Error: outcome unknown")
    ]
    assert (seen["charge"] == 0) is bool(unknown)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 60), st.sampled_from(["checkpoint", "any"]), st.booleans())
def test_random_crash_points_resume_equivalently(crash_after: int, at: str, parallel: bool) -> None:
    """Invariant 10 with hypothesis-chosen interruption points, sequential and parallel tools."""
    baseline = _baseline(parallel)[0]
    seen: Counter[str] = Counter()
    agent = make_agent(None, lambda what: seen.update([what]), parallel=parallel)
    result, _ = asyncio.run(crash_and_resume(agent, PROMPT, crash_after=crash_after, at=at))  # type: ignore[arg-type]
    assert resume_differences(baseline, result) == []
    assert seen["charge"] <= 1


def _crash_in_charge(store: Checkpointer, seen: Counter[str], **kwargs: object) -> None:
    def crash() -> None:
        raise SimulatedCrash("the process died inside the charge")

    agent = make_agent(store, lambda what: seen.update([what]), after_charge=crash, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(SimulatedCrash):
        agent.run_sync(PROMPT)


def test_a_tool_cut_short_is_not_run_again_and_the_model_hears_outcome_unknown() -> None:
    """An intent without a result for a non-idempotent tool settles as "outcome unknown"."""
    store = InMemoryCheckpointer()
    seen: Counter[str] = Counter()
    _crash_in_charge(store, seen)
    agent = make_agent(store, lambda what: seen.update([what]), position=seen["model"])
    result = asyncio.run(agent.resume(RUN_ID))
    assert seen["charge"] == 1
    [unknown] = [r for m in result.messages for r in m.tool_results if r.call_id == "c2"]
    assert unknown.content.startswith("Error: outcome unknown")
    assert not unknown.is_error  # not a failed call: it may have succeeded
    assert "charge" in unknown.content and "c2" in unknown.content
    assert result.output == BASELINE.output


def test_an_idempotent_tool_cut_short_runs_again() -> None:
    """An intent without a result for an idempotent tool re-runs it, with its real result."""
    store = InMemoryCheckpointer()
    seen: Counter[str] = Counter()
    _crash_in_charge(store, seen, charge_idempotent=True)
    agent = make_agent(
        store, lambda what: seen.update([what]), position=seen["model"], charge_idempotent=True
    )
    result = asyncio.run(agent.resume(RUN_ID))
    assert seen["charge"] == 2
    assert resume_differences(BASELINE, result) == []


def test_a_tool_cut_short_can_be_settled_by_a_human() -> None:
    """With unknown_outcome="human" the run suspends with the question; the answer is the
    call's result."""
    store = InMemoryCheckpointer()
    seen: Counter[str] = Counter()
    _crash_in_charge(store, seen)
    agent = make_agent(
        store, lambda what: seen.update([what]), position=seen["model"], unknown_outcome="human"
    )
    suspended = asyncio.run(agent.resume(RUN_ID))
    assert suspended.state is State.SUSPENDED
    assert suspended.resume_handle is not None
    assert "Did it take effect?" in suspended.resume_handle.questions["c2"]
    done = asyncio.run(agent.resume(RUN_ID, {"c2": "charged 5"}))
    assert done.ok and seen["charge"] == 1
    assert resume_differences(BASELINE, done) == []


def test_counters_survive_a_crash_after_a_retried_error() -> None:
    """A crash right after the retry's checkpoint keeps the error counters."""
    retry_move = next(i for i, m in enumerate(BASELINE.trace) if m.dest is m.source)
    result, _ = _crash(retry_move + 1)
    assert result.counters.total_errors == 1
    assert result.counters == BASELINE.counters


@tool(needs_approval=True)
def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def _approval_agent(store: Checkpointer, turns: Sequence[Turn]) -> Agent[None]:
    return Agent(ScriptedModel(turns), tools=[pay], checkpointer=store)


def test_a_suspended_run_resumes_by_id_in_a_fresh_agent(tmp_path: Path) -> None:
    """The handle is persisted: another agent (another process) resumes with the decisions."""
    turns = [tool_call("pay", {"amount": 3}, id="p1"), text("paid")]
    suspended = _approval_agent(SQLiteCheckpointer(tmp_path / "r.db"), turns).run_sync("pay 3")
    assert suspended.state is State.SUSPENDED
    fresh = _approval_agent(SQLiteCheckpointer(tmp_path / "r.db"), turns[1:])
    with pytest.raises(ResumeError, match="needs a decision"):
        asyncio.run(fresh.resume(suspended.run_id, {}))
    done = asyncio.run(fresh.resume(suspended.run_id, {"p1": Approval.allow()}))
    assert done.ok and done.output == "paid"
    assert [r.content for m in done.messages for r in m.tool_results] == ["paid 3"]


def test_a_persisted_resume_handle_works_once(tmp_path: Path) -> None:
    """A ResumeHandle resumes through the store; using it again is refused."""
    turns = [tool_call("pay", {"amount": 3}, id="p1"), text("paid")]
    store = SQLiteCheckpointer(tmp_path / "r.db")
    suspended = _approval_agent(store, turns).run_sync("pay 3")
    assert suspended.resume_handle is not None
    agent = _approval_agent(store, turns[1:])
    assert asyncio.run(agent.resume(suspended.resume_handle, {"p1": False})).ok
    with pytest.raises(RunFinishedError):
        asyncio.run(agent.resume(suspended.resume_handle, {"p1": False}))


def test_decisions_recorded_before_a_crash_are_not_asked_again() -> None:
    """A crash right after the decisions were saved resumes by id without decisions."""
    turns = [tool_call("pay", {"amount": 3}, id="p1"), text("paid")]
    store = InMemoryCheckpointer()
    suspended = _approval_agent(store, turns).run_sync("pay 3")
    crashing = CrashingCheckpointer(store, 1)
    with pytest.raises(SimulatedCrash):
        asyncio.run(_approval_agent(crashing, turns[1:]).resume(suspended.run_id, {"p1": True}))
    agent = _approval_agent(store, turns[1:])
    with pytest.raises(ResumeError, match="does not wait for a human"):
        asyncio.run(agent.resume(suspended.run_id, {"p1": True}))
    assert asyncio.run(agent.resume(suspended.run_id)).output == "paid"


class _Stale:
    """A store whose load returns what another worker loaded before this one claimed."""

    def __init__(self, inner: Checkpointer, seen: Checkpoint) -> None:
        self.inner = inner
        self.seen = seen

    def load(self, run_id: str) -> Checkpoint:
        return self.seen

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_two_workers_resuming_one_run_one_wins_the_other_runs_nothing(tmp_path: Path) -> None:
    """Both load the same checkpoint; the second claim gets CheckpointConflictError."""
    store = SQLiteCheckpointer(tmp_path / "r.db")
    seen: Counter[str] = Counter()
    _crash_in_charge(store, seen)
    loaded = store.load(RUN_ID)
    winner = make_agent(store, lambda what: seen.update([what]), position=seen["model"])
    assert asyncio.run(winner.resume(RUN_ID)).ok
    calls = sum(seen.values())
    loser_store = _Stale(SQLiteCheckpointer(tmp_path / "r.db"), loaded)
    loser = make_agent(loser_store, lambda what: seen.update([what]))  # type: ignore[arg-type]
    with pytest.raises(CheckpointConflictError, match="another worker wrote it first"):
        asyncio.run(loser.resume(RUN_ID))
    assert sum(seen.values()) == calls


def test_a_zombie_worker_stops_at_its_next_write(tmp_path: Path) -> None:
    """A worker that lost the run to a resume stops at its next write, without writing."""
    path = tmp_path / "r.db"
    seen: Counter[str] = Counter()
    taken = False

    def take_over() -> None:
        nonlocal taken
        if not taken:
            taken = True
            other = make_agent(SQLiteCheckpointer(path), lambda _: None)
            resuming = resume_context(other, RUN_ID, None, None, None, None, False, False)
            with ThreadPoolExecutor(1) as worker:  # another worker, with a loop of its own
                ctx = worker.submit(asyncio.run, resuming).result()
            assert ctx.durable is not None  # the other worker claimed the run

    agent = make_agent(
        SQLiteCheckpointer(path), lambda w: seen.update([w]), before_charge=take_over
    )
    with pytest.raises(CheckpointConflictError):
        agent.run_sync(PROMPT)
    assert seen["charge"] == 1  # it was running; its result is not recorded
    assert SQLiteCheckpointer(path).effects(RUN_ID)["2/tool/c2"].result is None


def test_resume_refuses_unknown_and_finished_runs_and_misplaced_decisions() -> None:
    """Unknown id, finished run, decisions for a run that waits for none: typed errors."""
    store = InMemoryCheckpointer()
    agent = make_agent(store, lambda _: None)
    with pytest.raises(UnknownRunError, match="no checkpoint holds run 'nope'"):
        asyncio.run(agent.resume("nope"))
    agent.run_sync(PROMPT)
    with pytest.raises(RunFinishedError, match="already ended"):
        asyncio.run(agent.resume(RUN_ID))
    assert store.load(RUN_ID).state.state is State.DONE
    with pytest.raises(ResumeError, match="needs an agent with a checkpointer"):
        asyncio.run(make_agent(None, lambda _: None).resume(RUN_ID))


def test_a_resumed_run_streams_its_remaining_events() -> None:
    """resume_stream by id yields the rest of the run and ends with its terminal event."""
    store = InMemoryCheckpointer()
    agent = make_agent(CrashingCheckpointer(store, 5), lambda _: None)
    with pytest.raises(SimulatedCrash):
        agent.run_sync(PROMPT)
    agent.checkpointer = store

    async def collect() -> list[str]:
        return [e.type async for e in agent.resume_stream(RUN_ID)]

    types = asyncio.run(collect())
    assert types[-1] == "final" and types.count("final") == 1
