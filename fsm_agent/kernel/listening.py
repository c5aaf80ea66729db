"""A listened run (``run_stream``, ``resume_stream``): the driver's coroutine stepped by hand, so
that each event it emits is yielded to the listener before the run goes on."""

from __future__ import annotations

from asyncio import current_task
from collections.abc import AsyncGenerator, Coroutine, Generator

from ..run.events import Event
from .context import Emitted, RunContext

__all__ = ["listened"]


class _Suspension:
    """Awaiting it suspends the awaiting coroutine with ``signal`` (what a handler's coroutine
    suspended with: an asyncio future, or ``None`` for a bare yield), so the task sees it as
    if the handler had suspended there itself."""

    __slots__ = ("signal",)

    def __init__(self, signal: object) -> None:
        self.signal = signal

    def __await__(self) -> Generator[object, None, None]:
        yield self.signal


class _ListenerLeft(BaseException):
    """Thrown into a handler whose listener closed the stream. GeneratorExit would close every
    coroutine it passes, forbidding the awaits of their cleanup (closing an HTTP stream
    awaits); this one unwinds them like any exception."""


async def listened(
    ctx: RunContext, drive: Coroutine[object, object, None]
) -> AsyncGenerator[Event, None]:
    """Step the driver's coroutine for a listened run: yield each event it (or a handler it
    awaits) emits (see :class:`~fsm_agent.kernel.context.Emitted`) and hand every other suspension
    to the task. What is thrown in here (a cancel) is thrown into the run; when the listener
    closes the stream, the run unwinds where it stands and emits nothing more."""
    thrown: BaseException | None = None
    closing = False
    try:
        while True:
            signal = drive.send(None) if thrown is None else drive.throw(thrown)
            thrown = None
            if type(signal) is not Emitted:
                try:
                    await _Suspension(signal)
                except BaseException as exc:
                    thrown = exc
            elif not closing:
                try:
                    yield signal.event
                except GeneratorExit:
                    closing, thrown = True, _ListenerLeft()
                except BaseException as exc:
                    thrown = exc
                ctx.task = current_task()  # the listener may read on from another task
    except (StopIteration, _ListenerLeft):
        return
