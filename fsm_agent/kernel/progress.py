"""Progress of running tool calls, as ``tool_progress`` events of a listened run.

A tool reports progress from wherever it runs (its own task, the SDK's reader of an MCP
server, a thread): the report goes into a queue, and the dispatching handler, which waits for
the calls to end in the driver's coroutine, emits what the queue holds as it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection
from typing import Any

from ..run.events import ToolProgressEvent
from ..values.messages import ToolCall
from .context import Handed, Interrupted, Reports, RunContext

__all__ = ["emit_reported", "reporter", "wait_reporting"]


async def _hand(ctx: RunContext, item: ToolProgressEvent | Handed) -> None:
    if isinstance(item, Handed):
        await ctx.emit(item.event)
        if not item.taken.done():
            item.taken.set_result(None)
    else:
        await ctx.emit(item)


def reporter(
    ctx: RunContext, queue: Reports, call: ToolCall
) -> Callable[[float, float | None, str | None], None]:
    """What a call's :meth:`~fsm_agent.ToolContext.report_progress` calls: it queues an event
    (from a thread too, through the loop)."""
    loop = asyncio.get_running_loop()
    run_id = ctx.rs.run_id

    def report(progress: float, total: float | None, message: str | None) -> None:
        event = ToolProgressEvent(
            run_id=run_id,
            call_id=call.id,
            tool_name=call.name,
            progress=progress,
            total=total,
            message=message,
        )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # a threaded tool
            running = None
        if running is loop:
            queue.put_nowait(event)
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
                loop.call_soon_threadsafe(queue.put_nowait, event)

    return report


async def wait_reporting(
    ctx: RunContext,
    queue: Reports,
    tasks: Collection[asyncio.Future[Any]],
    *,
    interruptible: bool = False,
) -> None:
    """Wait until every one of ``tasks`` is done, emitting meanwhile the progress events that
    arrive in ``queue`` (and those left in it at the end). ``interruptible``: once the
    run is interrupted, cancel the tasks, wait for them and raise :class:`Interrupted` (its
    listener may cancel it on an event while ``tasks`` run in the same task, which no task
    cancel then reaches)."""
    pending: set[asyncio.Future[Any]] = set(tasks)
    while pending:
        getter = asyncio.ensure_future(queue.get())
        ready: list[ToolProgressEvent | Handed] = []
        try:
            await asyncio.wait({*pending, getter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if getter.done() and not getter.cancelled():
                ready.append(getter.result())
            else:
                getter.cancel()
        pending = {task for task in pending if not task.done()}
        while not queue.empty():
            ready.append(queue.get_nowait())
        for item in ready:
            await _hand(ctx, item)
        if interruptible and ctx.interrupt is not None:
            # Cancel and await the tasks here, not in a task group's exit (on Python 3.11 a
            # branch failing while the exit waits leaves this task cancelled for good).
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
            raise Interrupted


async def emit_reported(ctx: RunContext, queue: Reports) -> None:
    """Emit the progress events ``queue`` holds, in the order they were reported."""
    while not queue.empty():
        await _hand(ctx, queue.get_nowait())
