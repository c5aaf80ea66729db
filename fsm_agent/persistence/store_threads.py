"""The threads a store's calls run on, so that an event loop never waits for a database.

Each run writes through a :class:`Lane`, which always uses the same thread of the store: the
run's writes are made in the order it made them, and once one fails, the lane's later writes
fail the same way without being made. A caller that waits for a write gets an asyncio future;
cancelling the wait does not cancel the write (it is made whole or not at all).

A thread takes every job queued for it (up to :data:`BATCH`, more when one caller handed
more over together) at once. For a store that gives a
``batch`` (one transaction, committed on exit), it makes them in one commit: many runs' writes
cost one commit and one wake-up of the event loop instead of one each. When a job of a batch
fails, it gets its error (the one it would have had alone: it saw what the jobs before it
wrote), the batch is rolled back, and the other jobs are made again one at a time, so that each
gets its own outcome; a failed job is never made twice. When the commit fails, every job of the
batch gets that error. The futures of a batch are settled after its commit, with one
``call_soon_threadsafe`` per event loop.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import itertools
import threading
import weakref
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from queue import Empty, SimpleQueue
from typing import Any

__all__ = ["BATCH", "Batch", "Call", "JobFailed", "Lane", "StoreThreads"]

BATCH = 8
"""The most jobs a thread makes in one batch: bounds how long the first waits for the last,
and how many runs one batch wakes at once (larger batches measured longer event-loop delays)."""

Batch = Callable[[], AbstractContextManager[object]]
"""A store's transaction for a batch of jobs: entered before the first, committed on exit."""

Call = tuple[Callable[..., object], tuple[object, ...]]
"""A write: a function and its arguments."""

_Job = tuple[
    "Lane | None",
    Callable[..., object],
    tuple[object, ...],
    "asyncio.AbstractEventLoop | None",
    "asyncio.Future[Any] | None",
]


class Lane:
    """The ordered writes of one run (see the module docstring)."""

    __slots__ = ("failed", "thread", "threads")

    def __init__(self, threads: StoreThreads) -> None:
        self.threads = threads
        self.thread = threads.next_thread()
        # Set by the lane's thread, or by its run while none of its writes is queued.
        self.failed: BaseException | None = None

    def submit(self, fn: Callable[..., object], *args: object) -> None:
        """Make ``fn(*args)`` after the lane's earlier writes, without waiting for it."""
        self.threads.put(self.thread, [(self, fn, args, None, None)])

    def submit_all(self, calls: Sequence[Call]) -> None:
        """Make each of ``calls`` in order after the lane's earlier writes, without waiting:
        handed to the thread at once (one wake-up), each made as if submitted alone."""
        self.threads.put(self.thread, [(self, fn, args, None, None) for fn, args in calls])

    def call(
        self, fn: Callable[..., object], *args: object, after: Sequence[Call] = ()
    ) -> asyncio.Future[Any]:
        """Make ``fn(*args)`` after the lane's earlier writes (and after ``after``, handed
        over with it as :meth:`submit_all` would); the future gets its value or its error (or
        the error of an earlier write that failed)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        jobs: list[_Job] = [(self, f, a, None, None) for f, a in after]
        jobs.append((self, fn, args, loop, future))
        self.threads.put(self.thread, jobs)
        return future

    def finally_call(self, fn: Callable[..., object], *args: object) -> None:
        """Make ``fn(*args)`` after the lane's earlier writes, whether or not they failed."""
        self.threads.put(self.thread, [(None, fn, args, None, None)])


class StoreThreads:
    """``count`` threads, each taking jobs from its own queue (started when first used); the
    jobs a thread takes together are made inside ``batch()`` when given (see the module
    docstring)."""

    def __init__(self, count: int, name: str, batch: Batch | None = None) -> None:
        self.count = max(1, count)
        self.name = name
        self.batch = batch
        self._queues: list[SimpleQueue[list[_Job] | None]] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._turn = itertools.count()
        self._closed = False
        self._at_exit: Callable[[], None] | None = None
        # Runs writing through these threads now, as their logs count them (a hint for
        # ``write_now``, not a lock: a count off by one only changes where a write is made).
        self.writing = 0

    def next_thread(self) -> int:
        """The thread a new lane uses (in turn)."""
        return next(self._turn) % self.count

    def lane(self) -> Lane:
        """A new lane of writes."""
        return Lane(self)

    def put(self, thread: int, jobs: list[_Job]) -> None:
        """Queue ``jobs`` on ``thread``, in order."""
        queues = self._queues or self._start()
        queues[thread].put(jobs)

    def _start(self) -> list[SimpleQueue[list[_Job] | None]]:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name}: the store was closed")
            if self._queues:
                return self._queues
            queues: list[SimpleQueue[list[_Job] | None]] = [
                SimpleQueue() for _ in range(self.count)
            ]
            for index, queue in enumerate(queues):
                thread = threading.Thread(
                    target=_work, args=(queue, self.batch), name=f"{self.name}-{index}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            self._queues = queues
            self._at_exit = functools.partial(_close_at_exit, weakref.ref(self))
            atexit.register(self._at_exit)
            return queues

    def close(self, *, wait: bool = True) -> None:
        """Make the queued jobs, then stop the threads (``wait``: return once they stopped)."""
        with self._lock:
            self._closed = True
            queues, threads = self._queues, self._threads
            self._queues, self._threads = [], []
            at_exit, self._at_exit = self._at_exit, None
        if at_exit is not None:
            atexit.unregister(at_exit)
        for queue in queues:
            queue.put(None)
        if not wait:
            return
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()


def _close_at_exit(threads: weakref.ref[StoreThreads]) -> None:
    """Make the writes still queued when the program ends."""
    alive = threads()
    if alive is not None:
        alive.close()


def _work(queue: SimpleQueue[list[_Job] | None], batch: Batch | None) -> None:
    running = True
    while running and (taken := queue.get()) is not None:
        jobs = list(taken)  # the jobs handed over together are taken together
        while len(jobs) < BATCH:
            try:
                taken = queue.get_nowait()
            except Empty:
                break
            if taken is None:  # closed: make what was taken, then stop
                running = False
                break
            jobs += taken
        _hand_back(jobs, _make(jobs, batch))


class JobFailed(Exception):
    """The job at ``index`` of a batch raised ``error``: the batch is rolled back."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error


_Outcome = tuple[object, BaseException | None]


def _make(jobs: list[_Job], batch: Batch | None) -> list[_Outcome]:
    """Each job's value and error (see the module docstring)."""
    if batch is None or len(jobs) == 1:
        return [_one(job) for job in jobs]
    try:
        with batch():
            return [_one(job, index) for index, job in enumerate(jobs)]
    except JobFailed as failed:  # rolled back: the others are made again, one at a time
        lane = jobs[failed.index][0]
        if lane is not None:
            lane.failed = failed.error
        return [
            (None, failed.error) if index == failed.index else _one(job)
            for index, job in enumerate(jobs)
        ]
    except BaseException as exc:  # the commit failed: no job of the batch was made
        for lane, *_ in jobs:
            if lane is not None and lane.failed is None:
                lane.failed = exc
        return [(None, exc)] * len(jobs)


def _one(job: _Job, index: int | None = None) -> _Outcome:
    """Make one job; inside a batch (``index`` given), its error rolls the batch back."""
    lane, fn, args, _, _ = job
    if lane is not None and lane.failed is not None:
        return None, lane.failed
    try:
        return fn(*args), None
    except BaseException as exc:  # handed to the waiting run, or to the lane's next write
        if index is not None:
            raise JobFailed(index, exc) from exc
        if lane is not None:
            lane.failed = exc
        return None, exc


def _hand_back(jobs: list[_Job], outcomes: list[_Outcome]) -> None:
    """Settle the waited-for jobs' futures, with one call into each event loop."""
    waiting: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], object, Any]]] = {}
    for (_, _, _, loop, future), (value, error) in zip(jobs, outcomes, strict=True):
        if loop is not None and future is not None:
            waiting.setdefault(loop, []).append((future, value, error))
    for loop, settled in waiting.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[tuple[asyncio.Future[Any], object, BaseException | None]]) -> None:
    for future, value, error in settled:
        if future.cancelled():
            continue
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)
