"""Checkpointers: round trips, optimistic concurrency, schema migration, and the faults of a
store (corrupt rows, a newer schema, a locked or full database), none of which loses what is
stored."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import Agent, ConfigurationError, Message, Policy, RunState, Runtime, State
from fsm_agent.errors import (
    CheckpointConflictError,
    CorruptCheckpointError,
    SchemaVersionError,
    StoreFullError,
    StoreLockedError,
    UnknownRunError,
)
from fsm_agent.persistence import (
    Checkpointer,
    Durability,
    InMemoryCheckpointer,
    SQLiteCheckpointer,
    open_checkpointer,
)
from fsm_agent.persistence.outcomes import decode_tool_outcome, encode_tool_outcome
from fsm_agent.persistence.sql import MIGRATIONS
from fsm_agent.testing import ScriptedModel, text, tool_call
from fsm_agent.tools import ToolExecution
from fsm_agent.values.messages import ToolCall, ToolResult
from helpers import add


def _agent(store: Checkpointer, **kwargs: Any) -> Agent[None]:
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])
    return Agent(model, tools=[add], system_prompt="Be brief.", checkpointer=store, **kwargs)


def _state(run_id: str = "run_1", n: int = 2) -> RunState:
    rs = RunState(run_id=run_id, state=State.CALLING)
    rs.messages = [Message.user(f"message {i}") for i in range(n)]
    return rs


def test_a_run_saves_one_checkpoint_per_move_and_loads_back_equal(
    local_store: Checkpointer,
) -> None:
    """With sync durability every move is a checkpoint; the last one equals the final state."""
    result = _agent(local_store).run_sync("1 + 2?")
    checkpoint = local_store.load(result.run_id)
    assert checkpoint.version == len(result.trace)
    assert result.run_state is not None
    assert checkpoint.state == result.run_state
    [summary] = local_store.runs()
    assert (summary.state, summary.steps, summary.version) == (State.DONE, 2, len(result.trace))


def test_the_journal_holds_each_model_and_tool_call_with_its_result(
    local_store: Checkpointer,
) -> None:
    """Every model call and tool call is recorded under run/step/call with an outcome."""
    result = _agent(local_store).run_sync("1 + 2?")
    effects = local_store.effects(result.run_id)
    assert sorted(effects) == ["1/model/1", "1/tool/call_0_0", "2/model/2"]
    assert all(record.result is not None for record in effects.values())
    assert effects["1/tool/call_0_0"].kind == "tool"


def test_a_rewritten_thread_is_stored_from_the_first_changed_message(tmp_path: Path) -> None:
    """SQLite stores only changed messages, and a message replaced mid-thread survives."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    rs = _state(n=3)
    store.save(rs, version=1)
    rs.messages.append(Message.user("appended"))
    store.save(rs, version=2)
    rs.messages[1] = Message.user("rewritten by compaction")
    store.save(rs, version=3)
    rows = sqlite3.connect(tmp_path / "runs.db").execute(
        "SELECT version, messages_from FROM checkpoints ORDER BY version"
    )
    assert list(rows) == [(1, 0), (2, 3), (3, 1)]
    loaded = SQLiteCheckpointer(tmp_path / "runs.db").load("run_1").state
    assert loaded.messages == rs.messages


def test_a_stale_version_is_refused_and_writes_nothing(local_store: Checkpointer) -> None:
    """Optimistic concurrency: writing version n needs n - 1 to be the latest."""
    rs = _state()
    local_store.save(rs, version=1)
    local_store.save(rs, version=2)
    with pytest.raises(CheckpointConflictError, match="another worker wrote it first"):
        local_store.save(rs, version=2)
    with pytest.raises(CheckpointConflictError, match="already exists"):
        local_store.save(rs, version=1)
    with pytest.raises(CheckpointConflictError):
        local_store.record_intent("run_1", "3/tool/x", "tool", version=1)
    assert local_store.load("run_1").version == 2
    assert local_store.effects("run_1") == {}


def test_consecutive_checkpoints_written_as_one_are_each_stored(db_store: Checkpointer) -> None:
    """``write_prepared`` takes consecutive checkpoints of a run and writes them as one: each
    is a row of its own (loaded, listed, forked from as if written alone), the run's row holds
    the last; a stale first version refuses them all and writes none."""
    store: Any = db_store
    rs = _state(n=1)
    store.write_prepared(store.prepare_save(rs, version=1))
    prepared = []
    for version, state in ((2, State.DISPATCHING), (3, State.COMPACTING), (4, State.CALLING)):
        rs.state = state
        rs.messages.append(Message.user(f"at {version}"))
        prepared.append(store.prepare_save(rs, version=version))
    store.write_prepared(*prepared)
    assert [c.state.state for c in store.checkpoints("run_1")] == [
        State.CALLING,
        State.DISPATCHING,
        State.COMPACTING,
        State.CALLING,
    ]
    assert [len(c.state.messages) for c in store.checkpoints("run_1")] == [1, 2, 3, 4]
    assert store.load("run_1").state == rs
    [summary] = store.runs()
    assert (summary.version, summary.state) == (4, State.CALLING)
    with pytest.raises(CheckpointConflictError):
        store.write_prepared(store.prepare_save(rs, version=4), store.prepare_save(rs, version=5))
    assert store.load("run_1").version == 4
    fresh = _state("run_2")
    store.write_prepared(store.prepare_save(fresh, version=1), store.prepare_save(fresh, version=2))
    assert [c.version for c in store.checkpoints("run_2")] == [1, 2]
    assert {s.run_id: s.version for s in store.runs()} == {"run_1": 4, "run_2": 2}


def test_an_unknown_run_id_is_a_typed_error(local_store: Checkpointer) -> None:
    """Loading a run the store never saw raises UnknownRunError naming it."""
    with pytest.raises(UnknownRunError, match="no checkpoint holds run 'nope'"):
        local_store.load("nope")


def test_an_old_schema_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    """A database at schema version 1 gets the later migrations and keeps its runs."""
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    for statement in MIGRATIONS[0]:
        db.execute(statement.format(t="", real="REAL"))
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.commit()
    db.close()
    store = SQLiteCheckpointer(path)
    assert store.schema_version() == len(MIGRATIONS)
    store.save(_state(), version=1)
    assert SQLiteCheckpointer(path).load("run_1").version == 1


def test_a_database_from_a_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    """A store written by a newer fsm_agent raises SchemaVersionError and is not changed."""
    path = tmp_path / "new.db"
    SQLiteCheckpointer(path).save(_state(), version=1)
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    db.commit()
    with pytest.raises(SchemaVersionError, match="schema version 99"):
        SQLiteCheckpointer(path)
    assert db.execute("SELECT value FROM meta").fetchone() == ("99",)
    assert db.execute("SELECT count(*) FROM checkpoints").fetchone() == (1,)


@pytest.mark.parametrize(
    ("column", "value"),
    [("body", "{not json"), ("messages", '[{"role": "user", "parts": ['), ("trace", "[[1]]")],
)
def test_a_corrupt_or_truncated_row_is_a_typed_error(
    tmp_path: Path, column: str, value: str
) -> None:
    """A damaged row raises CorruptCheckpointError naming the checkpoint; the row stays."""
    path = tmp_path / "runs.db"
    SQLiteCheckpointer(path).save(_state(), version=1)
    db = sqlite3.connect(path)
    db.execute(f"UPDATE checkpoints SET {column} = ?", (value,))
    db.commit()
    with pytest.raises(CorruptCheckpointError, match="checkpoint 1 of run 'run_1'"):
        SQLiteCheckpointer(path).load("run_1")
    assert db.execute(f"SELECT {column} FROM checkpoints").fetchone() == (value,)


def test_a_file_that_is_not_a_database_is_a_typed_error(tmp_path: Path) -> None:
    """Opening garbage as a store raises CorruptCheckpointError and leaves the file alone."""
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(CorruptCheckpointError, match="damaged"):
        SQLiteCheckpointer(path)
    assert path.read_bytes().startswith(b"this is not")


def test_a_locked_database_is_a_typed_error_and_keeps_the_last_checkpoint(tmp_path: Path) -> None:
    """A writer that holds the lock past the timeout gives StoreLockedError; later writes work."""
    path = tmp_path / "runs.db"
    store = SQLiteCheckpointer(path, timeout_s=0.05)
    rs = _state()
    store.save(rs, version=1)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StoreLockedError, match="locked"):
        store.save(rs, version=2)
    other.execute("ROLLBACK")
    assert store.load("run_1").version == 1
    store.save(rs, version=2)
    assert store.load("run_1").version == 2


def test_a_full_disk_is_a_typed_error_and_keeps_what_is_stored(tmp_path: Path) -> None:
    """Hitting the size limit raises StoreFullError; earlier checkpoints load intact."""
    path = tmp_path / "runs.db"
    store = SQLiteCheckpointer(path)
    rs = _state()
    store.save(rs, version=1)
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")
    rs.messages.append(Message.user("x" * 200_000))
    with pytest.raises(StoreFullError, match="full"):
        store.save(rs, version=2)
    fresh = SQLiteCheckpointer(path)
    assert fresh.load("run_1").version == 1
    assert len(fresh.load("run_1").state.messages) == 2


def test_a_failed_write_stops_the_run_with_the_store_error(tmp_path: Path) -> None:
    """A run whose checkpoint cannot be written raises the typed error instead of going on."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    store.save(_state("run_fixed"), version=1)
    agent = _agent(store, runtime=Runtime(new_id=lambda: "run_fixed"))
    with pytest.raises(CheckpointConflictError, match="already exists"):
        agent.run_sync("1 + 2?")
    assert store.load("run_fixed").version == 1


@pytest.mark.parametrize("mode", ["sync", "async", "exit"])
def test_every_durability_mode_ends_with_the_final_state_stored(tmp_path: Path, mode: str) -> None:
    """sync and async store every move; exit stores only the resting state."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    result = _agent(store, durability=mode).run_sync("1 + 2?")
    checkpoint = store.load(result.run_id)
    assert checkpoint.state == result.run_state
    expected = 1 if mode == "exit" else len(result.trace)
    assert checkpoint.version == expected
    assert (store.effects(result.run_id) == {}) is (mode == "exit")


def test_bad_agent_settings_are_configuration_errors() -> None:
    """An unknown durability, outcome policy or checkpointer type is refused at construction."""
    model = ScriptedModel([text("hi")])
    with pytest.raises(ConfigurationError, match="durability"):
        Agent(model, checkpointer=InMemoryCheckpointer(), durability="often")
    with pytest.raises(ConfigurationError, match="unknown_outcome"):
        Agent(model, unknown_outcome="guess")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="Checkpointer"):
        Agent(model, checkpointer=object())  # type: ignore[arg-type]
    assert Durability("async") is Durability.ASYNC


def test_open_checkpointer_understands_urls_and_paths(tmp_path: Path) -> None:
    """sqlite:/// URLs and plain paths open SQLite; an unknown scheme is refused."""
    assert isinstance(open_checkpointer(str(tmp_path / "a.db")), SQLiteCheckpointer)
    assert isinstance(open_checkpointer(f"sqlite:///{tmp_path / 'b.db'}"), SQLiteCheckpointer)
    assert (tmp_path / "b.db").exists()
    with pytest.raises(ConfigurationError, match="unknown checkpoint store"):
        open_checkpointer("redis://localhost")


def test_the_step_limit_summary_call_is_journaled(local_store: Checkpointer) -> None:
    """The tools-off summary call at the step limit is recorded like any model call, so a
    resumed run reuses its answer instead of calling the model again."""
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("the summary")])
    agent = Agent(model, tools=[add], checkpointer=local_store, policy=Policy(max_steps=1))
    result = agent.run_sync("1 + 2?")
    assert result.output == "the summary"
    effects = local_store.effects(result.run_id)
    assert sorted(effects) == ["1/model/1", "1/tool/call_0_0", "2/model/2"]
    assert "the summary" in (effects["2/model/2"].result or "")


def test_a_tool_outcome_recorded_in_the_older_form_decodes_as_a_new_one() -> None:
    """A journal record written by an earlier version (``json.dumps`` of the whole outcome:
    spaces, non-ASCII escaped) decodes to what the current encoding of the same outcome does;
    text JSON cannot carry as it is is still escaped, not refused."""
    result = ToolResult(call_id="c1", name="look", content="café", metadata={"n": 1})
    execution = ToolExecution(result, error=ValueError("no"), duration_s=0.5, phase="b")
    older = json.dumps(
        {
            "result": result.model_dump(mode="json"),
            "done": False,
            "final_message": None,
            "error": repr(execution.error),
            "question": None,
            "duration_s": 0.5,
            "phase": "b",
        }
    )
    call = ToolCall(id="c1", name="look", arguments={})
    old, new = (
        decode_tool_outcome(older, call),
        decode_tool_outcome(encode_tool_outcome(execution), call),
    )
    assert old.result == new.result == result
    assert (old.done, old.duration_s, old.phase, str(old.error)) == (
        new.done,
        new.duration_s,
        new.phase,
        str(new.error),
    )
    assert json.loads(encode_tool_outcome(execution)) == json.loads(older)
    lone = ToolExecution(ToolResult(call_id="c1", name="look", content="x\udcff"))
    assert decode_tool_outcome(encode_tool_outcome(lone), call).result.content == "x\udcff"
    # Text UTF-8 cannot carry, beside the result, is escaped, not refused.
    asked = ToolExecution(result, question="y\udcff?", final_message="z\ud800")
    back = decode_tool_outcome(encode_tool_outcome(asked), call)
    assert (back.question, back.final_message) == ("y\udcff?", "z\ud800")
