"""The deadlines of running tool calls, kept by one timer per event loop.

``asyncio.timeout`` around a call arms a timer handle of its own and walks a context manager's
states on the way in and out: about a third of the instructions of a short async tool's call.
Nearly every call ends long before its deadline, so here a call only notes its deadline on a
heap (:meth:`Deadlines.start`) and marks it done when it ends (:meth:`Deadline.end`). One timer,
armed for the earliest deadline noted, cancels each call whose deadline has passed when it
fires and re-arms for the next one; it is re-armed earlier only when a call starts with an
earlier deadline than the one it waits for, and it may stay armed after the calls have ended
(it then finds nothing to do).

A call cut off this way sees :class:`asyncio.CancelledError`; :meth:`Deadline.withdraw` tells
its own cancel apart from anyone else's (the caller's, the run's interrupt), as
``asyncio.timeout`` does: only its own becomes a timeout, any other goes on.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import threading

__all__ = ["Deadline", "Deadlines", "running_deadlines"]


class Deadline:
    """One call's deadline: the task to cancel once the loop's clock reaches ``when``."""

    __slots__ = ("cancelling", "expired", "task", "when", "withdrawn")

    def __init__(self, when: float, task: asyncio.Task[object]) -> None:
        self.when = when
        self.task: asyncio.Task[object] | None = task  # None once the call ended
        self.cancelling = task.cancelling()  # the cancels already asked of the task
        self.expired = False  # the timer cancelled the task for this deadline
        self.withdrawn = False  # that cancel was taken back

    def withdraw(self) -> bool:
        """After the call raised ``CancelledError``: whether it was cut off by this deadline
        alone (its cancel is withdrawn; the call timed out). False when the deadline did not
        pass, or someone else asked the task to cancel too: that cancel goes on."""
        if not self.expired or self.task is None:
            return False
        self.withdrawn = True
        return self.task.uncancel() <= self.cancelling

    def end(self) -> None:
        """The call ended: the timer leaves it alone. A cancel of this deadline that the call
        swallowed is withdrawn, so that the task's count of cancel requests stays true."""
        if self.expired and not self.withdrawn and self.task is not None:
            self.withdrawn = True
            self.task.uncancel()
        # The entry may wait on the heap until its deadline: it does not keep the task alive.
        self.task = None


class Deadlines:
    """The deadlines of the calls running on one event loop, and the one timer that keeps
    them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # (when, order, deadline): the order breaks ties, so deadlines are never compared.
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = math.inf  # when the timer fires

    def start(self, timeout_s: float) -> Deadline:
        """Note the deadline of a call that starts now in the current task and may run for
        ``timeout_s`` seconds."""
        task = asyncio.current_task()
        assert task is not None, "a tool call runs in a task"
        deadline = Deadline(self.loop.time() + timeout_s, task)
        heap = self._heap
        while heap and heap[0][2].task is None:  # the calls that ended, at the front
            heapq.heappop(heap)
        heapq.heappush(heap, (deadline.when, next(self._order), deadline))
        if deadline.when < self._armed_for:
            self._arm(deadline.when)
        return deadline

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(when, self._fire)
        self._armed_for = when

    def _fire(self) -> None:
        """Cancel every running call whose deadline has passed; re-arm for the next."""
        self._timer, self._armed_for = None, math.inf
        now = self.loop.time()
        heap = self._heap
        while heap and (heap[0][2].task is None or heap[0][0] <= now):
            deadline = heapq.heappop(heap)[2]
            if deadline.task is not None:  # still running
                deadline.expired = True
                deadline.task.cancel()
        if heap:
            self._arm(heap[0][0])


_THREAD = threading.local()  # each thread runs its own event loop


def running_deadlines() -> Deadlines:
    """The deadlines of the running event loop (made when a loop first asks)."""
    loop = asyncio.get_running_loop()
    found: Deadlines | None = getattr(_THREAD, "deadlines", None)
    if found is None or found.loop is not loop:
        found = _THREAD.deadlines = Deadlines(loop)
    return found
