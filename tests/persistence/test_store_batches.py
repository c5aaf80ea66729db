"""The store's threads make the writes queued together in one transaction: one commit for many
runs' writes, with each write's outcome its own (a failing write does not fail the others of
its batch), and every write of a batch failing when the commit fails."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import Agent, State
from fsm_agent.errors import CheckpointConflictError, CheckpointError
from fsm_agent.persistence import Checkpointer, SQLiteCheckpointer
from fsm_agent.persistence.store_threads import Lane, StoreThreads
from fsm_agent.run_state import RunState
from fsm_agent.testing import ScriptedModel, text, tool_call
from helpers import add


async def _held(lane: Lane) -> Callable[[], None]:
    """Occupy the lane's thread until the returned function is called, so that the writes
    queued meanwhile are taken together."""
    gate, busy = threading.Event(), threading.Event()

    def hold() -> None:
        busy.set()
        gate.wait(5)

    lane.submit(hold)
    assert await asyncio.to_thread(busy.wait, 5)
    return gate.set


def _counting_threads() -> tuple[StoreThreads, list[str], list[int]]:
    """Store threads on one thread whose batches note how many writes were made when each
    began; the writes of the tests append to the returned list."""
    entered: list[int] = []
    made: list[str] = []

    @contextmanager
    def batch() -> Iterator[None]:
        entered.append(len(made))
        yield

    return StoreThreads(1, "test-store", batch), made, entered


def test_writes_queued_together_are_made_in_one_transaction() -> None:
    """Five writes of two runs, queued while the thread was busy, enter the store's batch once
    and are all made, in each run's order."""
    threads, made, entered = _counting_threads()

    async def main() -> None:
        first, second = threads.lane(), threads.lane()
        release = await _held(first)
        waits = [
            first.call(made.append, "a1"),
            second.call(made.append, "b1"),
            first.call(made.append, "a2"),
            second.call(made.append, "b2"),
            first.call(made.append, "a3"),
        ]
        release()
        await asyncio.gather(*waits)

    asyncio.run(main())
    threads.close()
    assert entered == [0]
    assert made == ["a1", "b1", "a2", "b2", "a3"]


def test_a_failed_commit_fails_every_write_of_its_batch_and_their_lanes() -> None:
    """When the batch's commit fails, each write of it gets that error, and the lanes' later
    writes fail the same way without being made."""
    made: list[str] = []

    @contextmanager
    def batch() -> Iterator[None]:
        yield
        raise CheckpointError("the disk went away at the commit")

    threads = StoreThreads(1, "test-store", batch)

    async def main() -> None:
        first, second = threads.lane(), threads.lane()
        release = await _held(first)
        waits = [first.call(made.append, "a1"), second.call(made.append, "b1")]
        release()
        outcomes = await asyncio.gather(*waits, return_exceptions=True)
        assert all(isinstance(o, CheckpointError) and "commit" in str(o) for o in outcomes)
        made.clear()
        with pytest.raises(CheckpointError, match="commit"):
            await second.call(made.append, "b2")

    asyncio.run(main())
    threads.close()
    assert made == []


def _state(run_id: str) -> RunState:
    return RunState(run_id=run_id, state=State.CALLING)


def test_a_write_that_fails_in_a_batch_leaves_the_others_committed(db_store: Checkpointer) -> None:
    """In one batch, run B's write names a version it does not hold: B gets the conflict, and
    run A's writes before and after it are committed all the same."""
    for run_id in ("A", "B"):
        db_store.save(_state(run_id), version=1)
    threads: StoreThreads = db_store.io_threads()  # type: ignore[attr-defined]

    async def main() -> list[Any]:
        a, b = threads.lane(), threads.lane()
        release = await _held(a)
        waits = [
            a.call(partial(db_store.record_intent, "A", "1/tool/x", "tool", version=1)),
            b.call(partial(db_store.record_intent, "B", "1/tool/y", "tool", version=7)),
            a.call(partial(db_store.record_result, "A", "1/tool/x", "done", version=1)),
        ]
        release()
        return await asyncio.gather(*waits, return_exceptions=True)

    outcomes = asyncio.run(main())
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], CheckpointConflictError)
    assert db_store.effects("A")["1/tool/x"].result == "done"
    assert db_store.effects("B") == {}


def test_a_write_that_fails_in_a_batch_is_not_made_again() -> None:
    """A write that would fail only once, inside a batch, gets that error and is not retried
    behind the run's back; the batch's other writes are made."""
    calls: list[str] = []

    def flaky() -> None:
        calls.append("flaky")
        if calls.count("flaky") == 1:
            raise CheckpointError("the disk is full")

    @contextmanager
    def batch() -> Iterator[None]:
        yield

    threads = StoreThreads(1, "test-store", batch)

    async def main() -> list[Any]:
        first, second = threads.lane(), threads.lane()
        release = await _held(first)
        waits = [first.call(calls.append, "a"), second.call(flaky), first.call(calls.append, "b")]
        release()
        return await asyncio.gather(*waits, return_exceptions=True)

    outcomes = asyncio.run(main())
    threads.close()
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], CheckpointError)
    assert calls == ["a", "flaky", "a", "b"]  # "a" again: its batch was rolled back


def test_a_database_error_inside_a_batch_reaches_the_run_typed(tmp_path: Path) -> None:
    """SQLite's own error, raised by one write of a batch, reaches its run as a
    CheckpointError, as it would for a write made alone; the other run's write is stored."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    store.save(_state("A"), version=1)
    with store._write() as cur:
        cur.execute("DROP TABLE outputs")
    threads: StoreThreads = store.io_threads()
    broken = _state("A").model_copy(update={"tool_outputs": {"out-1": "the whole text"}})

    async def main() -> list[Any]:
        a, b = threads.lane(), threads.lane()
        release = await _held(a)
        waits = [
            a.call(partial(store.save, broken, version=2)),
            b.call(partial(store.save, _state("B"), version=1)),
        ]
        release()
        return await asyncio.gather(*waits, return_exceptions=True)

    outcomes = asyncio.run(main())
    assert isinstance(outcomes[0], CheckpointError) and outcomes[1] is None
    assert {run.run_id: run.version for run in store.runs()} == {"A": 1, "B": 1}
    store.close()


async def failing(lane: Lane, made: list[str]) -> None:
    def fail() -> None:
        raise CheckpointError("full disk")

    with pytest.raises(CheckpointError, match="full disk"):
        await lane.call(made.append, "e", after=[(made.append, ("d",)), (fail, ())])
    assert made[-1] == "d"  # made before the failure; "e", after it, is not


def test_writes_handed_over_together_keep_their_own_outcomes() -> None:
    """``call(after=...)`` hands the deferred writes and the awaited one to the thread at once:
    they are made in order in one batch, and a deferred write that fails fails the lane (the
    awaited write after it is not made) without undoing the writes before it."""
    threads, made, entered = _counting_threads()

    async def main() -> None:
        lane = threads.lane()
        await lane.call(made.append, "c", after=[(made.append, ("a",)), (made.append, ("b",))])
        assert (made, entered) == (["a", "b", "c"], [0])

    try:
        asyncio.run(main())
    finally:
        threads.close()
    alone = StoreThreads(1, "test-store")  # no batch: no rollback to undo "d" in this double
    try:
        asyncio.run(failing(alone.lane(), made))
    finally:
        alone.close()


def test_a_run_nobody_follows_makes_a_steps_writes_in_two_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In ``sync`` mode a run without a listener or hooks makes the writes it does not await
    (checkpoints, the model's records, the tool's outcome) with the next awaited one, in one
    transaction: two per tool step (the tool's intent, the wait before the next model call),
    not one per write, whether made at once or handed to the store's thread, and every
    checkpoint is still stored."""
    transactions: list[int] = []
    put, now = StoreThreads.put, SQLiteCheckpointer.write_now

    def handed(self: StoreThreads, thread: int, jobs: Any) -> None:
        transactions.append(len(jobs))
        put(self, thread, jobs)

    def at_once(self: SQLiteCheckpointer, calls: Any) -> bool:
        made = now(self, calls)
        if made:
            transactions.append(len(calls))
        return made

    monkeypatch.setattr(StoreThreads, "put", handed)
    monkeypatch.setattr(SQLiteCheckpointer, "write_now", at_once)
    steps = 5
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    model = ScriptedModel([tool_call("add", {"a": n, "b": 1}) for n in range(steps)] + [text("ok")])
    agent = Agent(model, tools=[add], checkpointer=store)
    result = agent.run_sync("go")
    assert result.ok and result.run_state is not None
    assert len(transactions) <= 2 * (steps + 1) + 2, transactions
    # per step: 3 checkpoints in 2 writes (consecutive ones as one), 3 journal records (the
    # model's intent made with its outcome is not written) and the wait before the model call
    assert sum(transactions) >= 6 * steps
    assert len(store.checkpoints(result.run_state.run_id)) == len(result.run_state.trace)
    store.close()
