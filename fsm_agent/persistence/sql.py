"""What the SQLite and PostgreSQL checkpointers share: the tables and the optimistic-concurrency
writes (the migrations and the row encoding are in :mod:`~fsm_agent.persistence.sql_rows`). A
dialect supplies the connection, the transaction and the mapping of its errors to the
:class:`~fsm_agent.CheckpointError` tree.

Tables (``{t}`` is the dialect's table prefix)::

    {t}meta         key → value; ``schema_version`` is the number of migrations applied
    {t}runs         one row per run: its latest checkpoint version and position (for listing)
    {t}checkpoints  one row per move: (run_id, version) → the run state
    {t}effects      the write-ahead journal: (run_id, key) → intent, then result
    {t}outputs      the full text of the run's cut tool outputs: (run_id, output id) → text,
                    or the key of the journal record holding it

A checkpoint row stores the run state without its message thread and trace, plus the messages
and moves that changed since the run's previous row (``messages_from`` is the index the stored
messages start at; the thread is rebuilt by replaying the rows in order). A compaction or a
trimmed tool output rewrites the thread from the first message that changed. The full text of a
cut tool output is written once, to ``outputs``, by the checkpoint that first holds it; so a
checkpoint's size does not grow with the run's history. When the journal already holds that
text (the tool's recorded result), the ``outputs`` row names the record (``journal_key``)
instead of holding a second copy: the record is written before the checkpoint, and a run's
journal records are never removed, so the text is there whenever the row is.

The store keeps, per run it is writing, what it last wrote (to write only what changed); it
drops that when the run rests (done, aborted, suspended) or when :meth:`SQLCheckpointer.forget`
is called (the agent calls it when a run's task ends, however it ended).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal, NamedTuple, Protocol

from ..errors import CorruptCheckpointError, SchemaVersionError, UnknownRunError
from ..machine.table import State
from ..run.state import RunState
from ..values.messages import Message
from . import Checkpoint, EffectRecord, RunSummary, conflict, move_times
from .outcomes import recorded_content
from .sql_rows import (
    MIGRATIONS,
    replayed,
    row_json,
    state_of,
    summaries,
)
from .store_threads import StoreThreads

__all__ = ["MIGRATIONS", "PreparedSave", "SQLCheckpointer"]

_RESTING = frozenset({State.DONE, State.ABORTED, State.SUSPENDED})
_NONE: frozenset[str] = frozenset()


class Cursor(Protocol):
    """The part of a DB-API cursor the store uses."""

    @property
    def rowcount(self) -> int:
        """Rows the last statement changed."""
        ...

    def execute(self, sql: Any, params: Sequence[object] = ..., /) -> Any:
        """Run one statement."""
        ...

    def fetchone(self) -> Any:
        """The next row, or ``None``."""
        ...

    def fetchall(self) -> list[Any]:
        """The remaining rows."""
        ...


class PreparedSave(NamedTuple):
    """A checkpoint encoded for writing (see :meth:`SQLCheckpointer.prepare_save`)."""

    run_id: str
    version: int
    state: str
    stop: str | None
    steps: int
    body: str
    messages_from: int
    messages: str
    trace_from: int
    trace: str
    outputs: tuple[tuple[str, str], ...]


class _Saved:
    """What this process last wrote for a run: the version, the thread it held and the ids of
    the stored tool outputs."""

    __slots__ = ("messages", "outputs", "trace", "version")

    def __init__(
        self, version: int, messages: list[Message], trace: int, outputs: frozenset[str]
    ) -> None:
        self.version = version
        self.messages = messages
        self.trace = trace
        self.outputs = outputs


def _changed_from(saved: list[Message], current: list[Message]) -> int:
    """The first index where ``current`` differs from what was saved (messages are immutable
    values: an unchanged message is the same object)."""
    limit = min(len(saved), len(current))
    if current[:limit] == saved[:limit]:  # the common case (appends only), compared in C
        return limit
    for index in range(limit):
        if saved[index] is not current[index]:
            return index
    return limit


class _InBatch:
    """A batch's cursor, used as the context manager a store's call takes its cursor from:
    the database's errors raised inside it are translated as a call of its own would have
    them (one object for the batch, so that each of its calls sets up nothing)."""

    __slots__ = ("cursor", "store")

    def __init__(self, store: SQLCheckpointer, cursor: Cursor) -> None:
        self.store = store
        self.cursor = cursor

    def __enter__(self) -> Cursor:
        return self.cursor

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        if error is not None:
            with self.store._translated():
                raise error


class SQLCheckpointer:
    """The checkpointer logic over a SQL dialect (see the module docstring)."""

    placeholder = "?"
    real = "REAL"
    lock_clause = ""  # appended to the fencing read (PostgreSQL locks the run's row)

    io_thread_count = 1
    """How many threads run the store's calls for the agent (see :meth:`io_threads`)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._saved: dict[str, _Saved] = {}
        self._queries: dict[str, str] = {}
        self._io: StoreThreads | None = None
        self._io_lock = threading.Lock()
        self._batch = threading.local()  # .cursor: the thread's batch (an _InBatch), if any

    def io_threads(self) -> StoreThreads:
        """The threads an agent runs this store's calls on, so that the event loop's thread
        never waits for the database (``io_thread_count`` of them, started when first used,
        stopped by :meth:`close`)."""
        with self._io_lock:
            if self._io is None:
                self._io = StoreThreads(self.io_thread_count, "fsm-agent-store", self.batch)
            return self._io

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One write transaction for the store's calls made inside it on this thread,
        committed on exit (rolled back on error): the store's threads make the writes queued
        together in one commit."""
        with self._write() as cur:
            self._batched(cur)
            try:
                yield
            finally:
                self._batched(None)

    def _writing(self) -> AbstractContextManager[Cursor]:
        """A cursor in a write transaction: this thread's batch, or a transaction of its own."""
        batch: _InBatch | None = getattr(self._batch, "cursor", None)
        return self._write() if batch is None else batch

    def _reading(self) -> AbstractContextManager[Cursor]:
        """A cursor for reading: this thread's batch (which sees its own writes), or a
        cursor of its own."""
        batch: _InBatch | None = getattr(self._batch, "cursor", None)
        return self._read() if batch is None else batch

    def _batched(self, cur: Cursor | None) -> None:
        """Make ``cur`` (a transaction's cursor) this thread's batch, or end it (``None``)."""
        self._batch.cursor = None if cur is None else _InBatch(self, cur)

    def _stop_io(self) -> None:
        """Make the calls handed to the store's threads, then stop them."""
        with self._io_lock:
            io, self._io = self._io, None
        if io is not None:
            io.close()

    def forget(self, run_id: str) -> None:
        """Drop what the store keeps in memory for ``run_id`` (its next checkpoint from this
        process is then written whole)."""
        self._saved.pop(run_id, None)

    # -- dialect --------------------------------------------------------------------------------
    def _write(self) -> AbstractContextManager[Cursor]:
        """A cursor in a write transaction, committed on exit (rolled back on error)."""
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[Cursor]:
        """A cursor for reading."""
        raise NotImplementedError

    def _is_duplicate(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a unique-key violation."""
        raise NotImplementedError

    def _translated(self) -> AbstractContextManager[None]:
        """The database's errors, raised inside it, as :class:`~fsm_agent.CheckpointError`."""
        raise NotImplementedError

    def _sql(self, text: str) -> str:
        sql = self._queries.get(text)
        if sql is None:
            sql = text.format(t=self._prefix, real=self.real, lock=self.lock_clause)
            sql = sql.replace("?", self.placeholder)
            self._queries[text] = sql
        return sql

    # -- schema ---------------------------------------------------------------------------------
    def _migrate(self, cur: Cursor) -> int:
        """Bring the schema up to date inside the caller's transaction; returns the version it
        had. Raises :class:`SchemaVersionError` for a store newer than this code."""
        cur.execute(
            self._sql("CREATE TABLE IF NOT EXISTS {t}meta (key TEXT PRIMARY KEY, value TEXT)")
        )
        cur.execute(self._sql("SELECT value FROM {t}meta WHERE key = 'schema_version'"))
        row = cur.fetchone()
        try:
            current = int(row[0]) if row is not None else 0
        except (TypeError, ValueError):
            raise CorruptCheckpointError(
                f"the store's schema_version is {row[0]!r}, not a number"
            ) from None
        if current > len(MIGRATIONS):
            raise SchemaVersionError(
                f"the store has schema version {current}, but this fsm_agent knows versions up "
                f"to {len(MIGRATIONS)}: upgrade fsm_agent to open it (nothing was changed)"
            )
        for statements in MIGRATIONS[current:]:
            for statement in statements:
                cur.execute(self._sql(statement))
        if current < len(MIGRATIONS):
            if row is None:
                cur.execute(
                    self._sql("INSERT INTO {t}meta (key, value) VALUES ('schema_version', ?)"),
                    (str(len(MIGRATIONS)),),
                )
            else:
                cur.execute(
                    self._sql("UPDATE {t}meta SET value = ? WHERE key = 'schema_version'"),
                    (str(len(MIGRATIONS)),),
                )
        return current

    def schema_version(self) -> int:
        """The schema version the store is at."""
        with self._reading() as cur:
            cur.execute(self._sql("SELECT value FROM {t}meta WHERE key = 'schema_version'"))
            row = cur.fetchone()
        return int(row[0]) if row is not None else 0

    # -- checkpoints ----------------------------------------------------------------------------
    def save(self, state: RunState, *, version: int) -> None:
        """Store ``state`` as checkpoint ``version``; only the messages and moves that changed
        since this process's previous checkpoint of the run are written."""
        self.write_prepared(self.prepare_save(state, version=version))

    def prepare_save(self, state: RunState, *, version: int) -> PreparedSave:
        """The encoding half of :meth:`save` (no I/O): what :meth:`write_prepared` stores. An
        agent encodes on the event loop's thread and writes on the store's, so that the
        store's thread holds the interpreter's lock only briefly. Checkpoints of a run are
        prepared and written in order."""
        run_id = state.run_id
        messages = state.messages
        trace = state.trace
        outputs = state.tool_outputs
        saved = self._saved.get(run_id)
        if saved is not None and saved.version == version - 1 and saved.trace <= len(trace):
            messages_from = _changed_from(saved.messages, messages)
            trace_from = saved.trace
            new_outputs = [k for k in outputs if k not in saved.outputs] if outputs else []
        else:
            messages_from = trace_from = 0
            new_outputs = list(outputs)
        if state.state in _RESTING:
            self._saved.pop(run_id, None)  # a resting run is resumed by load(), if at all
        else:
            self._saved[run_id] = _Saved(
                version, list(messages), len(trace), frozenset(outputs) if outputs else _NONE
            )
        body, new_messages, moves = row_json(state, messages_from, trace_from)
        return PreparedSave(
            run_id,
            version,
            state.state._value_,  # the value as a plain attribute (``value`` is a property)
            None if state.stop_reason is None else state.stop_reason._value_,
            state.counters.steps,
            body,
            messages_from,
            new_messages,
            trace_from,
            moves,
            tuple((k, outputs[k]) for k in new_outputs) if new_outputs else (),
        )

    def write_prepared(self, *prepared: PreparedSave) -> None:
        """The writing half of :meth:`save`: one checkpoint, or consecutive checkpoints of one
        run (as a run's writes made together hand them over), written as one (the run's row
        moved once, the rows inserted by one statement)."""
        try:
            self._write_prepared(prepared)
        except BaseException:
            self._saved.pop(prepared[0].run_id, None)  # the next checkpoint is written whole
            raise

    def _write_prepared(self, prepared: Sequence[PreparedSave]) -> None:
        first, last = prepared[0], prepared[-1]
        run_id, version = first.run_id, first.version
        now = time.time()
        with self._writing() as cur:
            if version == 1:
                try:
                    cur.execute(
                        self._sql(
                            "INSERT INTO {t}runs (run_id, version, state, stop_reason, steps, "
                            "updated_at) VALUES (?, ?, ?, ?, ?, ?)"
                        ),
                        (run_id, last.version, last.state, last.stop, last.steps, now),
                    )
                except Exception as exc:
                    if self._is_duplicate(exc):
                        raise conflict(run_id, version, 1) from None
                    raise
                self._insert_checkpoints(cur, prepared, now)
            elif not self._advance(cur, prepared, now):
                raise conflict(run_id, version, self._latest(cur, run_id))
            for p in prepared:
                for output_id, output in p.outputs:
                    key = self._journaled(cur, run_id, output_id, output)
                    cur.execute(
                        self._sql(
                            "INSERT INTO {t}outputs (run_id, output_id, text, journal_key) "
                            "VALUES (?, ?, ?, ?) ON CONFLICT (run_id, output_id) DO UPDATE SET "
                            "text = excluded.text, journal_key = excluded.journal_key"
                        ),
                        (run_id, output_id, "" if key else output, key),
                    )

    def _journaled(self, cur: Cursor, run_id: str, output_id: str, output: str) -> str | None:
        """The key of the run's journal record whose tool result is ``output`` (the tool call
        ``output_id``'s, unless a hook changed the text), or ``None``."""
        suffix = "/tool/" + output_id
        pattern = "%" + suffix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        cur.execute(
            self._sql(
                "SELECT key, result FROM {t}effects WHERE run_id = ? AND kind = 'tool' "
                "AND result IS NOT NULL AND key LIKE ? ESCAPE '\\'"
            ),
            (run_id, pattern),
        )
        for key, result in cur.fetchall():
            if key.endswith(suffix) and recorded_content(result) == output:
                return str(key)
        return None

    def _insert_checkpoints(
        self, cur: Cursor, prepared: Sequence[PreparedSave], now: float
    ) -> None:
        row = "(?, ?, ?, ?, ?, ?, ?, ?)"
        cur.execute(
            self._sql(
                "INSERT INTO {t}checkpoints (run_id, version, saved_at, body, messages_from, "
                "messages, trace_from, trace) VALUES " + ", ".join([row] * len(prepared))
            ),
            [
                value
                for p in prepared
                for value in (
                    p.run_id,
                    p.version,
                    now,
                    p.body,
                    p.messages_from,
                    p.messages,
                    p.trace_from,
                    p.trace,
                )
            ],
        )

    def _advance(self, cur: Cursor, prepared: Sequence[PreparedSave], now: float) -> bool:
        """Move the run's row from the version before the first of ``prepared`` to the last's
        and insert them; ``False`` (nothing written) when the row no longer holds the version
        before the first."""
        first, last = prepared[0], prepared[-1]
        cur.execute(
            self._sql(
                "UPDATE {t}runs SET version = ?, state = ?, stop_reason = ?, steps = ?, "
                "updated_at = ? WHERE run_id = ? AND version = ?"
            ),
            (last.version, last.state, last.stop, last.steps, now, first.run_id, first.version - 1),
        )
        if cur.rowcount != 1:
            return False
        self._insert_checkpoints(cur, prepared, now)
        return True

    def _latest(self, cur: Cursor, run_id: str, *, lock: bool = True) -> int | None:
        lock_clause = self.lock_clause if lock else ""
        cur.execute(
            self._sql("SELECT version FROM {t}runs WHERE run_id = ?" + lock_clause), (run_id,)
        )
        row = cur.fetchone()
        return int(row[0]) if row is not None else None

    def continue_from(self, checkpoint: Checkpoint) -> None:
        """A worker continues the run from ``checkpoint`` (which :meth:`load` gave it): keep
        its thread, so that the next checkpoint writes only the messages that changed (until
        the run rests or :meth:`forget`). Its cut tool outputs are written again, once."""
        state = checkpoint.state
        if state.state not in _RESTING:
            self._saved[checkpoint.run_id] = _Saved(
                checkpoint.version, list(state.messages), len(state.trace), _NONE
            )

    def load(self, run_id: str) -> Checkpoint:
        """The latest checkpoint of ``run_id``, rebuilt from its rows (the store keeps nothing
        of it; see :meth:`continue_from`)."""
        with self._reading() as cur:
            # The runs row first: a checkpoint committed meanwhile can only add rows after it.
            latest = self._latest(cur, run_id, lock=False)
            rows, outputs = self._rows(cur, run_id)
        if latest is None or latest > rows[-1][0]:
            raise CorruptCheckpointError(
                f"run {run_id!r}: the store's runs row says checkpoint {latest}, but the newest "
                f"checkpoint row is {rows[-1][0]}: a checkpoint row was deleted or the runs row "
                "was changed by hand; restore the store from a backup (nothing was changed)"
            )
        saves: list[tuple[float, int]] = []  # each row's time and the moves it holds
        for row in replayed(run_id, rows):
            saves.append((row[1], len(row[4])))
        version, saved_at, body, messages, trace = row
        state = state_of(run_id, version, body, messages, trace, outputs)
        return Checkpoint(run_id, version, state, saved_at, move_times(saves))

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """Every checkpoint of ``run_id``, oldest first, each rebuilt from its rows and those
        before it (what a fork starts from)."""
        with self._reading() as cur:
            rows, outputs = self._rows(cur, run_id)
        return [
            Checkpoint(
                run_id, version, state_of(run_id, version, body, messages, trace, outputs), saved_at
            )
            for version, saved_at, body, messages, trace in replayed(run_id, rows)
        ]

    def _rows(self, cur: Cursor, run_id: str) -> tuple[list[Any], dict[str, str]]:
        """The checkpoint rows of ``run_id`` in order, and its stored outputs by id."""
        cur.execute(
            self._sql(
                "SELECT version, saved_at, body, messages_from, messages, trace_from, trace "
                "FROM {t}checkpoints WHERE run_id = ? ORDER BY version"
            ),
            (run_id,),
        )
        rows = cur.fetchall()
        if not rows:
            raise UnknownRunError(f"no checkpoint holds run {run_id!r}", run_id=run_id)
        return rows, self._outputs(cur, run_id)

    def _outputs(self, cur: Cursor, run_id: str) -> dict[str, str]:
        """The run's stored outputs by id, those kept in the journal read from there."""
        cur.execute(
            self._sql("SELECT output_id, text, journal_key FROM {t}outputs WHERE run_id = ?"),
            (run_id,),
        )
        outputs: dict[str, str] = {}
        for output_id, text, key in cur.fetchall():
            if key is None:
                outputs[output_id] = text
                continue
            cur.execute(
                self._sql("SELECT result FROM {t}effects WHERE run_id = ? AND key = ?"),
                (run_id, key),
            )
            row = cur.fetchone()
            content = None if row is None or row[0] is None else recorded_content(row[0])
            if content is None:
                raise CorruptCheckpointError(
                    f"run {run_id!r}: the output of tool call {output_id!r} is kept in the "
                    f"journal record {key!r}, which is missing or does not decode; restore the "
                    "store from a backup (nothing was changed)"
                )
            outputs[output_id] = content
        return outputs

    # -- effects --------------------------------------------------------------------------------
    def record_intent(
        self, run_id: str, key: str, kind: Literal["model", "tool"], *, version: int
    ) -> None:
        """Record that the call ``key`` is about to start (fenced by ``version``)."""
        self._record(run_id, key, kind, None, version)

    def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
        """Record the outcome of the call ``key`` (fenced by ``version``)."""
        kind: Literal["model", "tool"] = "model" if "/model/" in key else "tool"
        self._record(run_id, key, kind, result, version)

    def _record(self, run_id: str, key: str, kind: str, result: str | None, version: int) -> None:
        # One statement, fenced by the version: the row is written only while the run's row
        # holds ``version`` (locked until the commit where the database can), so a worker
        # whose run was claimed writes nothing. A round trip less than reading it first.
        with self._writing() as cur:
            cur.execute(
                self._sql(
                    "INSERT INTO {t}effects (run_id, key, kind, result, recorded_at) "
                    "SELECT ?, ?, ?, ?, ? FROM {t}runs WHERE run_id = ? AND version = ?"
                    "{lock} ON CONFLICT (run_id, key) DO UPDATE SET "
                    "result = excluded.result, recorded_at = excluded.recorded_at"
                ),
                (run_id, key, kind, result, time.time(), run_id, version),
            )
            if cur.rowcount != 1:
                raise conflict(run_id, version + 1, self._latest(cur, run_id, lock=False))

    def effects(self, run_id: str) -> dict[str, EffectRecord]:
        """The journaled calls of ``run_id`` by key."""
        with self._reading() as cur:
            cur.execute(
                self._sql("SELECT key, kind, result FROM {t}effects WHERE run_id = ?"), (run_id,)
            )
            rows = cur.fetchall()
        records: dict[str, EffectRecord] = {}
        for key, kind, result in rows:
            if kind not in ("model", "tool"):
                raise CorruptCheckpointError(
                    f"run {run_id!r}: effect {key!r} has the unknown kind {kind!r}"
                )
            records[key] = EffectRecord(key, kind, result)
        return records

    def runs(self) -> list[RunSummary]:
        """Every stored run, the most recently updated first."""
        with self._reading() as cur:
            cur.execute(
                self._sql(
                    "SELECT run_id, version, state, stop_reason, steps, updated_at FROM {t}runs "
                    "ORDER BY updated_at DESC, run_id"
                )
            )
            rows = cur.fetchall()
        return list(summaries(rows))
