"""The time limit of one tool call, kept by one small object per call."""

from __future__ import annotations

import asyncio
import contextvars
import threading

__all__ = ["CallLimit"]


_QUIET = threading.local()


def _quiet_context() -> contextvars.Context:
    """An empty context of this thread's own, for the timers' callbacks: they read no context
    variable, and a copy of the caller's context for each would be one more object for every
    garbage collection to walk per call in flight. One per thread, because a context is
    entered by one thread at a time (each thread's loop runs its callbacks one by one)."""
    try:
        context: contextvars.Context = _QUIET.context
    except AttributeError:
        context = _QUIET.context = contextvars.Context()
    return context


class CallLimit:
    """The time limit of one tool call: what ``asyncio.timeout`` does (the call's task is
    cancelled when the time is up, and that cancel leaves as :class:`TimeoutError`), in one
    object that is also the timer's callback. A call held in flight is walked by every garbage
    collection; ``asyncio.timeout`` holds two bound methods besides, and a ``with`` block one
    more, for each call."""

    __slots__ = ("cancelling", "expired", "handle", "task")

    def __init__(self, seconds: float | None) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a tool's time limit needs a task")
        self.task = task
        self.cancelling = task.cancelling()
        self.expired = False
        self.handle: asyncio.TimerHandle | None = None
        if seconds is not None:
            loop = asyncio.get_running_loop()
            self.handle = loop.call_at(loop.time() + seconds, self, context=_quiet_context())

    def __call__(self) -> None:
        """The time is up: cancel the call's task."""
        self.handle = None
        self.expired = True
        self.task.cancel()

    def end(self, error: BaseException | None) -> None:
        """The call ended (raising ``error``): stop the timer; when the time was up, withdraw
        the limit's cancel, and raise :class:`TimeoutError` if ``error`` is that cancel and no
        other is pending (the caller's own cancel goes on as it came)."""
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        if (
            self.expired
            and self.task.uncancel() <= self.cancelling
            and isinstance(error, asyncio.CancelledError)
        ):
            raise TimeoutError from error
