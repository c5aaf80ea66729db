"""What operators rely on, checked against SQLite and PostgreSQL: abandoning a run keeps what
its journal knows of each call and returns the reason; the PostgreSQL store keeps working while
the server ends its connections; a cut tool output is stored once; a recording takes any text
a durable run takes."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_durable_promises import _crashed_before_the_charge

from durable_scenario import PROMPT, RUN_ID, make_agent
from fsm_agent import Agent, Policy, RunAbandonedError, Runtime, State, StopReason, tool
from fsm_agent.errors import CheckpointConflictError, CheckpointError
from fsm_agent.messages import ToolResult, validate_history
from fsm_agent.persistence import Checkpointer, InMemoryCheckpointer
from fsm_agent.run_state import RunState
from fsm_agent.testing import (
    CrashingCheckpointer,
    ScriptedModel,
    SimulatedCrash,
    crash_and_resume,
    resume_differences,
    text,
    tool_call,
)
from fsm_agent.tools.output import PAGER_NAME
from postgres_store import DSN, postgres_checkpointer


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


def test_abandon_keeps_the_recorded_result_of_a_call_that_ran(db_store: Checkpointer) -> None:
    """A call whose result the journal holds keeps that result when the run is abandoned; a
    call that never started reads "not run"; the result carries the reason."""
    with pytest.raises(SimulatedCrash):
        make_agent(_CrashAfterTheCharge(db_store), lambda _: None).run_sync(PROMPT)
    result = asyncio.run(make_agent(db_store, lambda _: None).abandon(RUN_ID, reason="refunded"))
    results = _results(result.messages)
    assert results["c2"].content == "charged 5" and not results["c2"].is_error
    assert results["c3"].content.startswith("Error: not run: the run was abandoned")
    assert isinstance(result.error, RunAbandonedError) and result.error.reason == "refunded"
    stored = db_store.load(RUN_ID).state
    assert stored.state is State.ABORTED and stored.stop_reason is StopReason.CANCELLED
    assert _results(stored.messages) == results
    assert stored.error == str(result.error)
    validate_history(stored.messages)


def test_abandon_says_outcome_unknown_for_a_call_another_worker_is_running(
    db_store: Checkpointer,
) -> None:
    """A call with an intent and no outcome (running in a worker, or cut short by a crash)
    reads "outcome unknown" when the run is abandoned; that worker's result is then refused."""
    seen: Counter[str] = Counter()
    _, version, key = _crashed_before_the_charge(db_store, seen)
    db_store.record_intent(RUN_ID, key, "tool", version=version)  # worker A starts the charge
    result = asyncio.run(make_agent(db_store, lambda _: None).abandon(RUN_ID, reason="stuck"))
    charge = _results(result.messages)["c2"]
    assert charge.content.startswith("Error: outcome unknown")
    assert "may or may not have taken effect" in charge.content
    with pytest.raises(CheckpointConflictError):
        db_store.record_result(RUN_ID, key, '{"result": "charged"}', version=version)
    validate_history(db_store.load(RUN_ID).state.messages)


def test_runs_abandon_prints_the_reason(
    db_store: Checkpointer, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fsm-agent runs abandon`` prints the reason it stored, not ``None``."""
    from fsm_agent.cli import runs

    _crashed_before_the_charge(db_store, Counter())
    runs._abandon(db_store, RUN_ID, "customer left")
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


@pytest.mark.postgres
def test_a_call_whose_connection_ends_before_it_commits_is_made_again() -> None:
    """The server ends the connection a call was just given, before the call's first
    statement: the call is made again on a fresh connection, and reads and writes succeed."""
    import psycopg

    with postgres_checkpointer() as store:
        taken = store._take  # type: ignore[attr-defined]
        armed: list[str] = []  # the calls whose first connection the server ends
        ended: list[str] = []

        def take_then_end() -> Any:
            conn = taken()
            if armed:
                with psycopg.connect(DSN, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
                ended.append(armed.pop())
            return conn

        store._take = take_then_end  # type: ignore[attr-defined]
        calls: list[tuple[str, Any]] = [
            ("save", lambda: store.save(RunState(run_id="cut", state=State.CALLING), version=1)),
            ("runs", lambda: [r.run_id for r in store.runs()] == ["cut"]),
            ("intent", lambda: store.record_intent("cut", "1/tool/c", "tool", version=1) is None),
            ("load", lambda: store.load("cut").version == 1),
            ("effects", lambda: set(store.effects("cut")) == {"1/tool/c"}),
        ]
        for name, call in calls:
            armed.append(name)
            assert call() is not False, name
        assert ended == [name for name, _ in calls]


# -- a cut tool output is stored once ------------------------------------------------------------

BIG = "".join(f"{n:07d}\n" for n in range(125_000))  # 1 MB of numbered lines


def _paging_agent(store: Checkpointer | None, **kwargs: Any) -> Agent[None]:
    """A run that cuts a 1 MB output, then pages through it after later turns."""

    @tool(idempotent=True)  # run again when a crash cut it short: the pager needs its output
    def dump() -> str:
        """Return a large text."""
        return BIG

    return Agent(
        ScriptedModel(
            [
                tool_call("dump", {}, id="d1"),
                tool_call(PAGER_NAME, {"call_id": "d1", "offset": 600_000}, id="p1"),
                text("Read it."),
            ]
        ),
        tools=[dump],
        checkpointer=store,
        policy=Policy.model_validate({"tool_output": {"max_chars": 1_000}}),
        runtime=Runtime(new_id=lambda: "run_dump"),
        **kwargs,
    )


def _stored_chars(store: Checkpointer) -> int:
    """The characters of tool text the store holds: journaled results and stored outputs."""
    total = 0
    with store._reading() as cur:  # type: ignore[attr-defined]
        for table, column in (("effects", "result"), ("outputs", "text")):
            cur.execute(f"SELECT sum(length({column})) FROM {store._prefix}{table}")  # type: ignore[attr-defined]
            total += int(cur.fetchone()[0] or 0)
    return total


def test_a_cut_tool_output_is_stored_once(db_store: Checkpointer) -> None:
    """The journal's record of the tool's result and the run's store of cut outputs share one
    copy of the text; loading the run gives the whole output back."""
    result = _paging_agent(db_store).run_sync("dump")
    assert result.ok
    assert len(BIG) < _stored_chars(db_store) < 1.5 * len(BIG)
    loaded = db_store.load("run_dump").state
    assert loaded.tool_outputs == {"d1": BIG} == result.run_state.tool_outputs  # type: ignore[union-attr]


def test_every_checkpoint_of_a_run_gives_the_output_the_journal_holds(
    db_store: Checkpointer,
) -> None:
    """``checkpoints()`` (what a fork starts from) reads a cut output kept in the journal as
    ``load()`` does: it used to give the empty placeholder of the outputs row."""
    assert _paging_agent(db_store).run_sync("dump").ok
    last = db_store.checkpoints("run_dump")[-1].state  # type: ignore[attr-defined]
    assert last.tool_outputs == {"d1": BIG} == db_store.load("run_dump").state.tool_outputs


def test_an_output_a_hook_changed_is_stored_as_the_run_saw_it(db_store: Checkpointer) -> None:
    """When an after_tool hook changed the text, the journal does not hold it: the output is
    stored in full, and loading the run gives the changed text."""

    class Stamp:
        def after_tool(self, *, result: ToolResult, **_: Any) -> ToolResult:
            return result.model_copy(update={"content": "checked\n" + result.content})

    assert _paging_agent(db_store, hooks=[Stamp()]).run_sync("dump").ok
    assert db_store.load("run_dump").state.tool_outputs["d1"] == "checked\n" + BIG
    assert _stored_chars(db_store) > 2 * len(BIG)


def test_a_run_resumed_after_any_write_pages_the_stored_output(db_store: Checkpointer) -> None:
    """Crashed right after any write and resumed, the run reads the same page of the cut
    output as the uninterrupted run (the output comes back from wherever it is stored)."""
    expected = asyncio.run(_paging_agent(InMemoryCheckpointer()).run("dump"))
    crash_after, crashed = 1, True
    while crashed:
        _wipe(db_store)
        agent = _paging_agent(None)
        actual, crashed = asyncio.run(
            crash_and_resume(agent, "dump", crash_after=crash_after, at="any", store=db_store)
        )
        assert resume_differences(expected, actual) == [], crash_after
        crash_after += 1
    assert crash_after > 5


def _wipe(store: Checkpointer) -> None:
    """Empty the store's tables (the tests reuse one run id)."""
    with store._write() as cur:  # type: ignore[attr-defined]
        for table in ("checkpoints", "runs", "effects", "outputs"):
            cur.execute(f"DELETE FROM {store._prefix}{table}")  # type: ignore[attr-defined]


def test_a_store_from_before_shared_outputs_still_loads(tmp_path: Path) -> None:
    """A SQLite store at schema 3 (every cut output in full in its own table) is migrated and
    gives its runs' outputs back."""
    from fsm_agent.persistence import SQLiteCheckpointer
    from fsm_agent.persistence.sql import MIGRATIONS

    new = SQLiteCheckpointer(tmp_path / "new.db")
    assert _paging_agent(new).run_sync("dump").ok
    new.close()
    old = sqlite3.connect(tmp_path / "old.db")
    old.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    for statements in MIGRATIONS[:3]:
        for statement in statements:
            old.execute(statement.format(t="", real="REAL"))
    old.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    old.execute("ATTACH DATABASE ? AS new", (str(tmp_path / "new.db"),))
    for table in ("runs", "checkpoints", "effects"):
        old.execute(f"INSERT INTO {table} SELECT * FROM new.{table}")
    old.execute("INSERT INTO outputs VALUES ('run_dump', 'd1', ?)", (BIG,))
    old.commit()
    old.close()
    store = SQLiteCheckpointer(tmp_path / "old.db")
    assert store.schema_version() == len(MIGRATIONS)
    assert store.load("run_dump").state.tool_outputs == {"d1": BIG}
    store.close()


# -- recordings take what JSON cannot carry ----------------------------------------------------


def test_a_recording_takes_a_lone_surrogate_and_replays(tmp_path: Path) -> None:
    """A prompt, a tool result and a model's answer with lone surrogates (a "\\ud800" escape
    on the wire), which a durable run stores, are recorded with them replaced by U+FFFD, and
    the recording replays."""
    from fsm_agent.replay import read_recording, record, replay

    answer = "caf\ud800 au lait"

    @tool
    def menu(item: str) -> str:
        """Look an item up."""
        return f"{item}: 3 \udcff"

    def agent(store: Checkpointer | None) -> Agent[None]:
        model = ScriptedModel([tool_call("menu", {"item": answer}, id="m1"), text(answer)])
        return Agent(model, tools=[menu], checkpointer=store)

    prompt = "coffee\udcff?"
    assert agent(InMemoryCheckpointer()).run_sync(prompt).ok  # what a durable run does
    path = tmp_path / "run.jsonl"
    result = asyncio.run(record(agent(None), prompt, path))
    assert result.ok and result.output == answer
    recorded = read_recording(path)
    assert recorded.header.input.text == "coffee\ufffd?"
    [final] = [e for e in recorded.events if e.type == "final"]
    assert final.output == "caf\ufffd au lait"  # type: ignore[attr-defined]
    report = asyncio.run(replay(path))
    assert report.ok, report.divergence
