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

For property tests and the fuzzer, :func:`crash_and_resume` stops a run the way a crash would,
right after a chosen write, and resumes it (invariant 10: resume equivalence).

Read in order: this module (the :class:`Checkpointer` protocol, the in-memory store and the
crash helper), :mod:`.run_log` (how a run writes its checkpoints and journal),
:mod:`.sql` (what the SQL stores share), then :mod:`.sqlite` and :mod:`.postgres`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic_core import PydanticSerializationError

from ..errors import CheckpointConflictError, ConfigurationError, UnknownRunError
from ..kernel.run import RunResult
from ..machine.table import State, StopReason
from ..messages import ToolResult
from ..run_state import RunState

if TYPE_CHECKING:
    from ..kernel.agent import Agent
    from .postgres import PostgresCheckpointer
    from .sqlite import SQLiteCheckpointer

__all__ = [
    "Checkpoint",
    "Checkpointer",
    "CrashingCheckpointer",
    "Durability",
    "EffectRecord",
    "InMemoryCheckpointer",
    "PostgresCheckpointer",
    "RunSummary",
    "SQLiteCheckpointer",
    "SimulatedCrash",
    "crash_and_resume",
    "open_checkpointer",
    "resume_differences",
]


class Durability(StrEnum):
    """When an agent with a checkpointer writes (``docs/durability.md`` has the details)."""

    SYNC = "sync"  # every checkpoint and tool record is stored before the next call or rest
    ASYNC = "async"  # checkpoints and results are written without waiting; intents are awaited
    EXIT = "exit"  # one checkpoint when the run rests (done, aborted, suspended)


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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

    An agent calls a store on threads, never on its event loop's: the store's own when it has
    an ``io_threads()`` method returning a
    :class:`~fsm_agent.persistence.store_threads.StoreThreads` (``None`` for a store without
    I/O, called in place), else one thread per run. A store may also offer ``forget(run_id)``
    (drop what it keeps in memory for a run; called when the run's task ends),
    ``prepare_save``/``write_prepared`` (encode on the loop's thread, write on the store's), as
    the SQL stores do, and ``checkpoints(run_id)`` (every checkpoint of a run, oldest first: what
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


def __getattr__(name: str) -> Any:
    """The SQL checkpointers, imported when first used (PostgreSQL needs the extra)."""
    if name == "SQLiteCheckpointer":
        from .sqlite import SQLiteCheckpointer

        return SQLiteCheckpointer
    if name == "PostgresCheckpointer":
        from .postgres import PostgresCheckpointer

        return PostgresCheckpointer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- crash simulation, for property tests and the fuzzer ------------------------------------------


class SimulatedCrash(BaseException):
    """Raised by :class:`CrashingCheckpointer` to stop a run the way a crash would. A
    ``BaseException``, so that no handler in the kernel or in a tool catches it."""


class CrashingCheckpointer:
    """Wraps a checkpointer and raises :class:`SimulatedCrash` right after its ``crash_after``-th
    write has been stored, as if the process died at that boundary. ``at="checkpoint"`` counts
    the checkpoints only; ``at="any"`` counts effect records (intents and results) too."""

    def __init__(
        self,
        inner: Checkpointer,
        crash_after: int,
        *,
        at: Literal["checkpoint", "any"] = "checkpoint",
    ) -> None:
        self.inner = inner
        self.crash_after = crash_after
        self.at = at
        self.writes = 0
        self.crashed = False

    def _wrote(self) -> None:
        self.writes += 1
        if self.writes == self.crash_after:
            self.crashed = True
            raise SimulatedCrash(f"simulated crash after write {self.writes}")

    def save(self, state: RunState, *, version: int) -> None:
        """Store, then crash when this is the chosen write."""
        self.inner.save(state, version=version)
        self._wrote()

    def load(self, run_id: str) -> Checkpoint:
        """The inner store's latest checkpoint."""
        return self.inner.load(run_id)

    def record_intent(
        self, run_id: str, key: str, kind: Literal["model", "tool"], *, version: int
    ) -> None:
        """Record, then crash when effect records count and this is the chosen write."""
        self.inner.record_intent(run_id, key, kind, version=version)
        if self.at == "any":
            self._wrote()

    def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
        """Record, then crash when effect records count and this is the chosen write."""
        self.inner.record_result(run_id, key, result, version=version)
        if self.at == "any":
            self._wrote()

    def effects(self, run_id: str) -> dict[str, EffectRecord]:
        """The inner store's journal."""
        return self.inner.effects(run_id)

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The inner store's checkpoints of ``run_id``, oldest first."""
        return self.inner.checkpoints(run_id)  # type: ignore[attr-defined,no-any-return]

    def runs(self) -> list[RunSummary]:
        """The inner store's runs."""
        return self.inner.runs()

    def io_threads(self) -> None:
        """None: an agent calls this store in place, so that the simulated crash stops the run
        right at the chosen write, as a real one would (on a store's thread it would surface
        only at the run's next awaited write)."""
        return

    def forget(self, run_id: str) -> None:
        """Let the inner store drop what it keeps for ``run_id``."""
        forget = getattr(self.inner, "forget", None)
        if callable(forget):
            forget(run_id)

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()


async def crash_and_resume(
    agent: Agent[Any, Any],
    prompt: str,
    *,
    crash_after: int,
    at: Literal["checkpoint", "any"] = "checkpoint",
    store: Checkpointer | None = None,
) -> tuple[RunResult[Any], bool]:
    """Run ``agent`` on ``prompt`` with a fresh store (``store``, default in memory), stop it as
    a crash would right after the store's ``crash_after``-th write, then resume it from its
    latest checkpoint with the same agent, whose model and tools stand for the outside world
    that a crash does not reset. Returns the final result and whether the crash happened (a
    run with fewer writes just ends). A crash before the first checkpoint starts the run again.

    Compare the result with an uninterrupted run's using :func:`resume_differences`. The
    agent's own ``checkpointer`` is replaced for the duration of the call."""
    from ..errors import RunFinishedError

    inner = store if store is not None else InMemoryCheckpointer()
    crashing = CrashingCheckpointer(inner, crash_after, at=at)
    saved = agent.checkpointer
    try:
        agent.checkpointer = crashing
        try:
            return await agent.run(prompt), False
        except SimulatedCrash:
            pass
        agent.checkpointer = inner
        runs = inner.runs()
        if not runs:
            return await agent.run(prompt), True
        run_id = runs[0].run_id
        try:
            return await agent.resume(run_id), True
        except RunFinishedError:
            return RunResult.of(inner.load(run_id).state, None, agent._plan.output_spec), True
    finally:
        agent.checkpointer = saved


UNKNOWN_OUTCOME_PREFIX = "Error: outcome unknown"
"""How the result of a call whose outcome a crash made unknown starts."""


def resume_differences(expected: RunResult[Any], actual: RunResult[Any]) -> list[str]:
    """What differs between an uninterrupted run's result and a resumed one's: output, stop
    reason, final state, usage and message thread (invariant 10). A tool result that
    reads "outcome unknown" in ``actual`` (a non-idempotent call a crash cut short) may stand
    in for any result in ``expected``; everything else must be equal."""
    problems: list[str] = []
    for name in ("output", "stop_reason", "state", "usage"):
        want, got = getattr(expected, name), getattr(actual, name)
        if want != got:
            problems.append(f"{name}: expected {want!r}, got {got!r}")
    if len(expected.messages) != len(actual.messages):
        problems.append(f"messages: expected {len(expected.messages)}, got {len(actual.messages)}")
    for index, (want_m, got_m) in enumerate(zip(expected.messages, actual.messages, strict=False)):
        if want_m == got_m:
            continue
        unknown = any(
            isinstance(p, ToolResult) and p.content.startswith(UNKNOWN_OUTCOME_PREFIX)
            for p in got_m.parts
        )
        if unknown and len(want_m.parts) == len(got_m.parts):
            continue
        problems.append(f"message {index} differs: expected {want_m!r}, got {got_m!r}")
        break
    return problems
