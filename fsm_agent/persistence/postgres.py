"""The PostgreSQL checkpointer (psycopg 3, the ``[postgres]`` extra): runs shared by several
processes and machines."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..errors import (
    CheckpointError,
    ConfigurationError,
    FsmAgentError,
    MissingExtraError,
    StoreFullError,
    StoreLockedError,
)
from .sql import Cursor, SQLCheckpointer

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresCheckpointer"]

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresCheckpointer(SQLCheckpointer):
    """Checkpoints in PostgreSQL, in the tables of ``schema`` (created when missing).

    ``timeout_s`` bounds how long a write waits for a lock held by another worker before
    :class:`~fsm_agent.StoreLockedError`. Writes are committed before they return, so with
    ``synchronous_commit`` on (the server's default) a checkpoint survives a crash of the
    process, of the machine and of the server. One instance may be shared by the runs of a
    process (its connection is guarded by a lock).
    """

    placeholder = "%s"
    real = "DOUBLE PRECISION"
    lock_clause = " FOR UPDATE"

    def __init__(self, dsn: str, *, schema: str = "fsm_agent", timeout_s: float = 5.0) -> None:
        if not _NAME.fullmatch(schema):
            raise ConfigurationError(
                f"schema {schema!r} must be a lower-case SQL name (letters, digits, '_')"
            )
        try:
            import psycopg
        except ImportError:
            raise MissingExtraError(
                "PostgresCheckpointer", extra="postgres", module="psycopg 3"
            ) from None
        super().__init__(f'"{schema}".')
        self.schema = schema
        self._psycopg = psycopg
        self._lock = threading.Lock()
        try:
            self._conn: psycopg.Connection[tuple[object, ...]] = psycopg.connect(
                dsn, autocommit=True, connect_timeout=max(1, round(timeout_s))
            )
        except psycopg.Error as exc:
            raise CheckpointError(f"cannot connect to the checkpoint database: {exc}") from None
        try:
            with self._guard():
                self._conn.execute(f"SET lock_timeout = {int(timeout_s * 1000)}")
            with self._write() as cur:
                # One migrating worker at a time: the others wait, then find the schema ready.
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
                cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
                self._migrate(cur)
        except BaseException:
            self._conn.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresCheckpointer(schema={self.schema!r})"

    @contextmanager
    def _guard(self) -> Iterator[None]:
        with self._lock:
            try:
                yield
            except self._psycopg.Error as exc:
                raise _translate(exc, self._psycopg) from exc

    @contextmanager
    def _write(self) -> Iterator[Cursor]:
        with self._guard(), self._conn.transaction(), self._conn.cursor() as cur:
            yield cur

    @contextmanager
    def _read(self) -> Iterator[Cursor]:
        with self._guard(), self._conn.cursor() as cur:
            yield cur

    def _is_duplicate(self, exc: BaseException) -> bool:
        return isinstance(exc, self._psycopg.errors.UniqueViolation)

    def drop_schema(self) -> None:
        """Drop the schema and every run in it (for tests)."""
        with self._write() as cur:
            cur.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._conn.close()


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
