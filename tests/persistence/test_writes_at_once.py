"""SQLite makes a run's writes at once, on the event loop's thread, only when that waits for
nothing: another writer holding the database or ``fsync=True`` send them to the store's
thread, as do the writes of many runs in flight at once (which it commits together), a
failing write fails the run as it would there, and the WAL is copied back
into the database there, never by a commit on the loop's thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import Agent, RunHandle, State, StopReason, tool
from fsm_agent.persistence import SQLiteCheckpointer
from fsm_agent.persistence import sqlite as sqlite_store
from fsm_agent.persistence.run_log import AT_ONCE_RUNS, RunLog
from fsm_agent.persistence.store_threads import JobFailed
from fsm_agent.run_state import RunState
from fsm_agent.testing import ScriptedModel, fail, text, tool_call
from helpers import add


def _agent(store: SQLiteCheckpointer, steps: int = 3) -> Agent[None]:
    model = ScriptedModel([tool_call("add", {"a": n, "b": 1}) for n in range(steps)] + [text("ok")])
    return Agent(model, tools=[add], checkpointer=store)


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each ``write_now`` answered."""
    answers: list[bool] = []
    now = SQLiteCheckpointer.write_now

    def counted(self: SQLiteCheckpointer, calls: Any) -> bool:
        answers.append(now(self, calls))
        return answers[-1]

    monkeypatch.setattr(SQLiteCheckpointer, "write_now", counted)
    return answers


def test_a_run_on_sqlite_makes_its_awaited_writes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the database to itself, every awaited write of a run is made at once, and the
    stored run is whole."""
    answers = _counted(monkeypatch)
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    result = _agent(store).run_sync("go")
    assert result.ok and result.run_state is not None
    assert answers and all(answers)
    assert store.load(result.run_state.run_id).state.state is result.run_state.state
    assert len(store.checkpoints(result.run_state.run_id)) == len(result.run_state.trace)
    store.close()


def test_writes_go_to_the_stores_thread_while_another_writer_holds_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another connection holds the write lock: ``write_now`` does not wait for it (it makes
    nothing and says so), the writes wait on the store's thread instead, and the run completes
    once the lock is released."""
    answers = _counted(monkeypatch)
    path = tmp_path / "runs.db"
    store = SQLiteCheckpointer(path)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: other.execute("COMMIT"))

    async def main() -> bool:
        release.start()
        return (await _agent(store, steps=1).run("go")).ok

    try:
        assert asyncio.run(main())
    finally:
        release.join()
        other.close()
        store.close()
    assert answers[0] is False and any(answers)


def test_after_writes_made_at_once_the_stores_thread_still_waits_for_a_lock(
    tmp_path: Path,
) -> None:
    """``write_now`` never waits for a lock, but the connection's other uses still do: after
    writes made at once, a write on the store's thread waits for another writer's lock
    (within ``timeout_s``) instead of failing with ``StoreLockedError`` at once."""
    path = tmp_path / "runs.db"
    store = SQLiteCheckpointer(path, timeout_s=5.0)
    save = (partial(store.save, version=1), (RunState(run_id="run_x"),))
    assert store.write_now([save]) is True
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    assert store.write_now([]) is False  # no waiting at once
    release = threading.Timer(0.2, lambda: other.execute("COMMIT"))
    release.start()
    try:
        store.save(RunState(run_id="run_y"), version=1)  # waits for the lock
    finally:
        release.join()
        other.close()
    assert {s.run_id for s in store.runs()} == {"run_x", "run_y"}
    store.close()


def test_a_store_that_fsyncs_makes_no_write_at_once(tmp_path: Path) -> None:
    """``fsync=True``: every commit would wait for the disk, so none is made at once."""
    store = SQLiteCheckpointer(tmp_path / "runs.db", fsync=True)
    assert store.write_now([]) is False
    assert _agent(store, steps=1).run_sync("go").ok
    store.close()


def test_a_write_that_fails_at_once_is_rolled_back_and_named(tmp_path: Path) -> None:
    """A call that raises inside ``write_now`` rolls back what the calls before it wrote, and
    :class:`JobFailed` names it (its index) and its error, for the caller to settle as the
    store's thread would."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    problem = ValueError("no")

    def boom() -> None:
        raise problem

    save = (partial(store.save, version=1), (RunState(run_id="run_x"),))
    with pytest.raises(JobFailed) as failed:
        store.write_now([save, (boom, ())])
    assert (failed.value.index, failed.value.error) == (1, problem)
    assert store.runs() == []
    assert store.write_now([save]) is True  # the connection is free again
    assert [s.run_id for s in store.runs()] == ["run_x"]
    store.close()


def test_the_wal_is_copied_back_on_a_thread_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits made at once never copy the WAL back into the database (that fsyncs): a thread
    of the store's does, once every ``COPY_BACK_EVERY`` commits."""
    monkeypatch.setattr(sqlite_store, "COPY_BACK_EVERY", 4)
    copied: list[int] = []
    copy_back = SQLiteCheckpointer._copy_back

    def noted(self: SQLiteCheckpointer) -> None:
        copied.append(threading.get_ident())
        copy_back(self)

    monkeypatch.setattr(SQLiteCheckpointer, "_copy_back", noted)
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    loop_thread: list[int] = []

    async def main() -> bool:
        loop_thread.append(threading.get_ident())
        return (await _agent(store, steps=6).run("go")).ok

    assert asyncio.run(main())
    store.close()
    assert copied and loop_thread[0] not in copied


def test_writes_are_made_at_once_while_the_wal_is_copied_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy back of the WAL (which waits for the disk) does not hold the runs' writes: it
    copies on a connection of its own, and a write made meanwhile is made at once."""
    monkeypatch.setattr(sqlite_store, "COPY_BACK_EVERY", 2)
    copying, release = threading.Event(), threading.Event()
    copy_back = SQLiteCheckpointer._copy_back

    def slow(self: SQLiteCheckpointer) -> None:
        copying.set()
        release.wait(10)
        copy_back(self)

    monkeypatch.setattr(SQLiteCheckpointer, "_copy_back", slow)
    store = SQLiteCheckpointer(tmp_path / "runs.db")  # its schema: the first commit
    save = (partial(store.save, version=1), (RunState(run_id="run_x"),))
    assert store.write_now([save]) is True  # the second: the copy back starts
    assert copying.wait(10)
    try:
        saved = store.write_now([(partial(store.save, version=1), (RunState(run_id="run_y"),))])
    finally:
        release.set()
    assert saved is True
    store.close()
    assert {s.run_id for s in store_runs(tmp_path / "runs.db")} == {"run_x", "run_y"}


def test_the_wal_starts_over_after_a_copy_back_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the WAL is ``HELD_FRAMES`` long, a copy back copies what was committed during its
    passes with the writes held, so that the next commit starts the WAL over (the file does
    not grow) instead of appending to it."""
    monkeypatch.setattr(sqlite_store, "COPY_BACK_EVERY", 10**6)  # copied back by the test
    monkeypatch.setattr(sqlite_store, "HELD_FRAMES", 1)
    path = tmp_path / "runs.db"
    wal = path.parent / (path.name + "-wal")
    store = SQLiteCheckpointer(path)
    for n in range(20):
        assert store.write_now([(partial(store.save, version=1), (RunState(run_id=f"run_{n}"),))])
    copying = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    class WrittenThrough:
        """The copy back's connection; another writer's commit spans each of its passes."""

        def execute(self, sql: str) -> WrittenThrough:
            other.execute("BEGIN IMMEDIATE")
            self.rows = copying.execute(sql).fetchall()
            other.execute("INSERT INTO meta (key, value) VALUES (?, '')", (str(self.rows),))
            other.execute("COMMIT")
            return self

        def fetchall(self) -> list[Any]:
            return self.rows

        def close(self) -> None:
            copying.close()

    store._copying = WrittenThrough()  # type: ignore[assignment]
    store._copy_back()
    length = wal.stat().st_size
    assert store.write_now([(partial(store.save, version=1), (RunState(run_id="run_x"),))])
    assert wal.stat().st_size == length
    other.close()
    store.close()
    assert len(store_runs(path)) == 21


def store_runs(path: Path) -> list[Any]:
    """The runs stored at ``path``, read by a store of its own."""
    store = SQLiteCheckpointer(path)
    try:
        return store.runs()
    finally:
        store.close()


@tool(name="add")
async def add_slowly(a: int, b: int) -> int:
    """Add two numbers, slowly enough that the runs overlap."""
    await asyncio.sleep(0.02)
    return a + b


def test_many_runs_in_flight_write_through_the_stores_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While more than ``AT_ONCE_RUNS`` runs write through the store, none writes at once:
    the store's thread commits their writes together, and the loop's thread is left to the
    runs; once few are left, writes are made at once again."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    writing: list[int] = []
    now = SQLiteCheckpointer.write_now

    def noted(self: SQLiteCheckpointer, calls: Any) -> bool:
        writing.append(self.io_threads().writing)
        return now(self, calls)

    monkeypatch.setattr(SQLiteCheckpointer, "write_now", noted)

    async def main() -> list[bool]:
        agents = [
            Agent(
                ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("ok")]),
                tools=[add_slowly],
                checkpointer=store,
            )
            for _ in range(12)
        ]
        return [r.ok for r in await asyncio.gather(*(a.run("go") for a in agents))]

    assert all(asyncio.run(main()))
    store.close()
    assert writing and max(writing) <= AT_ONCE_RUNS


def test_a_model_calls_intent_deferred_with_its_outcome_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run nobody follows makes a model call's intent and outcome in one transaction, where
    the intent alone is never seen: only the outcome is written (a tool's intent, awaited
    before the tool starts, still is)."""
    intents: list[str] = []
    record_intent = SQLiteCheckpointer.record_intent

    def noted(self: SQLiteCheckpointer, run_id: str, key: str, kind: Any, *, version: int) -> None:
        intents.append(kind)
        record_intent(self, run_id, key, kind, version=version)

    monkeypatch.setattr(SQLiteCheckpointer, "record_intent", noted)
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    result = _agent(store, steps=2).run_sync("go")
    assert result.ok and result.run_state is not None
    assert intents == ["tool", "tool"]
    effects = store.effects(result.run_state.run_id)
    assert sorted(k for k, r in effects.items() if r.kind == "model") == [
        "1/model/1",
        "2/model/2",
        "3/model/3",
    ]
    assert all(r.result is not None for r in effects.values())
    store.close()


class _SlowThread(SQLiteCheckpointer):
    """A store whose writes on its own thread take a while: a write left to it after the run
    ended would land after the caller had looked."""

    def write_prepared(self, *prepared: Any) -> None:
        """Wait on the store's thread, then write."""
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.3)
        super().write_prepared(*prepared)


def test_a_run_that_fails_leaves_nothing_to_be_written_after_it(tmp_path: Path) -> None:
    """A run whose model adapter raises (not a model error: the run stops, not at rest) has
    every write stored when the error reaches the caller, the checkpoints it deferred after
    its tool turn included: the store does not change afterwards (it did, once the store's
    thread got to them)."""
    store = _SlowThread(tmp_path / "runs.db", fsync=True)  # its writes go to its thread
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 1}), fail(RuntimeError("it broke"))])
    with pytest.raises(RuntimeError, match="it broke"):
        Agent(model, tools=[add], checkpointer=store).run_sync("go")
    (run,) = store.runs()
    seen = store.load(run.run_id)
    store.close()  # after whatever was still handed to its thread
    again = SQLiteCheckpointer(tmp_path / "runs.db")
    assert again.load(run.run_id).version == seen.version
    assert seen.state.state is State.CALLING  # where it broke, the moves after the tool turn in
    again.close()


def test_a_cancel_while_a_failed_run_stores_its_writes_ends_it_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel of the caller's task that lands while a run stopped by an error stores its
    writes is a cancel: the run ends aborted with ``cancelled``, its handle has the result,
    ``after_run`` hears of it once, and the cancel goes on (it left the run in ``calling``,
    with no result and no ``after_run``)."""
    storing = asyncio.Event()
    interrupted = RunLog.interrupted

    async def held(self: RunLog) -> None:
        if not storing.is_set():  # the error's store: the caller's cancel lands here
            storing.set()
            await asyncio.Event().wait()
        await interrupted(self)

    monkeypatch.setattr(RunLog, "interrupted", held)
    endings: list[Any] = []

    class Ending:
        def after_run(self, *, result: Any, **kw: Any) -> None:
            endings.append(result)

    store = SQLiteCheckpointer(tmp_path / "runs.db")
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 1}), fail(RuntimeError("it broke"))])
    agent = Agent(model, tools=[add], checkpointer=store, hooks=[Ending()])
    handle = RunHandle()

    async def main() -> None:
        task = asyncio.create_task(agent.run("go", handle=handle))
        await storing.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    result = handle.result
    assert result is not None and result.state is State.ABORTED
    assert result.stop_reason is StopReason.CANCELLED
    assert endings == [result]
    store.close()


def test_a_tool_steps_checkpoints_are_written_by_one_statement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run nobody follows writes the two checkpoints after a tool turn, the model call's
    outcome and the checkpoint after the call in one transaction: the outcome goes first
    (fenced by the version the run held before those checkpoints), so that the three
    checkpoints are written as one; what is stored is whole."""
    written: list[int] = []
    write_prepared = SQLiteCheckpointer.write_prepared

    def counted(self: SQLiteCheckpointer, *prepared: Any) -> None:
        written.append(len(prepared))
        write_prepared(self, *prepared)

    monkeypatch.setattr(SQLiteCheckpointer, "write_prepared", counted)
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    result = _agent(store, steps=3).run_sync("go")
    assert result.ok and result.run_state is not None
    assert written[2:-1] == [3, 3, 3]  # after the first call; before the resting checkpoint
    run_id = result.run_state.run_id
    assert len(store.checkpoints(run_id)) == len(result.run_state.trace)
    effects = store.effects(run_id)
    assert len(effects) == 7 and all(r.result is not None for r in effects.values())
    store.close()


def test_a_run_whose_writes_were_all_made_at_once_starts_no_thread(tmp_path: Path) -> None:
    """When every write of a run was made at once, the store forgets the run where it ends:
    nothing of the run waits on the store's thread, so the thread is not started for it."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    result = _agent(store).run_sync("go")
    assert result.ok and result.run_state is not None
    assert not store.io_threads()._threads  # never started
    assert not store._saved  # forgotten
    assert len(store.checkpoints(result.run_state.run_id)) == len(result.run_state.trace)
    store.close()
