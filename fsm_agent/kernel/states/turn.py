"""A tool turn of the ``dispatching`` state: its calls and what has become of each.

The executors of :mod:`.dispatching` (concurrent or in order) hand every finished call to
:meth:`Turn.record`, the one place a call's execution enters the turn; a call settled without
running (a human's decision, a hook's mock or skip) goes through :meth:`Turn.settle`. Whatever
ends the turn, each call gets exactly one result, in the model's call order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ...run.events import Event, StepCompleteEvent, StepStartEvent, ToolCallEvent, ToolResultEvent
from ...run.state import HumanRequest
from ...tools import ToolExecution
from ...values.messages import ToolCall, ToolResult
from ..context import Reports, RunContext

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = ["Turn", "tool_error"]


def tool_error(call: ToolCall, content: str) -> ToolResult:
    """The error result ``content`` of ``call``."""
    return ToolResult(call_id=call.id, name=call.name, content=content, is_error=True)


# -- the turn --------------------------------------------------------------------------------
class Turn:
    """One tool turn: its calls and what has become of each. The executors record every
    finished call through :meth:`record`, the one place a call's execution enters the turn.

    Its collections of ids are tuples: a turn lives as long as its tools run, and an empty
    tuple is shared and one of strings is not tracked by the garbage collector, where every
    set would be one more object for each collection to walk per run in flight."""

    __slots__ = (
        "announced",
        "approved",
        "calls",
        "ctx",
        "done",
        "failure",
        "paused",
        "reports",
        "requests",
        "running",
        "settled",
        "tasks",
    )

    def __init__(self, ctx: RunContext) -> None:
        rs = ctx.rs
        self.ctx = ctx
        self.calls: list[ToolCall] = rs.pending_tool_calls  # a copy is made if hooks change one
        self.settled: dict[str, ToolResult] = (
            {r.call_id: r for r in rs.tool_results} if rs.tool_results else {}
        )
        self.approved: tuple[str, ...] = rs.approved_calls
        self.requests: tuple[HumanRequest, ...] = ()  # what the turn waits on a human for
        self.done: ToolExecution | None = None  # the first call that completed the task
        self.failure: ToolExecution | None = None  # the first call that failed
        self.paused = False  # a pause was requested from outside
        self.announced: tuple[str, ...] = ()  # calls whose start events went out
        self.running: tuple[str, ...] = ()  # calls whose execution started and has not ended
        # The concurrent calls' tasks, until their executions are recorded.
        self.tasks: Sequence[tuple[ToolCall, asyncio.Task[ToolExecution]]] = ()
        self.reports = Reports() if ctx.listening else None  # the running tools' progress

    def record(self, call: ToolCall, execution: ToolExecution) -> bool:
        """Record a finished call: its result settled (noted when it completed the task or
        failed), or the question it asks a human. Whether the calls after it in order are left
        unrun (it asked, completed the task, or failed under ``fail_fast``)."""
        if call.id in self.running:
            self.running = tuple([c for c in self.running if c != call.id])
        if execution.question is not None:
            question = HumanRequest(kind="question", call=call, question=execution.question)
            self.requests = (*self.requests, question)
            return True
        self.settled[call.id] = execution.result
        if execution.done and self.done is None:
            self.done = execution
        if execution.error is not None and self.failure is None:
            self.failure = execution
        return self.done is not None or (
            self.failure is not None and self.ctx.plan.settings.fail_fast
        )

    async def emit_result(self, execution: ToolExecution) -> None:
        """Emit the result events of a recorded call (none for a question)."""
        if execution.question is None:
            await self.ctx.emit_all(
                _result_events(self.ctx, execution.result, execution.duration_s)
            )

    async def announce(self, call: ToolCall) -> None:
        """Emit the call's start events (only a listened run calls this)."""
        await self.ctx.emit_all(_start_events(self.ctx, call))
        self.announced = (*self.announced, call.id)

    async def settle(self, call: ToolCall, result: ToolResult, *, started: bool = False) -> None:
        """Settle a call without running it (a human's decision, a hook's mock or skip, a
        denied approval), with its events."""
        self.settled[call.id] = result
        if self.ctx.listening:
            await self.ctx.emit_all(_settled_events(self.ctx, call, result, started=started))

    def to_run(self) -> list[ToolCall]:
        """The calls left to execute: none while a human must approve first."""
        if self.requests:
            return []
        return [c for c in self.calls if c.id not in self.settled] if self.settled else self.calls

    def store(self) -> None:
        """Put the calls and their results, in call order, in the run state."""
        rs, calls, settled = self.ctx.rs, self.calls, self.settled
        rs.pending_tool_calls = calls
        if len(calls) == 1:  # the common turn: its result, if it has one
            rs.tool_results = tuple(settled.values())
        else:
            rs.tool_results = tuple([settled[c.id] for c in calls if c.id in settled])

    def stop(self) -> None:
        """End a turn that has no outcome (an error goes on): each call still gets its one
        result, recorded in the run state, and no event is sent."""
        for call, task in self.tasks:  # concurrent calls that finished keep their results
            if (
                task.done()
                and not task.cancelled()
                and task.exception() is None
                and task.result().question is None
            ):
                self.record(call, task.result())
        self.unfinished()
        self.store()
        self.ctx.close_pending_calls("the run stopped")

    async def settle_interrupted(self) -> None:
        """Settle the unfinished calls of an interrupted turn (see :meth:`unfinished`), with
        their result events."""
        for result in self.unfinished():
            if self.ctx.listening:
                await self.ctx.emit_all(_result_events(self.ctx, result, 0.0))

    def unfinished(self) -> list[ToolResult]:
        """Give a result to each call of an interrupted turn that started, or whose start
        events went out, and has none; return them. A call cut off while it ran may have taken
        effect: its result says so. The calls never started are left to
        ``close_pending_calls``."""
        ctx = self.ctx
        why = ctx.interrupt.value if ctx.interrupt is not None else "the run stopped"
        new: list[ToolResult] = []
        for call in self.calls:
            if call.id in self.settled:
                continue
            if call.id in self.running:
                content = (
                    f"Error: interrupted ({why}) while this call was running; it may or may "
                    "not have taken effect"
                )
            elif call.id in self.announced:
                content = f"Error: not run: the run was interrupted ({why})"
            else:
                continue
            self.settled[call.id] = result = tool_error(call, content)
            new.append(result)
        return new


# -- events ------------------------------------------------------------------------------------
def _start_events(ctx: RunContext, call: ToolCall) -> tuple[Event, Event]:
    run_id = ctx.rs.run_id
    args: dict[str, JsonValue] = (
        call.arguments if call.arguments is not None else {"_raw": call.arguments_json}
    )
    return (
        StepStartEvent(
            run_id=run_id,
            step=ctx.rs.counters.steps,
            call_id=call.id,
            tool_name=call.name,
            phase=ctx.rs.phase,
        ),
        ToolCallEvent(run_id=run_id, call_id=call.id, tool_name=call.name, args=args),
    )


def _result_events(ctx: RunContext, result: ToolResult, duration_s: float) -> tuple[Event, Event]:
    run_id = ctx.rs.run_id
    return (
        ToolResultEvent(
            run_id=run_id,
            call_id=result.call_id,
            tool_name=result.name,
            content=result.content,
            is_error=result.is_error,
        ),
        StepCompleteEvent(
            run_id=run_id,
            call_id=result.call_id,
            status="error" if result.is_error else "ok",
            duration_s=duration_s,
        ),
    )


def _settled_events(
    ctx: RunContext, call: ToolCall, result: ToolResult, *, started: bool = False
) -> Iterable[Event]:
    """Events of a call settled without running (the start events unless already sent),
    after any hook errors."""
    yield from ctx.take_events()
    if not started:
        yield from _start_events(ctx, call)
    yield from _result_events(ctx, result, 0.0)
