"""The PostgreSQL checkpointer (psycopg 3 with its pool, the ``[postgres]`` extra): runs shared
by several processes and machines."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import (
    CheckpointError,
    ConfigurationError,
    FsmAgentError,
    MissingExtraError,
    StoreFullError,
    StoreLockedError,
)
from . import Checkpoint, EffectRecord, RunSummary
from .sql import Cursor, PreparedSave, SQLCheckpointer

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["PostgresCheckpointer"]

T = TypeVar("T")

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresCheckpointer(SQLCheckpointer):
    """Checkpoints in PostgreSQL, in the tables of ``schema`` (created when missing).

    The store holds a pool of up to ``pool_size`` connections (``psycopg_pool``); a connection
    that dropped is noticed when it is taken from the pool and replaced at once, so the store
    keeps working while the server ends connections (a restart, a storm of terminated
    backends). A call whose connection is ended under it is made again on a fresh one when
    it had committed nothing (a read, a write before its commit); one ended during its commit
    (which may or may not have been stored) raises :class:`~fsm_agent.CheckpointError`, as a
    write inside a batch of several does. An agent runs the store's calls on
    ``pool_size`` threads of its own, never on the event loop's. One instance is meant to be
    shared by all the runs of a process.

    ``timeout_s`` bounds how long a write waits for a lock held by another worker (then
    :class:`~fsm_agent.StoreLockedError`) and how long a call waits for a connection. Writes
    are committed before they return, so with ``synchronous_commit`` on (the server's default)
    a checkpoint survives a crash of the process, of the machine and of the server.
    """

    placeholder = "%s"
    real = "DOUBLE PRECISION"
    lock_clause = " FOR UPDATE"

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "fsm_agent",
        timeout_s: float = 5.0,
        pool_size: int = 4,
    ) -> None:
        _check_options(schema, pool_size)
        try:
            import psycopg
            import psycopg_pool  # noqa: F401  (checked here; _open_pool uses it)
        except ImportError:
            raise MissingExtraError(
                "PostgresCheckpointer", extra="postgres", module="psycopg 3 and psycopg_pool"
            ) from None
        super().__init__(f'"{schema}".')
        self.schema = schema
        self.io_thread_count = pool_size
        self._psycopg = psycopg
        self._timeout_s = timeout_s
        self._local = threading.local()  # .committing, .lost: see _connection
        self._pool = _open_pool(dsn, schema, timeout_s, pool_size)
        try:
            with self._write() as cur:
                # One migrating worker at a time: the others wait, then find the schema ready.
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
                cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
                self._migrate(cur)
        except BaseException:
            self._pool.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresCheckpointer(schema={self.schema!r})"

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
        """A live connection of the pool, its errors translated. A call whose connection the
        server ended before it committed anything is noted (see :meth:`_again`)."""
        conn = self._take()
        local = self._local
        local.committing = False
        try:
            yield conn
        except self._psycopg.Error as exc:
            local.lost = conn.broken and not local.committing
            raise _translate(exc, self._psycopg) from exc
        finally:
            self._pool.putconn(conn)

    def _again(self, call: Callable[[], T]) -> T:
        """``call()``, made once more on a fresh connection when the server ended its
        connection before it committed anything (a read, or a write before its commit): what
        is stored is as if the first attempt was never made. A call inside a batch is left to
        the batch (its transaction is gone)."""
        local = self._local
        if getattr(self._batch, "cursor", None) is not None:
            return call()
        local.lost = False
        try:
            return call()
        except CheckpointError:
            if not local.lost:
                raise
        return call()

    def _take(self) -> psycopg.Connection[tuple[object, ...]]:
        """A connection of the pool that answers. One the server ended is handed back, which
        makes the pool open a new one at once, and the next is taken, until the timeout.
        (The pool's own check waits a growing delay after each dead connection: while the
        server keeps ending connections, every call then waited out its timeout.)"""
        import psycopg_pool

        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                conn = self._pool.getconn(timeout=max(0.0, deadline - time.monotonic()))
            except psycopg_pool.PoolTimeout as exc:
                raise CheckpointError(
                    f"no connection to the checkpoint database within {self._timeout_s} s "
                    f"({exc}); check that the server runs and accepts connections"
                ) from None
            try:
                conn.execute("")
            except self._psycopg.Error:
                conn.close()  # never used again: the pool replaces it
                self._pool.putconn(conn)
                continue
            except BaseException:
                self._pool.putconn(conn)
                raise
            return conn

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except self._psycopg.Error as exc:
            raise _translate(exc, self._psycopg) from exc

    @contextmanager
    def _write(self) -> Iterator[Cursor]:
        with self._connection() as conn, conn.transaction():
            with conn.cursor() as cur:
                yield cur
            self._local.committing = True  # from here a lost connection may have committed

    # The calls made again when the server ends their connection first (see _again).
    def load(self, run_id: str) -> Checkpoint:
        """The latest checkpoint of ``run_id`` (see :meth:`SQLCheckpointer.load`)."""
        return self._again(lambda: SQLCheckpointer.load(self, run_id))

    def effects(self, run_id: str) -> dict[str, EffectRecord]:
        """The journaled calls of ``run_id`` by key."""
        return self._again(lambda: SQLCheckpointer.effects(self, run_id))

    def runs(self) -> list[RunSummary]:
        """Every stored run, the most recently updated first."""
        return self._again(lambda: SQLCheckpointer.runs(self))

    def write_prepared(self, *prepared: PreparedSave) -> None:
        """Store checkpoints :meth:`~SQLCheckpointer.prepare_save` encoded (consecutive ones
        of one run, as one write)."""
        self._again(lambda: SQLCheckpointer.write_prepared(self, *prepared))

    def _record(self, run_id: str, key: str, kind: str, result: str | None, version: int) -> None:
        self._again(lambda: SQLCheckpointer._record(self, run_id, key, kind, result, version))

    @contextmanager
    def _read(self) -> Iterator[Cursor]:
        with self._connection() as conn, conn.cursor() as cur:
            yield cur

    def _advance(self, cur: Cursor, prepared: Sequence[PreparedSave], now: float) -> bool:
        if len(prepared) > 1:  # two statements for them all
            return super()._advance(cur, prepared, now)
        # One statement where SQLite needs two: a round trip less for every checkpoint.
        (p,) = prepared
        cur.execute(
            self._sql(
                "WITH moved AS (UPDATE {t}runs SET version = ?, state = ?, stop_reason = ?, "
                "steps = ?, updated_at = ? WHERE run_id = ? AND version = ? RETURNING run_id) "
                "INSERT INTO {t}checkpoints (run_id, version, saved_at, body, messages_from, "
                "messages, trace_from, trace) SELECT run_id, ?, ?, ?, ?, ?, ?, ? FROM moved"
            ),
            (
                *(p.version, p.state, p.stop, p.steps, now, p.run_id, p.version - 1),  # the move
                *(p.version, now, p.body, p.messages_from, p.messages, p.trace_from, p.trace),
            ),
        )
        return cur.rowcount == 1

    def _is_duplicate(self, exc: BaseException) -> bool:
        return isinstance(exc, self._psycopg.errors.UniqueViolation)

    def drop_schema(self) -> None:
        """Drop the schema and every run in it (for tests)."""
        with self._write() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')

    def close(self) -> None:
        """Wait for the calls handed to the store's threads, then close the pool."""
        self._stop_io()
        self._pool.close()


def _check_options(schema: str, pool_size: int) -> None:
    """Refuse a schema name that is not a plain lower-case SQL name, or an empty pool."""
    if not _NAME.fullmatch(schema):
        raise ConfigurationError(
            f"schema {schema!r} must be a lower-case SQL name (letters, digits, '_')"
        )
    if pool_size < 1:
        raise ConfigurationError(f"pool_size must be at least 1, got {pool_size}")


def _open_pool(
    dsn: str, schema: str, timeout_s: float, pool_size: int
) -> psycopg_pool.ConnectionPool[psycopg.Connection[tuple[object, ...]]]:
    """The store's open pool of up to ``pool_size`` connections to ``dsn``, each waiting at
    most ``timeout_s`` for a lock; a wrong URL or a server down raises
    :class:`~fsm_agent.CheckpointError` at once. The caller checked that both drivers are
    installed."""
    import psycopg
    import psycopg_pool

    lock_ms = int(timeout_s * 1000)
    connect_timeout = max(1, round(timeout_s))
    try:  # one plain connection first: a wrong URL or a server down fails at once
        psycopg.connect(dsn, connect_timeout=connect_timeout).close()
    except psycopg.Error as exc:
        raise CheckpointError(f"cannot connect to the checkpoint database: {exc}") from None

    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"SET lock_timeout = {lock_ms}")

    pool: psycopg_pool.ConnectionPool[psycopg.Connection[tuple[object, ...]]] = (
        psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            kwargs={
                "autocommit": True,
                "connect_timeout": connect_timeout,
                "application_name": f"fsm_agent:{schema}",  # for pg_stat_activity
            },
            configure=configure,
            timeout=timeout_s,
            open=False,
            name=f"fsm-agent-{schema}",
        )
    )
    try:
        pool.open(wait=True, timeout=timeout_s)
    except psycopg_pool.PoolTimeout as exc:
        pool.close()
        raise CheckpointError(
            f"cannot connect to the checkpoint database within {timeout_s} s ({exc}); check "
            "that the server runs and the URL is right"
        ) from None
    return pool


def _translate(exc: Exception, psycopg: object) -> FsmAgentError:
    errors = psycopg.errors  # type: ignore[attr-defined]
    if isinstance(exc, errors.LockNotAvailable | errors.QueryCanceled | errors.DeadlockDetected):
        return StoreLockedError(f"the checkpoint database stayed locked by another writer ({exc})")
    if isinstance(exc, errors.DiskFull | errors.OutOfMemory):
        return StoreFullError(
            f"the checkpoint database is full ({exc}); the write was not made and the stored "
            "checkpoints are intact"
        )
    return CheckpointError(f"the checkpoint database failed: {exc}")
