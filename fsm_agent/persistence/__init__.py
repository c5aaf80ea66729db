"""Checkpoints: save a run after every move, and resume it anywhere, in this process or another.

A :class:`Checkpointer` stores two things per run:

* **checkpoints**: the :class:`~fsm_agent.RunState` after each move of the machine, numbered
  1, 2, 3, … (the *version*). A worker writes version ``n + 1`` only while ``n`` is the latest
  (optimistic concurrency): of two workers resuming the same run, one wins and the other gets
  :class:`~fsm_agent.CheckpointConflictError` before it runs anything.
* **effects**: a write-ahead journal of the run's model calls and tool calls. The *intent* of a
  call is recorded before it starts and its *result* after it ends, under the key
  ``step/model/n`` or ``step/tool/call_id`` (with the run id, the call's idempotency key).

``Agent(checkpointer=..., durability=...)`` uses them; ``agent.resume(run_id)`` continues a run
from its latest checkpoint. ``docs/durability.md`` states what each :class:`Durability` setting
guarantees and what a crash can repeat.

Implementations: :class:`InMemoryCheckpointer` (tests, one process),
:class:`~fsm_agent.persistence.SQLiteCheckpointer` (the embedded default, stdlib ``sqlite3`` in
WAL mode) and :class:`~fsm_agent.persistence.PostgresCheckpointer` (psycopg 3, the
``[postgres]`` extra; several processes and machines). :func:`open_checkpointer` opens one from
a URL.

A store that stops a run the way a crash would, for tests, is
:class:`fsm_agent.testing.CrashingCheckpointer`.

Read in order: this module (the :class:`Checkpointer` protocol and the in-memory store),
:mod:`.run_log` (how a run writes its checkpoints and journal), :mod:`.sql` (what the SQL stores
share), then :mod:`.sqlite` and :mod:`.postgres`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from pydantic_core import PydanticSerializationError

from .._lazy import facade
from ..errors import CheckpointConflictError, ConfigurationError, UnknownRunError
from ..machine.table import State, StopReason
from ..run.state import RunState
from ..values.define import record

if TYPE_CHECKING:
    from .postgres import PostgresCheckpointer
    from .sqlite import SQLiteCheckpointer

__all__ = [
    "Checkpoint",
    "Checkpointer",
    "Durability",
    "EffectRecord",
    "InMemoryCheckpointer",
    "PostgresCheckpointer",
    "RunSummary",
    "SQLiteCheckpointer",
    "open_checkpointer",
]


class Durability(StrEnum):
    """When an agent with a checkpointer writes (``docs/durability.md`` has the details)."""

    SYNC = "sync"  # every checkpoint and tool record is stored before the next call or rest
    ASYNC = "async"  # checkpoints and results are written without waiting; intents are awaited
    EXIT = "exit"  # one checkpoint when the run rests (done, aborted, suspended)


@record(kw_only=False)
class Checkpoint:
    """One stored run state: ``version`` counts the run's checkpoints from 1."""

    run_id: str
    version: int
    state: RunState
    saved_at: float  # seconds since the epoch
    move_times: tuple[float | None, ...] = ()
    """When each move of ``state.trace`` was saved (seconds since the epoch), in order; ``None``
    for a move saved together with later ones (durability ``exit``), and empty from a store
    that does not keep them."""


@record(kw_only=False)
class RunSummary:
    """What a store knows about a run without decoding it: its latest checkpoint's position.
    A row this version cannot read (a state or stop reason a newer fsm_agent wrote) is still
    listed: ``problem`` says what could not be read, and the unreadable fields are ``None``."""

    run_id: str
    version: int
    state: State | None
    stop_reason: StopReason | None
    steps: int
    updated_at: float  # seconds since the epoch
    problem: str | None = None


@record(kw_only=False)
class EffectRecord:
    """One journaled model call or tool call: ``result`` is ``None`` while only its intent is
    recorded (it started and never reported back)."""

    key: str  # step/model/n or step/tool/call_id
    kind: Literal["model", "tool"]
    result: str | None  # the outcome as JSON text


@runtime_checkable
class Checkpointer(Protocol):
    """Where runs are saved. Every write names the checkpoint ``version`` the writer holds:
    ``save`` stores ``version`` and needs ``version - 1`` to be the latest (none for 1); the
    effect records need ``version`` to be the latest. Otherwise they raise
    :class:`~fsm_agent.CheckpointConflictError` and write nothing. A failed write leaves what is
    stored as it was.

    An agent calls a store on threads, not on its event loop's: the store's own when it has
    an ``io_threads()`` method returning a
    :class:`~fsm_agent.persistence.store_threads.StoreThreads` (``None`` for a store without
    I/O, called in place), else one thread per run; a store with those threads may also offer
    ``write_now(calls)``, which makes a run's writes on the loop's thread when that waits for
    nothing and says ``False`` otherwise (SQLite does: see ``docs/durability.md``). A store
    may also offer ``forget(run_id)`` (drop what it keeps in memory for a run; called when the
    run's task ends),
    ``prepare_save``/``write_prepared`` (encode on the loop's thread, write on the store's;
    ``write_prepared`` takes one checkpoint or several consecutive ones of a run), as the SQL
    stores do, and ``checkpoints(run_id)`` (every checkpoint of a run, oldest first: what
    ``Agent.fork`` needs), as every store of this package does."""

    def save(self, state: RunState, *, version: int) -> None:
        """Store ``state`` as checkpoint ``version`` of its run."""
        ...

    def load(self, run_id: str) -> Checkpoint:
        """The latest checkpoint of ``run_id``; :class:`~fsm_agent.UnknownRunError` when none."""
        ...

    def record_intent(
        self, run_id: str, key: str, kind: Literal["model", "tool"], *, version: int
    ) -> None:
        """Record that the call ``key`` is about to start."""
        ...

    def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
        """Record the outcome of the call ``key`` (JSON text)."""
        ...

    def effects(self, run_id: str) -> dict[str, EffectRecord]:
        """The journaled calls of ``run_id`` by key."""
        ...

    def runs(self) -> list[RunSummary]:
        """Every stored run, the most recently updated first."""
        ...

    def close(self) -> None:
        """Release the store's connection."""
        ...


def conflict(run_id: str, version: int, latest: int | None) -> CheckpointConflictError:
    """The error of a write by a worker that holds ``version - 1`` (or ``version`` for an effect
    record) while the store holds ``latest``."""
    if latest is None:
        detail = "the store has no such run"
    elif version == 1 and latest >= 1:
        detail = f"a run with this id already exists (at checkpoint {latest}); resume it instead"
    else:
        detail = (
            f"another worker wrote it first: the store is at checkpoint {latest}, this worker "
            f"holds {version - 1}"
        )
    return CheckpointConflictError(
        f"run {run_id!r}: {detail}; this worker stops without writing",
        run_id=run_id,
        version=version,
    )


def move_times(saves: Iterable[tuple[float, int]]) -> tuple[float | None, ...]:
    """Each move's time from a run's checkpoints, given in order as (saved at, moves held): a
    move takes the time of the checkpoint that first held it; of several moves first held by
    one checkpoint, only the last has a known time."""
    times: list[float | None] = []
    for saved_at, moves in saves:
        if moves <= len(times):  # a checkpoint that held no new move (or fewer: a rewrite)
            del times[moves:]
            continue
        times.extend([None] * (moves - len(times) - 1))
        times.append(saved_at)
    return tuple(times)


class InMemoryCheckpointer:
    """A checkpointer in this process's memory (for tests and short-lived programs). States are
    kept as JSON text, so a loaded state shares nothing with the running one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checkpoints: dict[str, list[tuple[float, str, int]]] = {}  # (saved at, state, moves)
        self._summaries: dict[str, RunSummary] = {}
        self._effects: dict[str, dict[str, EffectRecord]] = {}

    def save(self, state: RunState, *, version: int) -> None:
        """Store ``state`` as checkpoint ``version`` of its run."""
        try:
            text = state.model_dump_json()
        except PydanticSerializationError:  # text JSON cannot carry, replaced (see storable)
            from .storable import storable_state

            text = storable_state(state).model_dump_json()
        now = time.time()
        with self._lock:
            rows = self._checkpoints.get(state.run_id, [])
            if len(rows) != version - 1:
                raise conflict(state.run_id, version, len(rows) if rows or version > 1 else 0)
            rows.append((now, text, len(state.trace)))
            self._checkpoints[state.run_id] = rows
            self._summaries[state.run_id] = RunSummary(
                state.run_id, version, state.state, state.stop_reason, state.counters.steps, now
            )

    def load(self, run_id: str) -> Checkpoint:
        """The latest checkpoint of ``run_id``."""
        with self._lock:
            rows = self._checkpoints.get(run_id)
            if not rows:
                raise UnknownRunError(f"no checkpoint holds run {run_id!r}", run_id=run_id)
            saved_at, text, _ = rows[-1]
            version = len(rows)
            times = move_times((at, moves) for at, _, moves in rows)
        return Checkpoint(run_id, version, RunState.model_validate_json(text), saved_at, times)

    def _fence(self, run_id: str, version: int) -> None:
        latest = len(self._checkpoints.get(run_id, ()))
        if latest != version:
            raise conflict(run_id, version + 1, latest or None)

    def record_intent(
        self, run_id: str, key: str, kind: Literal["model", "tool"], *, version: int
    ) -> None:
        """Record that the call ``key`` is about to start."""
        with self._lock:
            self._fence(run_id, version)
            self._effects.setdefault(run_id, {})[key] = EffectRecord(key, kind, None)

    def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
        """Record the outcome of the call ``key``."""
        with self._lock:
            self._fence(run_id, version)
            effects = self._effects.setdefault(run_id, {})
            known = effects.get(key)
            kind: Literal["model", "tool"] = (
                known.kind if known else ("model" if "/model/" in key else "tool")
            )
            effects[key] = EffectRecord(key, kind, result)

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """Every checkpoint of ``run_id``, oldest first (what a fork starts from)."""
        with self._lock:
            rows = list(self._checkpoints.get(run_id, ()))
        if not rows:
            raise UnknownRunError(f"no checkpoint holds run {run_id!r}", run_id=run_id)
        return [
            Checkpoint(run_id, version, RunState.model_validate_json(text), saved_at)
            for version, (saved_at, text, _) in enumerate(rows, start=1)
        ]

    def effects(self, run_id: str) -> dict[str, EffectRecord]:
        """The journaled calls of ``run_id`` by key."""
        with self._lock:
            return dict(self._effects.get(run_id, {}))

    def runs(self) -> list[RunSummary]:
        """Every stored run, the most recently updated first."""
        with self._lock:
            return sorted(self._summaries.values(), key=lambda s: s.updated_at, reverse=True)

    def io_threads(self) -> None:
        """None: the store keeps no I/O, so an agent calls it on the event loop's thread."""
        return

    def close(self) -> None:
        """Nothing to release."""


def open_checkpointer(target: str) -> Checkpointer:
    """Open the store a URL names: ``sqlite:///relative.db``, ``sqlite:////absolute.db``,
    ``postgresql://user@host/db`` (tables in the ``fsm_agent`` schema; construct a
    :class:`PostgresCheckpointer` to choose another), or a plain file path (SQLite)."""
    if target.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresCheckpointer

        return PostgresCheckpointer(target)
    from .sqlite import SQLiteCheckpointer

    if target.startswith("sqlite:///"):
        return SQLiteCheckpointer(target[len("sqlite:///") :])
    if "://" in target:
        raise ConfigurationError(
            f"unknown checkpoint store {target!r}: use sqlite:///PATH, postgresql://… or a path"
        )
    return SQLiteCheckpointer(target)


# The SQL checkpointers load with their module on first use (PostgreSQL needs the extra).
__getattr__, __dir__ = facade(globals())


UNKNOWN_OUTCOME_PREFIX = "Error: outcome unknown"
"""How the result of a call whose outcome a crash made unknown starts."""
