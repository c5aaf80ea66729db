"""The SQLite checkpointer: the embedded default (stdlib ``sqlite3``, WAL mode).

A commit to a local file in WAL mode with ``synchronous=NORMAL`` is a write to the WAL, not
an fsync: tens of microseconds, less than handing the write to the store's thread and waking
the event loop when it is done. So a run's writes that would wait for nothing (the connection
free, no other writer holding the database) are made where the run asks for them, on the
event loop's thread (:meth:`SQLiteCheckpointer.write_now`); any other is handed to the store's
thread as before.

The WAL is copied back into the database (a checkpoint, which fsyncs what the commits wrote)
on a thread and a connection of its own, never by a commit on the loop's thread, and while the
runs go on writing: a WAL checkpoint lets writers append to the WAL meanwhile. The frames they
append are copied by further passes while many are left. A commit after a pass that nothing was
appended during starts the WAL over from its beginning; when the runs kept writing through
every pass and the WAL has grown long (:data:`HELD_FRAMES`), the last frames are copied with the
store's connection held (a short wait for the runs' writes), so that the next commit starts it
over instead of growing it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..errors import (
    CheckpointError,
    CorruptCheckpointError,
    FsmAgentError,
    StoreFullError,
    StoreLockedError,
)
from ..log import logger
from .sql import Cursor, SQLCheckpointer
from .store_threads import Call, JobFailed

__all__ = ["SQLiteCheckpointer"]

_COPY = "PRAGMA wal_checkpoint(PASSIVE)"
_FULL = 13  # SQLITE_FULL
_BUSY = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
_CORRUPT = (11, 26)  # SQLITE_CORRUPT, SQLITE_NOTADB
COPY_BACK_EVERY = 200
"""Commits between two copies of the WAL back into the database, made on a thread of their own
(a few pages a commit: about SQLite's own automatic checkpoint, every 1,000 pages, which the
store turns off so that no commit on an event loop's thread makes one)."""
COPY_PASSES = 4
"""The most passes a copy back makes while the runs write (each copies what the runs appended
during the one before)."""
QUIET_FRAMES = 64
"""A pass that copied at most this many WAL frames (pages) was short: the copy back stops."""
HELD_FRAMES = 4_000
"""The WAL's length (frames of a page, 4 KiB by default) from which a copy back that the runs
kept writing through copies what they appended with their writes held, so that the WAL starts
over (one that does not leaves it to the next copy back, or to the first commit after a pass
that nothing was appended during)."""


class SQLiteCheckpointer(SQLCheckpointer):
    """Checkpoints in a SQLite file, one row per move, in WAL mode.

    ``timeout_s`` is how long a write waits for another writer's lock before
    :class:`~fsm_agent.StoreLockedError`. With ``fsync=False`` (the default) a commit survives
    a crash of the process; ``fsync=True`` (``synchronous=FULL``) also survives an OS crash or
    a power loss, at the cost of an fsync per write (and then every write is made on the
    store's thread). One instance may be shared by the runs of a process (its connection is
    guarded by a lock); several processes may open the same file.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, timeout_s: float = 5.0, fsync: bool = False
    ) -> None:
        super().__init__("")
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._busy_ms = max(0, int(timeout_s * 1000))
        # Whether the connection waits ``timeout_s`` for a lock (as the store's thread does) or
        # not at all (as ``write_now`` does): set when the other kind of use takes it.
        self._waits = True
        self._fsync = fsync
        self._commits = 0  # since the WAL was last copied back into the database
        self._copier: threading.Thread | None = None  # the copy back under way, if any
        self._copying: sqlite3.Connection | None = None  # its connection, opened by the first
        self._closed = False
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
                self._conn.execute("PRAGMA wal_autocheckpoint=0")  # the store's thread does it
            with self._write() as cur:
                self._migrate(cur)
        except BaseException:
            self._conn.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteCheckpointer({self.path!r})"

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Serialise use of the connection (which waits for another writer's lock up to
        ``timeout_s``) and translate SQLite's errors."""
        with self._lock, self._translated():
            if not self._waits:
                self._conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
                self._waits = True
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
            self._committed()

    def write_now(self, calls: Sequence[Call]) -> bool:
        """Make ``calls`` in one transaction on the caller's thread, when that waits for
        nothing; ``False``, with nothing made, when it would wait (the connection in use,
        another writer holding the database) or with ``fsync=True``. When a call fails, the
        transaction is rolled back and :class:`JobFailed` says which and why (the caller
        makes the calls before it again); when the commit fails, its error is raised."""
        if self._fsync or not self._lock.acquire(blocking=False):
            return False
        conn = self._conn
        try:
            cur = conn.cursor()
            try:
                if self._waits:
                    cur.execute("PRAGMA busy_timeout=0")
                    self._waits = False
                cur.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:  # another writer holds the database: no waiting here
                return False
            self._batched(cur)
            try:
                for index, (fn, args) in enumerate(calls):
                    try:
                        fn(*args)
                    except Exception as exc:
                        raise JobFailed(index, exc) from exc
                try:
                    cur.execute("COMMIT")
                except sqlite3.Error as exc:
                    raise _translate(exc, self.path) from exc
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise
            finally:
                self._batched(None)
            self._committed()
        finally:
            self._lock.release()
        return True

    def _committed(self) -> None:
        """Count a commit (with the connection held); every ``COPY_BACK_EVERY`` of them, start
        copying the WAL back, unless a copy back is still under way."""
        self._commits += 1
        if self._commits < COPY_BACK_EVERY or self._closed:
            return
        if self._copier is not None and self._copier.is_alive():
            return
        self._commits = 0
        self._copier = threading.Thread(
            target=self._copy_back, name="fsm-agent-copy-back", daemon=True
        )
        self._copier.start()

    def _copy_back(self) -> None:
        """Copy the WAL back into the database, as SQLite's automatic checkpoint would, on the
        copy back's own connection while the runs write (see the module docstring); a failure
        leaves the WAL as it is, to be copied next time."""
        try:
            copying = self._copying
            if copying is None:
                copying = self._copying = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False
                )
                copying.execute(f"PRAGMA synchronous={'FULL' if self._fsync else 'NORMAL'}")
            before = 0  # frames copied by the pass before
            for _ in range(COPY_PASSES):
                ((busy, frames, copied),) = copying.execute(_COPY).fetchall()  # read to the end
                # A pass that had few frames to copy was short: few were appended meanwhile.
                if busy or frames - before <= QUIET_FRAMES:
                    break
                before = copied
            if not busy and frames >= HELD_FRAMES:
                with self._guard():  # what was appended meanwhile, with the runs' writes held
                    # Read to its end: a statement left unfinished keeps a read open on the
                    # connection, and every later BEGIN IMMEDIATE of write_now would fail.
                    self._conn.execute(_COPY).fetchall()
        except (sqlite3.Error, FsmAgentError) as exc:
            logger.warning("%s: the WAL was not copied back into the database: %s", self, exc)

    @contextmanager
    def _read(self) -> Iterator[Cursor]:
        with self._guard():
            yield self._conn.cursor()

    def _is_duplicate(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError)

    def close(self) -> None:
        """Wait for the calls handed to the store's thread and for a copy back under way, then
        close the connections."""
        self._stop_io()
        with self._lock:
            self._closed = True
            copier = self._copier
        if copier is not None:
            copier.join()
        if self._copying is not None:
            self._copying.close()
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
