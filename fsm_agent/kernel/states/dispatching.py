"""The ``dispatching`` state: run the tool calls of the last response.

Every call ends with exactly one result in the history, in the model's call order, whatever
order the calls finish in. A turn has three phases:

1. *prepare* each call not yet settled, when hooks or ``needs_approval`` tools exist: the
   unknown-tool check, the ``before_tool`` hooks (change the arguments, mock or skip), then the
   permission check. Denied calls get their reason as an ``is_error`` result; if a human must
   approve a call, the turn suspends before any tool runs;
2. *execute* the remaining calls, concurrently when ``policy.parallel_tool_calls``, else in
   order, each followed by the ``after_tool`` hooks and the output limit. A tool that asks a
   human (``ctx.ask_human``), or a pause requested from outside, suspends the turn;
3. *record* the results in call order and report the outcome.

A suspended turn keeps its finished results and approvals in the run state, so a resume runs
each remaining call once and no call twice. With a checkpointer, each execution goes through the
write-ahead journal (:mod:`fsm_agent.persistence.run_log`), so a resume after a crash reuses the
results
already recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from ...approval import Decision, suspend
from ...errors import ToolExecutionError
from ...events import (
    Event,
    LoopDetectedEvent,
    StepCompleteEvent,
    StepStartEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from ...machine.table import Outcome, repeats_spent
from ...messages import ToolCall, ToolResult
from ...run_state import HumanRequest
from ...tools import Tool, ToolContext, ToolExecution
from ...tools.output import PAGER_NAME, cut_result
from ..context import Interrupted, RunContext
from ..hooks import MockResult, SkipTool
from ..phasing import gate_call, move_by_code
from ..progress import Reports, emit_reported, reporter, wait_reporting

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = ["handle_dispatching"]

LOOP_WARNING = (
    "\n\n[loop guard: you have made the same tool calls {n} times in a row. Do not repeat "
    "them; change your approach, or answer with what you have.]"
)


# Enum members read on every step, bound once: on Python 3.11 each read of one
# (``State.DONE``) goes through ``EnumType.__getattr__``, about ten global reads.
_TOOLS_DONE, _TOOLS_FAILED = Outcome.TOOLS_DONE, Outcome.TOOLS_FAILED


def _error(call: ToolCall, content: str) -> ToolResult:
    return ToolResult(call_id=call.id, name=call.name, content=content, is_error=True)


def _find(ctx: RunContext, name: str) -> Tool | None:
    found = ctx.plan.tools.find(name)
    if found is None and name == PAGER_NAME and ctx.rs.tool_outputs:
        return ctx.plan.pager
    return found


# -- phase 1: prepare --------------------------------------------------------------------------
async def _prepare(
    ctx: RunContext, call: ToolCall
) -> tuple[ToolCall, ToolResult | HumanRequest | None]:
    """The call after the ``before_tool`` hooks, and its settled result, or the human request
    it waits on, or ``None`` when it is approved to run."""
    hooks = ctx.plan.hooks
    found = _find(ctx, call.name)
    if found is None:  # nothing to change or approve: running it answers "Unknown tool"
        return call, None
    phases = ctx.plan.phases
    if phases is not None and call.name not in phases.allowed[phases.settle(ctx.rs)]:
        return call, None  # refused before it runs, so neither hooks nor humans see it
    if hooks.before_tool:
        changed = await hooks.run_before_tool(ctx, call)
        if isinstance(changed, MockResult):
            result = ToolResult(
                call_id=call.id, name=call.name, content=changed.content, is_error=changed.is_error
            )
            return call, result
        if isinstance(changed, SkipTool):
            return call, _error(call, f"Error: not run: {changed.reason}")
        call = changed
        if ctx.interrupt is not None:
            return call, None
    verdict = await hooks.run_approve_tool(ctx, call) if hooks.approve_tool else None
    if verdict is None:
        if found.needs_approval:
            return call, HumanRequest(kind="approval", call=call)
        return call, None
    if verdict.decision is Decision.DENY:
        return call, _error(call, f"Error: not approved: {verdict.reason}")
    if verdict.decision is Decision.ASK:
        return call, HumanRequest(kind="approval", call=call, question=verdict.reason)
    return call, None


# -- phase 2: execute --------------------------------------------------------------------------
async def _run(ctx: RunContext, call: ToolCall, reports: Reports | None = None) -> ToolExecution:
    """Execute one call, then its ``after_tool`` hooks and the output limit; its progress
    reports go to ``reports``."""
    plan = ctx.plan
    rs = ctx.rs
    if ctx.interrupt is not None:  # a sibling's tool interrupted the run before this one began
        return ToolExecution(
            _error(call, f"Error: not run: the run was interrupted ({ctx.interrupt.value})")
        )
    phases = plan.phases
    if phases is not None:  # the move tool, or a tool outside the phase, never runs
        answer = gate_call(ctx, phases, call)
        if answer is not None:
            return ToolExecution(answer)
    found = _find(ctx, call.name)
    if found is None:  # a tool error like any other (tool_failure_mode="fail" aborts on it)
        message = f"Error: Unknown tool '{call.name}'"
        return ToolExecution(_error(call, message), error=LookupError(message[7:]))
    limit = plan.settings.max_tool_calls
    if limit is not None and rs.tool_executions >= limit:
        message = f"Error: the run's tool call limit ({limit}) is reached; this call was not run"
        return ToolExecution(_error(call, message))
    rs.tool_executions += 1
    context = ToolContext(
        run_id=rs.run_id,
        call_id=call.id,
        step=rs.counters.steps,
        deps=ctx.deps,
        cancel_requested=ctx.cancel_requested,
        tool_outputs=rs.tool_outputs,
    )
    if reports is not None and found.reports_progress:
        context = dataclasses.replace(context, progress=reporter(ctx, reports, call))
    durable = ctx.durable
    if durable is None:
        execution = await found.execute(
            call, context, default_timeout_s=plan.settings.tool_timeout_s
        )
    else:  # through the write-ahead journal: a recorded outcome is reused, not run again
        execution = await durable.execute_tool(found, call, context, plan.settings.tool_timeout_s)
    if execution.question is not None:
        return execution
    result = execution.result
    if execution.phase is not None:  # the tool returned MovePhase: a move by code
        result = _moved_by(ctx, result, execution.phase)
    if plan.hooks.after_tool:
        result, move = await plan.hooks.run_after_tool(ctx, call, result)
        if move is not None:  # an after_tool hook returned MovePhase
            result = _moved_by(ctx, result, move)
    result = _limited(ctx, result)
    if result is execution.result:
        return execution
    return ToolExecution(
        result, execution.done, execution.final_message, execution.error, execution.duration_s
    )


def _moved_by(ctx: RunContext, result: ToolResult, target: str) -> ToolResult:
    phases = ctx.plan.phases
    if phases is None:
        content = (
            f"{result.content}\n\nError: this agent has no phases; MovePhase({target!r}) "
            "did nothing"
        )
        return result.model_copy(update={"content": content.lstrip(), "is_error": True})
    return move_by_code(ctx, phases, result, target)


def _limited(ctx: RunContext, result: ToolResult) -> ToolResult:
    max_chars = ctx.plan.settings.max_output_chars
    if max_chars is None or len(result.content) <= max_chars:
        return result
    return cut_result(ctx.rs.tool_outputs, result, max_chars)


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


# -- the handler -------------------------------------------------------------------------------
async def handle_dispatching(ctx: RunContext) -> Outcome:
    """Run the pending tool calls; every call ends with exactly one result in the history."""
    rs = ctx.rs
    plan = ctx.plan
    hooks = plan.hooks
    listening = ctx.listening
    calls = rs.pending_tool_calls  # copied before the hooks may change a call
    settled: dict[str, ToolResult] = (
        {r.call_id: r for r in rs.tool_results} if rs.tool_results else {}
    )
    approved = set(rs.approved_calls)
    requests: list[HumanRequest] = []
    done: ToolExecution | None = None
    failure: ToolExecution | None = None
    interrupted = paused = False
    fail_fast = plan.settings.fail_fast
    announced: set[str] = set()  # calls whose start events went out
    running: list[ToolCall] = []  # calls whose execution started and has not ended
    reports = Reports() if listening else None  # the progress the running tools report

    # 0. A resumed turn: apply the human's decisions.
    for request in rs.human_requests:
        call = request.call
        if request.decision == "allow":
            approved.add(call.id)
            continue
        if request.decision == "answer":
            result = _limited(
                ctx, ToolResult(call_id=call.id, name=call.name, content=request.reply or "")
            )
        else:
            result = _error(call, f"Error: not approved: {request.reply}")
        settled[call.id] = result
        if listening:
            await ctx.emit_all(
                _settled_events(ctx, call, result, started=request.kind == "question")
            )
    if rs.human_requests:
        rs.human_requests = []

    try:
        # 1. Prepare: before_tool hooks and the permission check.
        if hooks.before_tool or hooks.approve_tool or plan.approval_needed:
            calls = list(calls)
            for index, call in enumerate(calls):
                if call.id in settled or call.id in approved:
                    continue
                if ctx.interrupt is not None:
                    raise Interrupted
                call, verdict = await ctx.effect(_prepare(ctx, call))
                calls[index] = call
                if isinstance(verdict, ToolResult):
                    settled[call.id] = verdict
                    if listening:
                        await ctx.emit_all(_settled_events(ctx, call, verdict))
                elif isinstance(verdict, HumanRequest):
                    requests.append(verdict)
                else:
                    approved.add(call.id)
            await ctx.emit_all(ctx.take_events())
            if ctx.interrupt is not None:
                raise Interrupted

        # 2. Execute what is left, unless a human must approve first.
        if requests:
            to_run = []
        else:
            to_run = [c for c in calls if c.id not in settled] if settled else calls
        if to_run and ctx.handle.pause_requested:
            paused = True
        elif to_run and plan.settings.parallel_tool_calls and len(to_run) > 1:
            if listening:
                for call in to_run:
                    await ctx.emit_all(_start_events(ctx, call))
                    announced.add(call.id)
                if ctx.interrupt is not None:  # the listener may cancel on an event
                    raise Interrupted
            tasks: list[asyncio.Task[ToolExecution]] = []
            running = list(to_run)
            ctx.turn_phase = rs.phase
            try:
                await ctx.effect(_run_all(ctx, to_run, tasks, reports))
            except Interrupted:
                interrupted = True
            except BaseException:  # keep the results of the calls that finished
                for call, task in zip(to_run, tasks, strict=True):
                    if task.done() and not task.cancelled() and task.exception() is None:
                        execution = task.result()
                        if execution.question is None:
                            settled[call.id] = execution.result
                            running.remove(call)
                raise
            finally:
                ctx.turn_phase = None
            for call, task in zip(to_run, tasks, strict=True):
                if not task.done() or task.cancelled():
                    continue
                running.remove(call)
                execution = task.result()
                if execution.question is not None:
                    requests.append(
                        HumanRequest(kind="question", call=call, question=execution.question)
                    )
                    continue
                settled[call.id] = execution.result
                if listening:
                    await ctx.emit_all(_result_events(ctx, execution.result, execution.duration_s))
                if execution.done and done is None:
                    done = execution
                if execution.error is not None and failure is None:
                    failure = execution
            await ctx.emit_all(ctx.take_events())
            if interrupted:
                raise Interrupted
        else:
            for call in to_run:
                if ctx.interrupt is not None or (
                    ctx.deadline is not None and ctx.deadline_passed()
                ):
                    raise Interrupted
                if ctx.handle.pause_requested:
                    paused = True
                    break
                if listening:
                    await ctx.emit_all(_start_events(ctx, call))
                    announced.add(call.id)
                    if ctx.interrupt is not None:  # the listener may cancel on an event
                        raise Interrupted
                running = [call]
                if reports is not None and _reports_progress(ctx, call):
                    execution = await ctx.effect(_run_reporting(ctx, call, reports))
                else:
                    execution = await ctx.effect(_run(ctx, call))
                running = []
                if listening:
                    await ctx.emit_all(ctx.take_events())
                if execution.question is not None:
                    requests.append(
                        HumanRequest(kind="question", call=call, question=execution.question)
                    )
                    break
                settled[call.id] = execution.result
                if listening:
                    await ctx.emit_all(_result_events(ctx, execution.result, execution.duration_s))
                if execution.done:
                    done = execution
                    break
                if execution.error is not None and failure is None:
                    failure = execution
                    if fail_fast:
                        break
            if ctx.interrupt is not None:
                raise Interrupted
    except Interrupted:
        interrupted = True
    except BaseException:
        # The turn ends with no outcome (a store failed, the caller's task was cancelled): each
        # call still gets its one result before the error goes on, and no event is sent.
        _settle_unfinished(ctx, calls, settled, running, announced)
        rs.pending_tool_calls = calls
        rs.tool_results = [settled[c.id] for c in calls if c.id in settled]
        ctx.close_pending_calls("the run stopped")
        raise
    if interrupted:
        for result in _settle_unfinished(ctx, calls, settled, running, announced):
            if listening:
                await ctx.emit_all(_result_events(ctx, result, 0.0))

    # 3. Record the results in call order and report the outcome.
    rs.pending_tool_calls = calls
    if len(calls) == 1:  # the common turn: its result, if it has one
        rs.tool_results = list(settled.values())
    else:
        rs.tool_results = [settled[c.id] for c in calls if c.id in settled]
    if interrupted:
        ctx.close_pending_calls("the run was interrupted")
        return ctx.interrupted
    if done is not None:
        ctx.close_pending_calls("the task was completed by an earlier call")
        rs.done_message = done.final_message or rs.last_text
        return Outcome.DONE_TOOL
    if failure is not None and fail_fast:
        ctx.close_pending_calls("an earlier call failed")
        result = failure.result
        ctx.error = ToolExecutionError(
            f"tool '{result.name}' failed: {result.content}",
            tool_name=result.name,
            call_id=result.call_id,
        )
        ctx.error.__cause__ = failure.error
        return Outcome.TOOL_ABORT
    if requests or paused:
        rs.approved_calls = sorted(approved)
        rs.human_requests = requests
        suspend(rs)
        return Outcome.NEEDS_HUMAN
    outcome = _TOOLS_DONE
    if all(r.is_error for r in rs.tool_results):
        outcome = _TOOLS_FAILED
        # The reason, should the table end the run on this turn (its error limits).
        ctx.error = _failed_turn_error(ctx, failure)
    elif plan.limits.max_repeated_tool_calls is not None and _repeats(ctx, calls):
        outcome = Outcome.TOOLS_REPEATED
        detected = _loop_guard(ctx)
        if listening and detected is not None:
            await ctx.emit(detected)
    ctx.close_pending_calls("")  # every call has its result: this records them
    return outcome


def _failed_turn_error(ctx: RunContext, failure: ToolExecution | None) -> ToolExecutionError:
    """What ends a run on a tool turn whose every call failed: the failed turns in a row
    against ``max_consecutive_errors`` (and the run's errors against ``max_total_errors``), with
    the turn's first failure (a tool's exception as the cause)."""
    rs = ctx.rs
    limits = ctx.plan.limits
    result = failure.result if failure is not None else rs.tool_results[0]
    turns = rs.counters.consecutive_error_turns + 1
    reason = (
        f"{turns} failed tool turn{'s' if turns > 1 else ''} in a row "
        f"(Policy.max_consecutive_errors={limits.max_consecutive_errors})"
    )
    if limits.max_total_errors is not None:
        errors = rs.counters.total_errors + 1
        reason += (
            f", {errors} error{'s' if errors > 1 else ''} in the run "
            f"(Policy.max_total_errors={limits.max_total_errors})"
        )
    error = ToolExecutionError(
        f"{reason}: every call of the last turn failed; tool '{result.name}': {result.content}",
        tool_name=result.name,
        call_id=result.call_id,
    )
    error.__cause__ = failure.error if failure is not None else None
    return error


async def _run_all(
    ctx: RunContext,
    calls: list[ToolCall],
    tasks: list[asyncio.Task[ToolExecution]],
    reports: Reports | None,
) -> None:
    """Run ``calls`` concurrently (their tasks go into ``tasks``). When one fails (a journal
    write) or the run is interrupted, the others are cancelled and awaited: no tool runs on
    outside its run. A failure comes out as itself, not as an exception group."""
    failure: BaseException | None = None
    try:
        async with asyncio.TaskGroup() as group:
            for call in calls:
                tasks.append(group.create_task(_run(ctx, call, reports)))
            # Wait here, not in the group's exit: on Python 3.11, a branch that fails while the
            # exit waits cancels this task and never withdraws it (task.cancelling() stays 1).
            # And wait for all of them at once: a loop of waits that wakes for each progress
            # report let a cancel of the run from one branch, with a journal write failing in
            # another, reach the run as a cancel nobody made (the seams fuzzer found it). So
            # the calls' progress is emitted when they have ended, before their results.
            await asyncio.wait(tasks)
    except BaseExceptionGroup as failed:
        failure = failed.exceptions[0]
        # A group hides a cancel of this task that landed while a branch failed: when someone
        # besides the run still asks this task to cancel, their cancel goes on, not the failure.
        task = asyncio.current_task()
        if task is not None and task.cancelling() > ctx.own_cancels:
            raise asyncio.CancelledError from failure
    if failure is not None:
        raise failure
    if reports is not None:
        await emit_reported(ctx, reports)


def _reports_progress(ctx: RunContext, call: ToolCall) -> bool:
    """Whether the call's tool may report progress (see :attr:`Tool.reports_progress`)."""
    found = _find(ctx, call.name)
    return found is not None and found.reports_progress


async def _run_reporting(ctx: RunContext, call: ToolCall, reports: Reports) -> ToolExecution:
    """:func:`_run` in a task of its own, while the progress it reports is emitted here."""
    task = asyncio.ensure_future(_run(ctx, call, reports))
    try:
        await wait_reporting(ctx, reports, (task,))
    except BaseException:
        task.cancel()  # the run stops: the call stops with it, before the error goes on
        await asyncio.wait({task})
        raise
    return task.result()


def _settle_unfinished(
    ctx: RunContext,
    calls: list[ToolCall],
    settled: dict[str, ToolResult],
    running: list[ToolCall],
    announced: set[str],
) -> list[ToolResult]:
    """Give a result to each call of an interrupted turn that started, or whose start events
    went out, and has none; return them. A call cut off while it ran may have taken effect:
    its result says so. The calls never started are left to ``close_pending_calls``."""
    why = ctx.interrupt.value if ctx.interrupt is not None else "the run stopped"
    started = {c.id for c in running}
    new: list[ToolResult] = []
    for call in calls:
        if call.id in settled:
            continue
        if call.id in started:
            content = (
                f"Error: interrupted ({why}) while this call was running; it may or may not "
                "have taken effect"
            )
        elif call.id in announced:
            content = f"Error: not run: the run was interrupted ({why})"
        else:
            continue
        settled[call.id] = result = _error(call, content)
        new.append(result)
    return new


def _repeats(ctx: RunContext, calls: list[ToolCall]) -> bool:
    """Whether this turn makes the same calls as the turn before or the one before that (an
    A,A or A,B,A,B pattern); remembers the turn for the next one."""
    rs = ctx.rs
    signature = json.dumps(
        [[c.name, c.arguments if c.arguments is not None else c.arguments_json] for c in calls],
        sort_keys=True,
    )
    repeated = signature in rs.recent_turns
    rs.recent_turns = [*rs.recent_turns[-1:], signature]
    return repeated


def _loop_guard(ctx: RunContext) -> LoopDetectedEvent | None:
    """When this repeating turn trips the loop guard: warn the model (in the turn's last
    result) unless the policy finalizes; the event says which."""
    rs = ctx.rs
    limits = ctx.plan.limits
    if not repeats_spent(rs.counters, limits):
        return None
    assert limits.max_repeated_tool_calls is not None
    action: Literal["warn", "finalize"] = (
        "finalize" if limits.finalize_repeated_tool_calls else "warn"
    )
    if action == "warn":
        last = rs.tool_results[-1]
        warning = LOOP_WARNING.format(n=limits.max_repeated_tool_calls)
        rs.tool_results[-1] = last.model_copy(update={"content": last.content + warning})
    return LoopDetectedEvent(
        run_id=rs.run_id,
        tool_names=[c.name for c in rs.pending_tool_calls],
        repeats=limits.max_repeated_tool_calls,
        action=action,
    )
