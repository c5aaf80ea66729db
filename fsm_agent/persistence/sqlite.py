"""The SQLite checkpointer: the embedded default (stdlib ``sqlite3``, WAL mode)."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import (
    CheckpointError,
    CorruptCheckpointError,
    FsmAgentError,
    StoreFullError,
    StoreLockedError,
)
from .sql import Cursor, SQLCheckpointer

__all__ = ["SQLiteCheckpointer"]

_FULL = 13  # SQLITE_FULL
_BUSY = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
_CORRUPT = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB


class SQLiteCheckpointer(SQLCheckpointer):
    """Checkpoints in a SQLite file, one row per move, in WAL mode.

    ``timeout_s`` is how long a write waits for another writer's lock before
    :class:`~fsm_agent.StoreLockedError`. With ``fsync=False`` (the default) a commit survives
    a crash of the process; ``fsync=True`` (``synchronous=FULL``) also survives an OS crash or
    a power loss, at the cost of an fsync per write. One instance may be shared by the runs of
    a process (its connection is guarded by a lock); several processes may open the same file.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, timeout_s: float = 5.0, fsync: bool = False
    ) -> None:
        super().__init__("")
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise CheckpointError(
                f"cannot open the checkpoint database {self.path!r}: {exc}"
            ) from None
        try:
            with self._guard():
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
            with self._write() as cur:
                self._migrate(cur)
        except BaseException:
            self._conn.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteCheckpointer({self.path!r})"

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Serialise use of the connection and translate SQLite's errors."""
        with self._lock, self._translated():
            yield

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc

    @contextmanager
    def _write(self) -> Iterator[Cursor]:
        with self._guard():
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                self._conn.rollback()
                raise
            try:
                cur.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.rollback()
                raise

    @contextmanager
    def _read(self) -> Iterator[Cursor]:
        with self._guard():
            yield self._conn.cursor()

    def _is_duplicate(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError)

    def close(self) -> None:
        """Wait for the calls handed to the store's thread, then close the connection."""
        self._stop_io()
        with self._lock:
            self._conn.close()


def _translate(exc: sqlite3.Error, path: str) -> FsmAgentError:
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    if primary == _FULL or "full" in text:
        return StoreFullError(
            f"the checkpoint database {path!r} is full ({text}); the write was not made and the "
            "stored checkpoints are intact"
        )
    if primary in _BUSY or "locked" in text:
        return StoreLockedError(
            f"the checkpoint database {path!r} stayed locked by another writer ({text})"
        )
    if primary in _CORRUPT or "malformed" in text or "not a database" in text:
        return CorruptCheckpointError(f"the checkpoint database {path!r} is damaged ({text})")
    return CheckpointError(f"the checkpoint database {path!r} failed: {text}")
