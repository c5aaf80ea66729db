"""The durability of one run: checkpoints after moves, and the write-ahead journal of effects.

The driver calls :meth:`RunLog.moved` after every move; the ``calling`` handler asks
:meth:`RunLog.begin_model_call` before a model call and reports its end; the ``dispatching``
handler runs tools through :meth:`RunLog.execute_tool`. On resume a recorded outcome is reused;
an intent without an outcome re-issues a model call, re-runs an idempotent tool, and otherwise
settles the call as "outcome unknown" (for the model, or as a question for a human).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Literal, NoReturn, TypeVar

from pydantic_core import PydanticSerializationError

from ..errors import ModelError
from ..machine.agent_machine import Move
from ..machine.table import TERMINAL, Outcome, State, StopReason
from ..run.state import RunState
from ..tools import Tool, ToolContext, ToolExecution
from ..values.messages import ModelResponse, ToolCall, ToolResult
from . import UNKNOWN_OUTCOME_PREFIX, Checkpoint, Checkpointer, Durability, EffectRecord
from .outcomes import (  # RecordedToolError and recorded_content: their old path, kept
    RecordedToolError,
    decode_model_outcome,
    decode_tool_outcome,
    encode_model_outcome,
    encode_tool_outcome,
    recorded_content,
)
from .storable import storable_response, storable_result
from .store_threads import Call, JobFailed, Lane, StoreThreads

T = TypeVar("T")

__all__ = [
    "AT_ONCE_RUNS",
    "MERGED_CHECKPOINTS",
    "RecordedToolError",
    "RunLog",
    "UnknownOutcome",
    "encode_model_outcome",
    "in_store_thread",
    "load_checkpoint",
    "recorded_content",
    "rederived",
    "store_threads_of",
    "unknown_result",
]

AT_ONCE_RUNS = 4
"""The most runs writing through a store's threads at once for which a run's awaited writes
are made at once when the store can (``write_now``): for a few runs, handing the writes to the
store's thread and waking the loop when they are done costs more than the commit; for many,
the store's thread commits many runs' writes together, and the loop's thread is left to the
runs."""

MERGED_CHECKPOINTS = 16
"""The most consecutive checkpoints of a run written as one (one statement inserts them)."""

UnknownOutcome = Literal["model", "human"]
"""Who settles a non-idempotent call a crash cut short: the model (an "outcome unknown" error
result) or a human (the run suspends with the question)."""

UNKNOWN_RESULT = (
    UNKNOWN_OUTCOME_PREFIX + ": the run stopped while tool '{name}' was running (call {id}). It is "
    "not marked idempotent, so it was not run again; it may or may not have taken effect. Check "
    "before calling it again."
)
UNKNOWN_QUESTION = (
    "The run stopped while tool '{name}' was running with arguments {args} (call {id}). It is "
    "not marked idempotent, so it was not run again. Did it take effect? Your answer becomes "
    "the call's result."
)


def rederived(move: Move) -> bool:
    """Whether a resume re-derives ``move`` from the journal, so that its checkpoint need not
    be stored before the run's next model call: the end of a tool turn (out of
    ``dispatching`` into ``compacting``: resumed at the turn, the run reuses each tool outcome
    the journal holds, and runs none again) and a ``compacting`` that had nothing to do."""
    if move.source is State.DISPATCHING:
        return move.dest is State.COMPACTING
    return move.source is State.COMPACTING and move.outcome is Outcome.PROCEED


def unknown_result(call: ToolCall) -> ToolResult:
    """The result of a non-idempotent call a crash cut short, settled by the model. It is not
    marked an error: the call may well have succeeded, and counting it as a failed tool turn
    would make the resumed run's counters differ from those of the run that was not
    interrupted (the text tells the model what is known)."""
    content = UNKNOWN_RESULT.format(name=call.name, id=call.id)
    return ToolResult(call_id=call.id, name=call.name, content=content)


class RunLog:
    """Saves one run's checkpoints and journals its effects (see the module docstring).

    The store's calls run on the store's I/O thread(s) (:func:`store_threads_of`), not on the
    event loop's (except the writes a store makes at once when that waits for nothing, see
    ``write_now`` in :mod:`.sqlite`), in the order the run makes them: each waits for the
    run's previous write, and a write after a failed one fails the same way without being
    made. Waiting for a write therefore waits for every write before it.

    In ``sync`` mode every checkpoint and tool record is stored before the run makes its next
    model or tool call, before it rests, and, when someone follows the run (``heard``: a
    listener or a hook), before they hear of the move or the outcome. A run nobody follows does not
    wait for each write: it waits once before its next call, for all of them (the tool's
    intent, awaited anyway, covers the writes before it), and hands them to the store's thread
    then, together, so that they cost one wake-up of the thread and one commit. What a crash
    can leave stored is the
    same either way, since the writes are made in the same order; only the moves in between,
    which have no effect outside the run, go on meanwhile. In ``async`` mode the run awaits tool
    intents only (and every write when the run rests), and hands checkpoints and outcomes to
    the thread. A model call's intent and outcome are never awaited: a lost one means the call
    is made again, which the next awaited write bounds."""

    def __init__(
        self,
        store: Checkpointer,
        run_id: str,
        *,
        version: int,
        mode: Durability,
        unknown_outcome: UnknownOutcome,
        effects: dict[str, EffectRecord] | None = None,
        heard: bool = True,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.version = version
        self.mode = mode
        self.journal = mode is not Durability.EXIT
        self.unknown_outcome = unknown_outcome
        self.effects = effects or {}
        self.waits_each = mode is Durability.SYNC and heard
        """Each checkpoint and tool outcome is awaited as it is written (see the class)."""
        # In ``sync`` mode without a follower, what is not awaited is handed to the store's
        # thread together with the next awaited write: one wake-up of the thread and one commit
        # for the writes of a step, instead of a wake-up per write competing with the loop.
        self._defers = mode is Durability.SYNC and not heard
        self._deferred: list[Call] | tuple[()] = ()
        # How many of the last deferred writes are checkpoints of moves a resume re-derives
        # from the journal (see ``rederived``): a model call does not wait for them.
        self._rederived = 0
        # Writes handed to the lane, and how many of the first of them are known stored: a
        # counter, not a flag, since parallel tool calls write and wait in any interleaving.
        self._queued = 0
        self._stored = 0
        threads = store_threads_of(store)
        self._own_threads = threads is _OWN
        if threads is _OWN:
            threads = StoreThreads(1, f"fsm-agent-{run_id}")
        self._lane: Lane | None = threads.lane() if isinstance(threads, StoreThreads) else None
        # What the store offers beyond the protocol (see Checkpointer), asked once: flags, not
        # bound methods, so that a run in flight holds no more objects for the collector.
        self._split = callable(getattr(store, "prepare_save", None)) and callable(
            getattr(store, "write_prepared", None)
        )
        self._now = self._lane is not None and callable(getattr(store, "write_now", None))
        if self._now and self._lane is not None:
            self._lane.threads.writing += 1

    # -- the ordered lane of writes -------------------------------------------------------------
    def _submit(self, fn: Callable[..., object], *args: object) -> None:
        """Make ``fn(*args)`` after the run's previous write, without waiting for it (done
        at once for a store in memory; handed to the store's thread now, or with the next
        awaited write when the run defers)."""
        if self._lane is None:
            fn(*args)
            return
        if self._defers:
            if self._deferred:
                self._deferred.append((fn, args))
            else:
                self._deferred = [(fn, args)]
            self._rederived = 0
        else:
            self._lane.submit(fn, *args)
        self._queued += 1

    def _submit_checkpoint(
        self, save: Callable[..., object], args: tuple[object, ...], move: Move
    ) -> None:
        """Hand a checkpoint over as :meth:`_submit` does; one deferred right after another
        (nothing of the run's between them) joins it, to be written as one (the store's
        ``write_prepared`` takes consecutive checkpoints of a run)."""
        deferred = self._deferred
        again = rederived(move)
        if self._split and isinstance(deferred, list) and deferred:
            last, written = deferred[-1]
            if last == save and len(written) < MERGED_CHECKPOINTS:
                deferred[-1] = (save, written + args)
                if not again:
                    self._rederived = 0
                return
        tail = self._rederived
        self._submit(save, *args)
        if isinstance(self._deferred, list):  # deferred, not made at once
            self._rederived = tail + 1 if again else 0

    async def _write(self, fn: Callable[..., object], *args: object) -> None:
        """``fn(*args)`` after the run's previous write, awaited. A cancel stops the wait, not
        the write: a write is made whole or not at all."""
        if self._lane is None:
            fn(*args)
        else:
            await self._waited(self._lane, fn, *args)

    async def flush(self) -> None:
        """Wait until every write handed to the store's thread is stored; raise the first that
        failed."""
        if self._lane is not None:
            await self._waited(self._lane, _nothing)

    async def _waited(self, lane: Lane, fn: Callable[..., object], *args: object) -> None:
        """``fn(*args)`` on ``lane``, awaited: then every write handed over before it is stored.
        When the store can make it at once without waiting (``write_now``) and nothing of the
        run's is on the lane, the deferred writes and this one are made here instead, in order,
        in one transaction."""
        deferred, self._deferred = self._deferred, ()
        self._rederived = 0
        idle = (
            self._stored + len(deferred) == self._queued
            and lane.failed is None
            and lane.threads.writing <= AT_ONCE_RUNS
        )
        self._queued += 1
        mark = self._queued
        if idle and self._now and await self._written_now(lane, [*deferred, (fn, args)]):
            self._stored = mark
            return
        await lane.call(fn, *args, after=deferred)
        self._stored = max(self._stored, mark)

    async def _written_now(self, lane: Lane, calls: list[Call]) -> bool:
        """Whether the store made ``calls`` at once (see ``write_now``). A failure ends as it
        would on the lane: the calls before the one that failed are made, the lane fails
        with its error (so the run's later writes fail the same way), and it is raised."""
        store: Any = self.store
        try:
            return bool(store.write_now(calls))
        except JobFailed as failed:  # on the lane: the calls before it are made, then it fails
            await lane.call(_raising, failed.error, after=calls[: failed.index])
            raise  # not reached: the lane raised the error
        except Exception as exc:  # the commit failed: none of them was made
            lane.failed = exc
            raise

    async def before_call(self) -> None:
        """Before a model call: in ``sync`` mode, wait for the writes handed to the store's
        thread and not awaited yet (see the class), except the last deferred ones when they
        are checkpoints a resume re-derives from the journal (see ``rederived``): they are
        made with the next write."""
        if self._queued <= self._stored or self.mode is not Durability.SYNC:
            return
        kept = self._rederived
        if not kept or not isinstance(self._deferred, list):
            await self.flush()
            return
        deferred = self._deferred
        self._deferred, self._queued = deferred[:-kept] or (), self._queued - kept
        try:
            if self._queued > self._stored:
                await self.flush()
        finally:  # the kept ones go before any deferred meanwhile, as they were made first
            added = self._deferred
            self._deferred, self._queued = [*deferred[-kept:], *added], self._queued + kept
            self._rederived = 0 if added else kept

    def close(self) -> None:
        """Let the store drop what it keeps in memory for the run, after the run's writes."""
        forget = getattr(self.store, "forget", None)
        lane = self._lane
        if lane is not None and self._deferred:
            with contextlib.suppress(RuntimeError):  # the store was closed already
                lane.submit_all(self._deferred)
            self._deferred = ()
        if callable(forget):
            if lane is None or self._queued <= self._stored:  # nothing of the run is queued
                forget(self.run_id)
            else:
                with contextlib.suppress(RuntimeError):  # the store was closed already
                    lane.finally_call(forget, self.run_id)
        if self._own_threads and lane is not None:
            lane.threads.close(wait=False)  # after the queued writes, which nobody awaits
        if self._now and lane is not None:
            self._now = False
            lane.threads.writing -= 1

    # -- checkpoints ----------------------------------------------------------------------------
    async def claim(self, rs: RunState, loaded: Checkpoint | None = None) -> None:
        """Write the next checkpoint now, whatever the mode: the resume of a worker that loaded
        an older version (``loaded``) fails here, before anything runs."""
        continue_from = getattr(self.store, "continue_from", None)
        if loaded is not None and callable(continue_from):
            await self._write(continue_from, loaded)
        save, args = self._saving(rs, self.version + 1)
        await self._write(save, *args)
        self.version += 1

    async def read_journal(self) -> None:
        """Read the run's journal from the store (after :meth:`claim`, so that no other worker
        can add to it any more)."""
        effects: dict[str, EffectRecord] = {}
        await self._write(lambda: effects.update(self.store.effects(self.run_id)))
        self.effects = effects

    async def moved(self, rs: RunState) -> None:
        """Save the state after a move, as the durability mode says. A cancelled run is not
        saved: its latest checkpoint stays, and the run can be resumed from it."""
        state = rs.state
        resting = state in TERMINAL or state is State.SUSPENDED
        if resting and rs.stop_reason is StopReason.CANCELLED and state is State.ABORTED:
            await self.flush()
            return
        mode = self.mode
        if mode is Durability.SYNC:
            save, args = self._saving(rs, self.version + 1)
            if self.waits_each or resting:
                await self._write(save, *args)
            else:  # stored before the next call or rest (see the class)
                self._submit_checkpoint(save, args, rs.trace[-1])
            self.version += 1
        elif mode is Durability.ASYNC:
            self.version += 1
            if not self._split:
                self._submit(self._save, _snapshot(rs), self.version)
            else:
                save, args = self._saving(rs, self.version)
                self._submit(save, *args)
            if resting:
                await self.flush()
        elif resting:
            save, args = self._saving(rs, self.version + 1)
            await self._write(save, *args)
            self.version += 1

    async def interrupted(self) -> None:
        """The run stopped without resting (its task was cancelled, or an error went through
        the driver): store what was handed over or deferred, and nothing more, so that the run
        resumes from its latest checkpoint and the store does not change after the caller
        hears of the ending."""
        await self.flush()

    def _save(self, rs: RunState, version: int) -> None:
        self.store.save(rs, version=version)

    def _saving(
        self, rs: RunState, version: int
    ) -> tuple[Callable[..., object], tuple[object, ...]]:
        """The call that stores ``rs`` as ``version``, encoded now when the store can split
        encoding from writing (the encoded checkpoint no longer depends on ``rs``)."""
        if not self._split:  # a copy: the thread must not read the state the run changes
            return self._save, (_snapshot(rs), version)
        store: Any = self.store
        return store.write_prepared, (store.prepare_save(rs, version=version),)

    # -- the journal ----------------------------------------------------------------------------
    async def _intent(self, key: str, kind: Literal["model", "tool"]) -> None:
        """Store the intent before the effect starts (after every earlier write of the run)."""
        await self._write(self._record_intent, key, kind, self.version)

    def _record_intent(self, key: str, kind: Literal["model", "tool"], version: int) -> None:
        self.store.record_intent(self.run_id, key, kind, version=version)

    async def _result(self, key: str, result: str) -> None:
        """Store the outcome: awaited when each write is (see the class), else handed to the
        store's thread (the run's next awaited write waits for it)."""
        if self.waits_each:
            await self._write(self._record, key, result, self.version)
        else:  # stored before the next call or rest (see the class)
            self._submit(self._record, key, result, self.version)

    def _record(self, key: str, result: str, version: int) -> None:
        self.store.record_result(self.run_id, key, result, version=version)

    async def begin_model_call(
        self, rs: RunState
    ) -> tuple[str | None, ModelResponse | ModelError | None]:
        """Before the run's ``rs.model_calls``-th model call: the outcome (response or error)
        an earlier process recorded for it; else records the intent and returns the call's key,
        to report its end with :meth:`model_answered` or :meth:`model_failed`."""
        if not self.journal:
            return None, None
        key = f"{rs.counters.steps + 1}/model/{rs.model_calls}"
        record = self.effects.get(key)
        if record is not None and record.result is not None:
            return None, decode_model_outcome(record.result)
        if record is None:
            await self.before_call()
            # Not awaited: an intent without an outcome and no record both mean "call it",
            # so the model's intent only has to precede its outcome, which the lane keeps.
            self._submit(self._record_intent, key, "model", self.version)
        return key, None

    async def model_answered(
        self, key: str | None, response: ModelResponse, *, model: str | None = None
    ) -> ModelResponse:
        """Record the response of the call ``key`` (none: not journaled), and which model of a
        fallback chain gave it when ``model`` is given; returns the response as the run keeps
        it, with any text that cannot be stored replaced (see
        :mod:`~fsm_agent.persistence.storable`)."""
        try:
            encoded = encode_model_outcome(response, model=model)
        except PydanticSerializationError:
            response = storable_response(response)
            encoded = encode_model_outcome(response, model=model)
        if key is not None:
            self._model_outcome(key, encoded)
        return response

    async def model_failed(self, key: str, exc: Exception, *, model: str | None = None) -> None:
        """Record the error of the call ``key`` (and the chain's model that raised it)."""
        self._model_outcome(key, encode_model_outcome(exc, model=model))

    def _model_outcome(self, key: str, result: str) -> None:
        """Record a model call's outcome after its intent. When the intent is still deferred
        (nothing has been handed over since), the outcome takes its place: the two would be
        made in the same transaction, where the intent alone is never seen. It goes ahead of
        checkpoints deferred right before the call, which the next checkpoint then joins."""
        deferred = self._deferred
        intent = (self._record_intent, (key, "model", self.version))
        if not (isinstance(deferred, list) and deferred and deferred[-1] == intent):
            self._submit(self._record, key, result, self.version)
            return
        del deferred[-1]
        before = deferred[-1] if deferred else None
        store: Any = self.store
        if self._split and before is not None and before[0] == store.write_prepared:
            # Checkpoints deferred right before the call: the outcome goes before them, fenced
            # by the version the run held then (the same transaction either way), so that the
            # checkpoint after the call joins them, to be written as one.
            fence = self.version - len(before[1])
            deferred.insert(len(deferred) - 1, (self._record, (key, result, fence)))
        else:
            deferred.append((self._record, (key, result, self.version)))

    async def execute_tool(
        self,
        tool: Tool,
        call: ToolCall,
        context: ToolContext[object] | None,
        step: int,
        default_timeout_s: float | None,
    ) -> ToolExecution:
        """Run one call, made at ``step``, through the journal: reuse a recorded outcome,
        settle a call a crash cut short, or record the intent, run the tool and record its
        outcome. ``context`` may be ``None`` when the tool does not use one."""
        if not self.journal:
            return _storable(await tool.execute(call, context, default_timeout_s=default_timeout_s))
        key = f"{step}/tool/{call.id}"
        record = self.effects.get(key)
        if record is not None and record.result is not None:
            return decode_tool_outcome(record.result, call)
        if record is None:
            await self._intent(key, "tool")
        elif not tool.idempotent:
            execution = self._unknown(call)
            await self._result(key, encode_tool_outcome(execution))
            return execution
        execution = _storable(
            await tool.execute(call, context, default_timeout_s=default_timeout_s)
        )
        await self._result(key, encode_tool_outcome(execution))
        return execution

    def _unknown(self, call: ToolCall) -> ToolExecution:
        if self.unknown_outcome == "human":
            question = UNKNOWN_QUESTION.format(name=call.name, args=call.arguments_json, id=call.id)
            return ToolExecution(
                ToolResult(call_id=call.id, name=call.name, content=""), question=question
            )
        return ToolExecution(unknown_result(call))


_OWN = object()
"""What :func:`store_threads_of` answers for a store that names no threads of its own."""


def store_threads_of(store: Checkpointer) -> StoreThreads | object | None:
    """Where ``store``'s calls run: the threads its ``io_threads()`` gives, ``None`` (in the
    caller's thread) for a store that keeps no I/O (its ``io_threads()`` returns ``None``), or
    threads of the run's own for a store without the method."""
    method = getattr(store, "io_threads", None)
    if not callable(method):
        return _OWN
    threads = method()
    if threads is not None and not isinstance(threads, StoreThreads):
        return _OWN
    return threads


async def in_store_thread(store: Checkpointer, fn: Callable[[], T]) -> T:
    """``fn()`` (a call of ``store``) where the store's I/O runs (see
    :func:`store_threads_of`), awaited. A cancel stops the wait, not the call."""
    threads = store_threads_of(store)
    if threads is None:
        return fn()
    if isinstance(threads, StoreThreads):
        value: T = await threads.lane().call(fn)
        return value
    return await asyncio.shield(asyncio.to_thread(fn))


async def load_checkpoint(store: Checkpointer, run_id: str) -> Checkpoint:
    """``store.load(run_id)``, off the event loop's thread."""
    return await in_store_thread(store, lambda: store.load(run_id))


def _nothing() -> None:
    """A write that writes nothing: waiting for it waits for the lane's earlier writes."""


def _raising(error: BaseException) -> NoReturn:
    """A write that fails with ``error`` (one that failed where it was first made), so that
    the lane's later writes fail the same way."""
    raise error


def _storable(execution: ToolExecution) -> ToolExecution:
    result = storable_result(execution.result)
    return execution if result is execution.result else execution._replace(result=result)


def _snapshot(rs: RunState) -> RunState:
    """A copy that the run's further moves do not change (the lists and dicts are copied; the
    messages and results in them are immutable values)."""
    return rs.model_copy(
        update={
            "messages": list(rs.messages),
            "trace": list(rs.trace),
            "pending_tool_calls": list(rs.pending_tool_calls),
            "tool_outputs": dict(rs.tool_outputs),
            "answered_by": dict(rs.answered_by),
        }
    )
