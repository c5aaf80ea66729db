"""What durable runs promise, checked against SQLite and PostgreSQL: at most once under racing
workers, cancellation as an interruption, a damaged store named as such, the agent's definition
checked on resume, counters that a crash does not change, text that JSON cannot carry."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from durable_scenario import PROMPT, RUN_ID, make_agent
from fsm_agent import Agent, Policy, Runtime, State, StopReason, tool
from fsm_agent.errors import (
    CheckpointConflictError,
    CorruptCheckpointError,
    DefinitionChangedError,
    RunFinishedError,
)
from fsm_agent.events import AbortedEvent
from fsm_agent.messages import validate_history
from fsm_agent.persistence import (
    Checkpoint,
    Checkpointer,
    EffectRecord,
    InMemoryCheckpointer,
    RunSummary,
    SQLiteCheckpointer,
)
from fsm_agent.run_state import RunState
from fsm_agent.testing import CrashingCheckpointer, ScriptedModel, SimulatedCrash, text, tool_call
from postgres_store import DSN, postgres_checkpointer


def _raw(store: Checkpointer, sql: str) -> None:
    """Run one statement on the store's database, behind its back."""
    with store._write() as cur:  # type: ignore[attr-defined]
        cur.execute(sql.format(t=store._prefix))  # type: ignore[attr-defined]


class Hooked:
    """A store that calls ``before_save`` before its first save (the claim of a resume): the
    moment another worker acts, forced instead of hoped for."""

    def __init__(self, inner: Checkpointer, before_save: Callable[[], None]) -> None:
        self.inner = inner
        self.before_save: Callable[[], None] | None = before_save

    def save(self, state: RunState, *, version: int) -> None:
        """Call the hook once, then store."""
        hook, self.before_save = self.before_save, None
        if hook is not None:
            hook()
        self.inner.save(state, version=version)

    def load(self, run_id: str) -> Checkpoint:
        """The inner store's."""
        return self.inner.load(run_id)

    def record_intent(
        self, run_id: str, key: str, kind: Literal["model", "tool"], *, version: int
    ) -> None:
        """The inner store's."""
        self.inner.record_intent(run_id, key, kind, version=version)

    def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
        """The inner store's."""
        self.inner.record_result(run_id, key, result, version=version)

    def effects(self, run_id: str) -> dict[str, EffectRecord]:
        """The inner store's."""
        return self.inner.effects(run_id)

    def runs(self) -> list[RunSummary]:
        """The inner store's."""
        return self.inner.runs()

    def close(self) -> None:
        """Nothing: the test closes the inner store."""


def _checkpoint_before_the_charge() -> int:
    """How many checkpoints the scenario writes before the charge's intent (so that a crash
    after that many leaves the charge pending and unjournaled)."""
    for crash_after in range(1, 40):
        memory = InMemoryCheckpointer()
        agent = make_agent(CrashingCheckpointer(memory, crash_after), lambda _: None)
        with pytest.raises(SimulatedCrash):
            agent.run_sync(PROMPT)
        state = memory.load(RUN_ID).state
        key = f"{state.counters.steps}/tool/c2"
        pending = [c.id for c in state.pending_tool_calls]
        if (
            state.state is State.DISPATCHING
            and "c2" in pending
            and key not in memory.effects(RUN_ID)
        ):
            return crash_after
    raise AssertionError("the scenario never waits to dispatch the charge")


BEFORE_CHARGE = _checkpoint_before_the_charge()


def _crashed_before_the_charge(store: Checkpointer, seen: Counter[str]) -> tuple[int, int, str]:
    """Worker A's run, stopped with the charge pending: its model position, the version it
    holds and the charge's journal key."""
    agent = make_agent(CrashingCheckpointer(store, BEFORE_CHARGE), lambda w: seen.update([w]))
    with pytest.raises(SimulatedCrash):
        agent.run_sync(PROMPT)
    checkpoint = store.load(RUN_ID)
    key = f"{checkpoint.state.counters.steps}/tool/c2"
    return agent.model.position, checkpoint.version, key  # type: ignore[attr-defined]


def test_a_resume_racing_a_live_worker_never_runs_its_tool_again(db_store: Checkpointer) -> None:
    """Worker B loads the run; worker A, still alive, journals the charge's intent and starts
    it; then B claims the run. B reads the journal after its claim, so it sees A's intent and
    settles the charge as outcome unknown instead of charging again; A's next write fails."""
    seen: Counter[str] = Counter()
    position, version, key = _crashed_before_the_charge(db_store, seen)

    def worker_a_charges() -> None:
        db_store.record_intent(RUN_ID, key, "tool", version=version)
        seen.update(["charge"])  # A's charge is under way

    b = make_agent(
        Hooked(db_store, worker_a_charges), lambda w: seen.update([w]), position=position
    )  # type: ignore[arg-type]
    result = asyncio.run(b.resume(RUN_ID))
    assert seen["charge"] == 1  # A's only
    [charge] = [r for m in result.messages for r in m.tool_results if r.call_id == "c2"]
    assert charge.content.startswith("Error: outcome unknown")
    with pytest.raises(CheckpointConflictError):  # A lost the run: its result is refused
        db_store.record_result(RUN_ID, key, '{"result": "charged"}', version=version)


def test_the_losing_resume_runs_nothing(db_store: Checkpointer) -> None:
    """Two workers resume one run: the second claim fails before anything runs."""
    seen: Counter[str] = Counter()
    position, _, _ = _crashed_before_the_charge(db_store, seen)
    winner = make_agent(db_store, lambda w: seen.update([w]), position=position)
    after_winner: list[Counter[str]] = []

    def winner_resumes() -> None:  # between the loser's load and its claim
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as other:
            other.submit(asyncio.run, winner.resume(RUN_ID)).result()
        after_winner.append(Counter(seen))

    loser = make_agent(
        Hooked(db_store, winner_resumes), lambda w: seen.update([w]), position=position
    )  # type: ignore[arg-type]
    with pytest.raises(CheckpointConflictError):
        asyncio.run(loser.resume(RUN_ID))
    assert after_winner == [seen]  # the loser called no model and ran no tool
    assert seen["charge"] == 1  # the winner's
    assert db_store.load(RUN_ID).state.state is State.DONE


def test_a_deleted_newest_checkpoint_is_damage_not_another_worker(db_store: Checkpointer) -> None:
    """A store missing its newest checkpoint row says so, instead of blaming another worker."""
    seen: Counter[str] = Counter()
    position, version, _ = _crashed_before_the_charge(db_store, seen)
    _raw(
        db_store, f"DELETE FROM {{t}}checkpoints WHERE run_id = '{RUN_ID}' AND version = {version}"
    )
    with pytest.raises(CorruptCheckpointError, match="checkpoint row was deleted"):
        asyncio.run(make_agent(db_store, lambda _: None, position=position).resume(RUN_ID))


# -- cancellation is an interruption --------------------------------------------------------------


def _cancellable(
    store: Checkpointer, started: asyncio.Event | None, seen: Counter[str]
) -> Agent[None]:
    @tool
    async def wait(ticket: int) -> str:
        """Wait for a ticket."""
        seen.update(["wait"])
        if started is not None:
            started.set()
            await asyncio.sleep(30)
        return f"ticket {ticket} served"

    return Agent(
        ScriptedModel([tool_call("wait", {"ticket": 7}, id="w1"), text("Served.")]),
        tools=[wait],
        checkpointer=store,
        runtime=Runtime(new_id=lambda: "run_cancel"),
    )


def test_a_cancelled_durable_run_stays_resumable_until_abandoned(db_store: Checkpointer) -> None:
    """task.cancel() leaves the run resumable from its latest checkpoint; resuming finishes
    it; abandon() ends a run for good."""
    seen: Counter[str] = Counter()

    async def cancel_mid_tool() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(_cancellable(db_store, started, seen).run("serve"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_tool())
    stored = db_store.load("run_cancel").state
    assert stored.state not in (State.DONE, State.ABORTED)
    result = asyncio.run(_cancellable(db_store, None, seen).resume("run_cancel"))
    assert result.ok and result.output == "Served."

    asyncio.run(cancel_mid_tool_again(db_store, seen))
    abandoned = asyncio.run(_cancellable(db_store, None, seen).abandon("run_cancel"))
    assert abandoned.state is State.ABORTED and abandoned.stop_reason is StopReason.CANCELLED
    with pytest.raises(RunFinishedError):
        asyncio.run(_cancellable(db_store, None, seen).resume("run_cancel"))


async def cancel_mid_tool_again(store: Checkpointer, seen: Counter[str]) -> None:
    """A second run under the same id (the first is done): start, then cancel it by handle."""
    _raw(store, "DELETE FROM {t}checkpoints WHERE run_id = 'run_cancel'")
    _raw(store, "DELETE FROM {t}runs WHERE run_id = 'run_cancel'")
    _raw(store, "DELETE FROM {t}effects WHERE run_id = 'run_cancel'")
    started = asyncio.Event()
    agent = _cancellable(store, started, seen)
    from fsm_agent import RunHandle

    handle = RunHandle()
    events: list[Any] = []

    async def listen() -> None:
        async for event in agent.run_stream("serve", handle=handle):
            events.append(event)

    task = asyncio.create_task(listen())
    await started.wait()
    handle.cancel()
    await task
    assert handle.result is not None and handle.result.stop_reason is StopReason.CANCELLED
    assert any(
        isinstance(e, AbortedEvent) and e.stop_reason is StopReason.CANCELLED for e in events
    )
    assert store.load("run_cancel").state.state not in (State.DONE, State.ABORTED)


# -- the agent's definition -----------------------------------------------------------------------


def test_resuming_under_another_definition_is_refused_unless_allowed(
    db_store: Checkpointer,
) -> None:
    """A run started under one system prompt is not resumed under another without consent."""
    seen: Counter[str] = Counter()
    position, _, _ = _crashed_before_the_charge(db_store, seen)
    other = make_agent(db_store, lambda w: seen.update([w]), position=position)
    other.system_prompt = "Spend freely."
    before = Counter(seen)
    with pytest.raises(DefinitionChangedError, match="system_prompt") as caught:
        asyncio.run(other.resume(RUN_ID))
    assert caught.value.changed == ("system_prompt",)
    assert seen == before  # nothing ran
    result = asyncio.run(other.resume(RUN_ID, allow_changed_definition=True))
    assert result.ok


def test_equal_policies_give_one_fingerprint() -> None:
    """A set's iteration order depends on how it was built: two equal policies whose retryable
    statuses were inserted in another order give one fingerprint, so a worker resumes them."""
    from fsm_agent.policy import RetryPolicy

    def agent(statuses: list[int]) -> Agent[None]:
        policy = Policy(retry=RetryPolicy(retryable_statuses=frozenset(statuses)))
        return Agent(ScriptedModel([text("hi")]), policy=policy)

    one, other = agent([504, 408, 429]), agent([408, 504, 429])
    assert one.policy == other.policy
    assert one._plan.definition == other._plan.definition


# -- counters after a crash -----------------------------------------------------------------------


def test_an_outcome_unknown_result_is_not_a_failed_tool_turn() -> None:
    """A charge cut short by a crash settles as outcome unknown; the resumed run's counters
    equal those of the run that was not interrupted."""

    def agent(store: Checkpointer, crash: bool) -> Agent[None]:
        @tool
        def charge(amount: int) -> str:
            """Charge an amount."""
            if crash:
                raise SimulatedCrash("the process died inside the charge")
            return f"charged {amount}"

        return Agent(
            ScriptedModel([tool_call("charge", {"amount": 5}, id="c1"), text("Done.")]),
            tools=[charge],
            checkpointer=store,
            runtime=Runtime(new_id=lambda: "run_count"),
        )

    baseline = agent(InMemoryCheckpointer(), crash=False).run_sync("charge 5")
    store = InMemoryCheckpointer()
    with pytest.raises(SimulatedCrash):
        agent(store, crash=True).run_sync("charge 5")
    resumed_agent = agent(store, crash=False)
    resumed_agent.model.calls = 1  # type: ignore[attr-defined]
    resumed = asyncio.run(resumed_agent.resume("run_count"))
    [charge] = [r for m in resumed.messages for r in m.tool_results]
    assert charge.content.startswith("Error: outcome unknown")
    assert resumed.counters == baseline.counters


# -- text JSON cannot carry -----------------------------------------------------------------------


def test_lone_surrogates_are_replaced_and_the_history_says_so(db_store: Checkpointer) -> None:
    """A tool output and a model answer with lone surrogates checkpoint and resume."""
    name = os.fsdecode(b"report-\xff.txt")  # a lone surrogate, as the file system gives it

    @tool
    def listing() -> str:
        """List the files."""
        return f"found {name}"

    agent = Agent(
        ScriptedModel([tool_call("listing", {}, id="l1"), text(f"The file is {name}.")]),
        tools=[listing],
        checkpointer=db_store,
        runtime=Runtime(new_id=lambda: "run_text"),
    )
    result = agent.run_sync("list")
    assert result.ok and result.output is not None
    assert "\ufffd" in result.output and "replaced with U+FFFD" in result.output
    [found] = [r for m in result.messages for r in m.tool_results]
    assert found.content.startswith("found report-\ufffd.txt") and "1 character" in found.content
    assert tuple(db_store.load("run_text").state.messages) == tuple(result.messages)


# -- what a checkpoint costs ----------------------------------------------------------------------


def test_a_checkpoint_does_not_grow_with_the_history(tmp_path: Path) -> None:
    """A cut tool output is written once; the checkpoint of turn 10 is about as big as that of
    turn 1, and the store keeps nothing for a run once it ended."""
    big = "x" * 200_000
    turns = [tool_call("fetch", {"n": n}, id=f"f{n}") for n in range(10)] + [text("Done.")]

    @tool
    def fetch(n: int) -> str:
        """Fetch a page."""
        return big if n == 0 else f"page {n}"

    store = SQLiteCheckpointer(tmp_path / "runs.db")
    agent = Agent(
        ScriptedModel(turns),
        tools=[fetch],
        checkpointer=store,
        policy=Policy.model_validate({"max_steps": 50, "tool_output": {"max_chars": 1_000}}),
        runtime=Runtime(new_id=lambda: "run_big"),
    )
    result = agent.run_sync("fetch ten pages")
    assert result.ok
    db = sqlite3.connect(tmp_path / "runs.db")
    sizes = [
        row[0]
        for row in db.execute(
            "SELECT length(body) + length(messages) + length(trace) FROM checkpoints "
            "WHERE run_id = 'run_big' ORDER BY version"
        )
    ]
    assert max(sizes) < 20_000, sizes  # the 200 KB output is in none of them
    (written,) = db.execute("SELECT count(*) FROM outputs WHERE run_id = 'run_big'").fetchone()
    assert written == 1
    assert store._saved == {}  # type: ignore[attr-defined]
    assert store.load("run_big").state.tool_outputs == result.run_state.tool_outputs
    store.close()


def test_a_shared_store_keeps_nothing_for_runs_that_ended(tmp_path: Path) -> None:
    """Many runs through one store leave no per-run memory behind, ended or crashed."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    ids = iter(f"run_{n}" for n in range(40))
    for n in range(20):
        agent = Agent(
            ScriptedModel([text(f"answer {n}")]),
            checkpointer=store,
            runtime=Runtime(new_id=lambda: next(ids)),
        )
        agent.run_sync("hi")
    for _ in range(20):
        agent = Agent(
            ScriptedModel([text("never")]),
            checkpointer=CrashingCheckpointer(store, 2),
            runtime=Runtime(new_id=lambda: next(ids)),
        )
        with pytest.raises(SimulatedCrash):
            agent.run_sync("hi")
    changed = Agent(ScriptedModel([text("never")]), checkpointer=store, system_prompt="Other.")
    with pytest.raises(RunFinishedError):  # a resume refused after loading the run
        asyncio.run(changed.resume("run_0"))
    with pytest.raises(DefinitionChangedError):
        asyncio.run(changed.resume("run_39"))
    assert store._saved == {}  # type: ignore[attr-defined]
    store.close()


def test_runs_abandon_ends_a_run_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fsm-agent runs abandon`` ends a resumable run; abandoning it again is refused."""
    from fsm_agent.cli import main

    path = tmp_path / "runs.db"
    store = SQLiteCheckpointer(path)
    _crashed_before_the_charge(store, Counter())
    store.close()
    assert main(["runs", "abandon", RUN_ID, "--db", str(path), "--reason", "customer left"]) == 0
    assert "abandoned" in capsys.readouterr().out
    stored = SQLiteCheckpointer(path)
    state = stored.load(RUN_ID).state
    stored.close()
    assert state.state is State.ABORTED and state.stop_reason is StopReason.CANCELLED
    assert state.error == "the run was abandoned: customer left"
    validate_history(state.messages)  # every call kept its one result
    assert main(["runs", "abandon", RUN_ID, "--db", str(path)]) != 0
    assert "already ended" in capsys.readouterr().err


# -- the event loop never waits for the store ----------------------------------------------------


class Watched:
    """Records the thread of every call to the store it wraps."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.threads: set[int] = set()

    def __getattr__(self, name: str) -> Any:
        if name == "write_now":  # the writes SQLite makes at once: tests/persistence
            raise AttributeError(name)
        attribute = getattr(self.inner, name)
        if name not in ("save", "load", "record_intent", "record_result", "effects"):
            return attribute

        def watched(*args: Any, **kwargs: Any) -> Any:
            self.threads.add(threading.get_ident())
            return attribute(*args, **kwargs)

        return watched


def test_store_calls_never_run_on_the_event_loop_thread(db_store: Checkpointer) -> None:
    """Every checkpoint, journal write and load of a run and of its resume runs on the store's
    threads; the loop's thread only waits for them (a store's ``write_now``, which never
    waits, aside)."""
    watched = Watched(db_store)
    seen: Counter[str] = Counter()
    loop_threads: set[int] = set()

    position, _, _ = _crashed_before_the_charge(db_store, seen)  # the crash, simulated in place

    async def main() -> None:
        loop_threads.add(threading.get_ident())
        resumed = make_agent(watched, seen.update, position=position)  # type: ignore[arg-type]
        assert (await resumed.resume(RUN_ID)).ok
        for table in ("checkpoints", "runs", "effects"):  # the same run again, from the start
            _raw(db_store, f"DELETE FROM {{t}}{table}")
        assert (await make_agent(watched, seen.update).run(PROMPT)).ok  # type: ignore[arg-type]

    asyncio.run(main())
    assert watched.threads and not watched.threads & loop_threads


@pytest.mark.postgres
def test_the_postgres_store_reconnects_after_its_connections_drop() -> None:
    """The server ends every connection of the store's pool between two runs; the second run
    gets a new connection and completes."""
    psycopg = pytest.importorskip("psycopg")
    with postgres_checkpointer() as store:
        assert make_agent(store, lambda _: None).run_sync(PROMPT).ok
        for table in ("checkpoints", "runs", "effects"):  # the same run again, from scratch
            _raw(store, f"DELETE FROM {{t}}{table}")
        with psycopg.connect(DSN, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (f"fsm_agent:{store.schema}",),  # type: ignore[attr-defined]
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        assert make_agent(store, lambda _: None).run_sync(PROMPT).ok


# -- the lanes of the store's threads ----------------------------------------------------------


def test_a_lane_keeps_order_and_fails_after_a_failed_write() -> None:
    """A run's writes are made in order; after one fails, the later ones fail the same way and
    are not made; a cancelled wait does not cancel its write; other lanes go on."""
    from fsm_agent.persistence.store_threads import StoreThreads

    threads = StoreThreads(2, "test-store")
    made: list[str] = []
    gate = threading.Event()

    def write(name: str) -> str:
        if name == "gated":
            gate.wait(5)
        if name == "bad":
            raise CheckpointConflictError("lost the run", run_id="r", version=2)
        made.append(name)
        return name

    async def main() -> None:
        lane, other = threads.lane(), threads.lane()
        waiting = asyncio.ensure_future(lane.call(write, "gated"))
        lane.submit(write, "first")
        await asyncio.sleep(0)
        waiting.cancel()  # stops the wait only
        gate.set()
        assert await lane.call(write, "second") == "second"
        with pytest.raises(CheckpointConflictError):
            await lane.call(write, "bad")
        lane.submit(write, "never")
        with pytest.raises(CheckpointConflictError):
            await lane.call(write, "never either")
        assert await other.call(write, "elsewhere") == "elsewhere"

    asyncio.run(main())
    threads.close()
    assert made == ["gated", "first", "second", "elsewhere"]


def test_a_prompt_and_an_error_text_with_lone_surrogates_are_storable(
    db_store: Checkpointer,
) -> None:
    """A durable run's prompt gets the same replacement; any other text in the state (an
    error kept as text) is replaced in what the store writes, so the checkpoint is made."""
    agent = Agent(
        ScriptedModel([text("Read it.")]),
        checkpointer=db_store,
        runtime=Runtime(new_id=lambda: "run_prompt"),
    )
    result = agent.run_sync("read " + os.fsdecode(b"notes-\xfe.md"))
    assert result.ok
    prompt = result.messages[0]
    assert "notes-\ufffd.md" in prompt.text and "replaced with U+FFFD" in prompt.text
    assert tuple(db_store.load("run_prompt").state.messages) == tuple(result.messages)

    for memory_or_sql in (InMemoryCheckpointer(), db_store):
        state = RunState(run_id="run_error")
        state.error = "open failed: " + os.fsdecode(b"\xff")
        memory_or_sql.save(state, version=1)
        assert memory_or_sql.load("run_error").state.error == "open failed: \ufffd"


def test_reading_a_run_leaves_nothing_in_the_store(tmp_path: Path) -> None:
    """A reader (the inspector, ``runs show``) that loads a run still going keeps nothing."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    _crashed_before_the_charge(store, Counter())
    store.forget(RUN_ID)
    assert store.load(RUN_ID).state.state is State.DISPATCHING
    assert store._saved == {}  # type: ignore[attr-defined]
    store.close()


def test_a_checkpoint_committed_during_a_load_is_not_taken_for_damage(tmp_path: Path) -> None:
    """Another worker's checkpoint that commits while a load reads the rows is just newer."""
    path = tmp_path / "runs.db"

    class Racing(SQLiteCheckpointer):
        """Commits another worker's checkpoint just before the load reads the runs row."""

        other: Callable[[], None] | None = None

        def _latest(self, cur: Any, run_id: str, *, lock: bool = True) -> int | None:
            other, self.other = self.other, None
            if other is not None and not lock:
                other()
            return super()._latest(cur, run_id, lock=lock)

    writer = SQLiteCheckpointer(path)
    _crashed_before_the_charge(writer, Counter())
    current = writer.load(RUN_ID)
    reader = Racing(path)
    reader.other = lambda: writer.save(current.state, version=current.version + 1)
    loaded = reader.load(RUN_ID)
    assert loaded.version in (current.version, current.version + 1)
    reader.close()
    writer.close()


def test_an_unreachable_postgres_store_fails_at_once_with_its_password_masked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``runs list --db postgresql://user:PASSWORD@…`` with no server there: a usage error
    that does not print the password (and does not wait for a pool to give up)."""
    pytest.importorskip("psycopg_pool", reason="the [postgres] extra is not installed")
    from fsm_agent.cli import main

    code = main(["runs", "list", "--db", "postgresql://fsm:s3cr3t-pw@127.0.0.1:1/none"])
    out, err = capsys.readouterr()
    assert code == 2 and "cannot" in err
    assert "s3cr3t-pw" not in out + err


def test_the_lag_benchmark_still_runs(tmp_path: Path) -> None:
    """``benchmarks/durable_lag.py`` plays a few runs on SQLite (nothing here is timed)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import durable_lag

    store = SQLiteCheckpointer(tmp_path / "lag.db")
    row = asyncio.run(durable_lag._in_flight(5, 1, store, 0.01))
    store.close()
    assert row["ok"] == 5 and row["timeouts"] == 0 and row["peak"] >= 1
    assert row["full"].startswith("full collections among the runs: ")


class _Inspecting:
    """A model that, at each call, reads what ``store`` holds of the run: the state of its
    newest checkpoint, and the tool calls of its journal that have no outcome."""

    name = "inspecting"
    context_window = None

    def __init__(self, store: Checkpointer, turns: int) -> None:
        self.store = store
        self.turns = turns
        self.run_id = ""
        self.seen: list[tuple[State, list[str]]] = []

    async def complete(self, request: Any) -> Any:
        """Look at the store, then call the tool ``turns`` times and answer."""
        done = sum(len(m.tool_results) for m in request.messages)
        if self.run_id:
            stored = self.store.load(self.run_id).state
            effects = self.store.effects(self.run_id)
            open_calls = [k for k, r in effects.items() if r.kind == "tool" and r.result is None]
            self.seen.append((stored.state, open_calls))
        if done >= self.turns:
            return text("done")
        return tool_call("note", {"n": done}, id=f"c{done}")


@pytest.mark.parametrize("listened", [False, True], ids=["unheard", "listened"])
def test_sync_mode_stores_every_write_before_the_next_call(
    db_store: Checkpointer, listened: bool
) -> None:
    """Durability ``sync``: when the model is called, every tool outcome before it is stored,
    and the checkpoint of the move into ``calling``, except that a run nobody follows leaves
    the checkpoints of the moves after a tool turn for its next write (the newest stored is
    the turn's, from which a resume re-derives them); when a tool runs, the move into
    ``dispatching`` is. A run nobody follows waits once per call rather than for each write."""
    model = _Inspecting(db_store, turns=3)
    at_tool: list[State] = []

    @tool
    def note(n: int) -> str:
        """Note a number."""
        at_tool.append(db_store.load(model.run_id).state.state)
        return f"noted {n}"

    agent = Agent(model, tools=[note], checkpointer=db_store, runtime=Runtime(new_id=lambda: "r1"))
    model.run_id = "r1"
    if listened:

        async def follow() -> None:
            async for event in agent.run_stream("go"):
                if event.type == "state_changed":  # stored before it is heard of
                    assert db_store.load("r1").state.state is event.dest

        asyncio.run(follow())
    else:
        result = agent.run_sync("go")
        assert result.ok and result.output == "done"
    assert at_tool == [State.DISPATCHING] * 3
    after_turns = State.CALLING if listened else State.DISPATCHING
    assert model.seen == [(State.CALLING, [])] + [(after_turns, [])] * 3
    assert db_store.load("r1").state.state is State.DONE


def test_a_write_handed_over_during_a_wait_is_stored_before_the_next_call() -> None:
    """Parallel tool calls hand writes to a run's lane while another of its writes is awaited:
    that wait ending must not count the later write as stored (the run waits for it before
    its next model call)."""
    from fsm_agent.persistence import Durability
    from fsm_agent.persistence.run_log import RunLog

    entered, release = threading.Event(), threading.Event()
    stored: list[str] = []

    class Slow(InMemoryCheckpointer):
        """A store whose intents wait for ``release``, and whose outcomes take a while; its
        writes go to a thread of the log's own (it names no ``io_threads()``)."""

        io_threads = None

        def record_intent(
            self, run_id: str, key: str, kind: Literal["model", "tool"], *, version: int
        ) -> None:
            entered.set()
            release.wait(5)
            super().record_intent(run_id, key, kind, version=version)

        def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
            threading.Event().wait(0.05)
            super().record_result(run_id, key, result, version=version)
            stored.append(key)

    store = Slow()
    store.save(RunState(run_id="r1"), version=1)
    log = RunLog(store, "r1", version=1, mode=Durability.SYNC, unknown_outcome="model", heard=False)

    async def main() -> None:
        intent = asyncio.create_task(log._intent("1/tool/b", "tool"))
        await asyncio.to_thread(entered.wait, 5)  # the store's thread is making b's intent
        log._submit(log._record, "1/tool/a", "a's outcome", 1)  # queued after it
        release.set()
        await intent  # b's intent is stored; a's outcome may not be yet
        await log.before_call()
        assert stored == ["1/tool/a"]

    try:
        asyncio.run(main())
    finally:
        log.close()


def test_a_compaction_is_stored_before_the_next_call(sqlite_store: Checkpointer) -> None:
    """A run nobody follows leaves for its next write only the checkpoints a resume re-derives
    from the journal; a compaction that shortened the thread is not one of them: when the
    model is called after it, the store holds the compacted thread (the move into ``calling``),
    and after a turn with nothing to compact, the turn's checkpoint (``dispatching``)."""
    from fsm_agent import CompactionSettings, Outcome

    model = _Inspecting(sqlite_store, turns=100)  # compaction drops results: it never ends

    @tool
    def note(n: int) -> str:
        """Note a number."""
        return f"noted {n}"

    settings = CompactionSettings(max_messages=6, strategies=("sliding_window",))
    agent = Agent(
        model,
        tools=[note],
        checkpointer=sqlite_store,
        policy=Policy(max_steps=8, max_compaction_attempts=50, compaction=settings),
        runtime=Runtime(new_id=lambda: "r1"),
    )
    model.run_id = "r1"
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.MAX_STEPS
    into_calling = [move.outcome for move in result.trace if move.dest is State.CALLING]
    assert Outcome.COMPACTED in into_calling[1:] and Outcome.PROCEED in into_calling[1:]
    expected = [State.CALLING] + [
        State.CALLING if outcome is Outcome.COMPACTED else State.DISPATCHING
        for outcome in into_calling[1:]
    ]
    expected.append(State.FINALIZING)  # the step limit's summary call
    assert [state for state, _ in model.seen] == expected
    assert all(not open_calls for _, open_calls in model.seen)
