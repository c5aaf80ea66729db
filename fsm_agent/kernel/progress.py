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
from .context import RunContext

__all__ = ["Reports", "emit_reported", "reporter", "wait_reporting"]

Reports = asyncio.Queue[ToolProgressEvent]


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
    ctx: RunContext, queue: Reports, tasks: Collection[asyncio.Future[Any]]
) -> None:
    """Wait until every one of ``tasks`` is done, emitting meanwhile the progress events that
    arrive in ``queue`` (and those left in it at the end)."""
    pending: set[asyncio.Future[Any]] = set(tasks)
    while pending:
        getter = asyncio.ensure_future(queue.get())
        ready: list[ToolProgressEvent] = []
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
        for event in ready:
            await ctx.emit(event)


async def emit_reported(ctx: RunContext, queue: Reports) -> None:
    """Emit the progress events ``queue`` holds, in the order they were reported."""
    while not queue.empty():
        await ctx.emit(queue.get_nowait())
