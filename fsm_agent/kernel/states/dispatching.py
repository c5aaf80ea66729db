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

The turn's calls and what has become of each live in a :class:`~.turn.Turn`; the two executors
(:func:`_run_together`, :func:`_run_in_order`) record every finished call through its one
:meth:`~.turn.Turn.record`.

A suspended turn keeps its finished results and approvals in the run state, so a resume runs
each remaining call once and no call twice. With a checkpointer, each execution goes through the
write-ahead journal (:mod:`fsm_agent.persistence.run_log`), so a resume after a crash reuses the
results already recorded.
"""

from __future__ import annotations

import asyncio
import json
from typing import Literal

from ...errors import ToolExecutionError
from ...machine.table import Outcome, repeats_spent
from ...run.approval import Decision, suspend
from ...run.events import LoopDetectedEvent
from ...run.state import HumanRequest
from ...tools import Tool, ToolContext, ToolExecution
from ...tools.output import PAGER_NAME, cut_result
from ...values.messages import ToolCall, ToolResult
from ..context import Interrupted, Reports, RunContext
from ..handover import hand_off
from ..hooks import MockResult, SkipTool
from ..phasing import gate_call, move_by_code
from ..progress import emit_reported, reporter, wait_reporting
from .turn import Turn, tool_error

__all__ = ["handle_dispatching"]

# Enum members read on every step, bound once: on Python 3.11 each read of one goes through
# the enum's class attribute lookup (docs/performance.md, the traps).
_TOOLS_DONE = Outcome.TOOLS_DONE

LOOP_WARNING = (
    "\n\n[loop guard: you have made the same tool calls {n} times in a row. Do not repeat "
    "them; change your approach, or answer with what you have.]"
)


DONE_ALONE = (
    "Error: done was not run: it came with other tool calls in one turn, so its answer was "
    "written before their results existed. Read their results, then call done alone."
)
"""The result of a call of the built-in done tool made beside other calls: those run, and the
model answers once it has read their results."""


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
            return call, tool_error(call, f"Error: not run: {changed.reason}")
        call = changed
        if ctx.interrupt is not None:
            return call, None
    verdict = await hooks.run_approve_tool(ctx, call) if hooks.approve_tool else None
    if verdict is None:
        if found.needs_approval:
            return call, HumanRequest(kind="approval", call=call)
        return call, None
    if verdict.decision is Decision.DENY:
        return call, tool_error(call, f"Error: not approved: {verdict.reason}")
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
            tool_error(call, f"Error: not run: the run was interrupted ({ctx.interrupt.value})")
        )
    phases = plan.phases
    if phases is not None:  # the move tool, or a tool outside the phase, never runs
        answer = gate_call(ctx, phases, call)
        if answer is not None:
            return ToolExecution(answer)
    found = _find(ctx, call.name)
    if found is None:  # a tool error like any other (tool_failure_mode="fail" aborts on it)
        message = f"Error: Unknown tool '{call.name}'"
        return ToolExecution(tool_error(call, message), error=LookupError(message[7:]))
    if call.name == "done" and plan.done_offered and len(rs.pending_tool_calls) > 1:
        return ToolExecution(tool_error(call, DONE_ALONE))
    limit = plan.settings.max_tool_calls
    if limit is not None and rs.tool_executions >= limit:
        message = f"Error: the run's tool call limit ({limit}) is reached; this call was not run"
        return ToolExecution(tool_error(call, message))
    rs.tool_executions += 1
    durable = ctx.durable
    context = _context(ctx, found, call, reports) if found.uses_context else None
    if durable is None:
        execution = await found.execute(
            call, context, default_timeout_s=plan.settings.tool_timeout_s
        )
    else:  # through the write-ahead journal: a recorded outcome is reused, not run again
        execution = await durable.execute_tool(
            found, call, context, rs.counters.steps, plan.settings.tool_timeout_s
        )
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
    return execution._replace(result=result)


def _context(
    ctx: RunContext, found: Tool, call: ToolCall, reports: Reports | None
) -> ToolContext[object]:
    """The context of one call (with its progress reporter when someone listens)."""
    rs = ctx.rs
    context = ToolContext(
        run_id=rs.run_id,
        call_id=call.id,
        step=rs.counters.steps,
        deps=ctx.deps,
        cancel_requested=ctx.cancel_requested,
        tool_outputs=rs.tool_outputs,
    )
    if reports is not None and found.reports_progress:
        context.progress = reporter(ctx, reports, call)
    return context


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


# -- the handler -------------------------------------------------------------------------------
async def handle_dispatching(ctx: RunContext) -> Outcome:
    """Run the pending tool calls; every call ends with exactly one result in the history."""
    hooks, settings = ctx.plan.hooks, ctx.plan.settings
    turn = Turn(ctx)
    if ctx.rs.human_requests:
        await _apply_decisions(turn)
    interrupted = False
    try:
        if hooks.before_tool or hooks.approve_tool or ctx.plan.approval_needed:
            await _prepare_all(turn)
        to_run = ctx.turn_calls = turn.to_run()
        if to_run and ctx.pause_requested():
            turn.paused = True
        elif to_run and settings.parallel_tool_calls and len(to_run) > 1:
            await _run_together(turn, to_run)
        else:
            await _run_in_order(turn, to_run)
    except Interrupted:
        interrupted = True
    except BaseException:
        # The turn ends with no outcome (a store failed, the caller's task was cancelled): each
        # call still gets its one result before the error goes on.
        turn.stop()
        raise
    if interrupted:
        await turn.settle_interrupted()
    turn.store()
    ending = _ending(turn, interrupted)
    if ending is not None:
        return ending
    outcome, detected = _turn_outcome(turn)
    if ctx.listening and detected is not None:
        await ctx.emit(detected)
    if ctx.plan.handoffs:  # records the results, and gives the conversation to a target
        return await hand_off(ctx, outcome)
    ctx.close_pending_calls("")  # every call has its result: this records them
    return outcome


async def _apply_decisions(turn: Turn) -> None:
    """A resumed turn: apply the human's decisions to the calls they were asked about."""
    rs = turn.ctx.rs
    for request in rs.human_requests:
        call = request.call
        if request.decision == "allow":
            turn.approved = (*turn.approved, call.id)
            continue
        if request.decision == "answer":
            result = _limited(
                turn.ctx, ToolResult(call_id=call.id, name=call.name, content=request.reply or "")
            )
        else:
            result = tool_error(call, f"Error: not approved: {request.reply}")
        await turn.settle(call, result, started=request.kind == "question")
    rs.human_requests = ()


async def _prepare_all(turn: Turn) -> None:
    """Phase 1: the ``before_tool`` hooks and the permission check of each call not yet
    settled or approved."""
    ctx = turn.ctx
    turn.calls = calls = list(turn.calls)
    for index, call in enumerate(calls):
        if call.id in turn.settled or call.id in turn.approved:
            continue
        if ctx.interrupt is not None:
            raise Interrupted
        call, verdict = await ctx.effect(_prepare(ctx, call))
        calls[index] = call
        if isinstance(verdict, ToolResult):
            await turn.settle(call, verdict)
        elif isinstance(verdict, HumanRequest):
            turn.requests = (*turn.requests, verdict)
        else:
            turn.approved = (*turn.approved, call.id)
    await ctx.emit_all(ctx.take_events())
    if ctx.interrupt is not None:
        raise Interrupted


async def _run_together(turn: Turn, calls: list[ToolCall]) -> None:
    """Phase 2, concurrently: every call in a task of its own; the results are recorded in
    call order once all have ended."""
    ctx = turn.ctx
    if ctx.listening:
        for call in calls:
            await turn.announce(call)
        if ctx.interrupt is not None:  # the listener may cancel on an event
            raise Interrupted
    turn.running = tuple([c.id for c in calls])
    ctx.turn_phase = ctx.rs.phase
    live = turn.reports is not None and any(_runs_agent(ctx, c) for c in calls)
    if live:  # the children's events reach the listener while they run
        ctx.child_events = turn.reports
    interrupted = False
    try:
        tasks: list[tuple[ToolCall, asyncio.Task[ToolExecution]]] = []
        turn.tasks = tasks
        await ctx.effect(_run_all(ctx, calls, tasks, turn.reports, live=live))
    except Interrupted:
        interrupted = True
    finally:
        ctx.turn_phase = None
        ctx.child_events = None
    if interrupted and live:  # the children's events of their ending, cut short
        assert turn.reports is not None
        await emit_reported(ctx, turn.reports)
    finished, turn.tasks = turn.tasks, ()
    for call, task in finished:
        if task.done() and not task.cancelled():
            turn.record(call, task.result())
            if ctx.listening:
                await turn.emit_result(task.result())
    await ctx.emit_all(ctx.take_events())
    if interrupted:
        raise Interrupted


async def _run_in_order(turn: Turn, calls: list[ToolCall]) -> None:
    """Phase 2, in order: each call once the one before it has ended, until one asks a human,
    completes the task or fails under ``fail_fast``."""
    ctx = turn.ctx
    # By index: an iterator would be one more object for the collector to walk per run while
    # its tool runs (a range's iterator is not tracked).
    for index in range(len(calls)):
        call = calls[index]
        if ctx.interrupt is not None or (ctx.deadline is not None and ctx.deadline_passed()):
            raise Interrupted
        if ctx.pause_requested():
            turn.paused = True
            break
        if ctx.listening:
            await turn.announce(call)
            if ctx.interrupt is not None:  # the listener may cancel on an event
                raise Interrupted
        turn.running = (*turn.running, call.id)
        if turn.reports is not None and _reports_progress(ctx, call):
            execution = await ctx.effect(_run_reporting(ctx, call, turn.reports))
        else:
            execution = await ctx.effect(_run(ctx, call))
        stop = turn.record(call, execution)
        if ctx.listening:
            await ctx.emit_all(ctx.take_events())
        if ctx.listening:
            await turn.emit_result(execution)
        if stop:
            break
    if ctx.interrupt is not None:
        raise Interrupted


# -- phase 3: the outcome ----------------------------------------------------------------------
def _ending(turn: Turn, interrupted: bool) -> Outcome | None:
    """The outcome of a turn that ends otherwise than with every call run (interrupted, the
    task completed, a call failed under ``fail_fast``, a human to wait for), once its results
    are in the run state; the calls' messages join the history unless the run suspends."""
    ctx, rs = turn.ctx, turn.ctx.rs
    if interrupted:
        ctx.close_pending_calls("the run was interrupted")
        return ctx.interrupted
    if turn.done is not None:
        ctx.close_pending_calls("the task was completed by an earlier call")
        rs.done_message = turn.done.final_message or rs.last_text
        return Outcome.DONE_TOOL
    failure = turn.failure
    if failure is not None and ctx.plan.settings.fail_fast:
        ctx.close_pending_calls("an earlier call failed")
        ctx.error = _aborting_error(failure)
        return Outcome.TOOL_ABORT
    if turn.requests or turn.paused:
        rs.approved_calls = tuple(sorted(turn.approved))
        rs.human_requests = tuple(turn.requests)
        suspend(rs)
        return Outcome.NEEDS_HUMAN
    return None


def _turn_outcome(turn: Turn) -> tuple[Outcome, LoopDetectedEvent | None]:
    """The outcome of a turn whose every call has its result (done, all failed, repeated),
    and the loop guard's event when this turn trips it."""
    ctx, rs = turn.ctx, turn.ctx.rs
    outcome, detected = _TOOLS_DONE, None
    if all(r.is_error for r in rs.tool_results):
        outcome = Outcome.TOOLS_FAILED
        # The reason, should the table end the run on this turn (its error limits).
        ctx.error = _failed_turn_error(ctx, turn.failure)
    elif ctx.plan.limits.max_repeated_tool_calls is not None and _repeats(ctx, turn.calls):
        outcome = Outcome.TOOLS_REPEATED
        detected = _loop_guard(ctx)
    return outcome, detected


def _aborting_error(failure: ToolExecution) -> ToolExecutionError:
    """What ends a run on a failed call under ``fail_fast`` (the tool's exception as the
    cause)."""
    result = failure.result
    error = ToolExecutionError(
        f"tool '{result.name}' failed: {result.content}",
        tool_name=result.name,
        call_id=result.call_id,
    )
    error.__cause__ = failure.error
    return error


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
    tasks: list[tuple[ToolCall, asyncio.Task[ToolExecution]]],
    reports: Reports | None,
    *,
    live: bool = False,
) -> None:
    """Run ``calls`` concurrently (each goes into ``tasks`` with its task). When one fails (a
    journal write) or the run is interrupted, the others are cancelled and awaited: no tool runs on
    outside its run. A failure comes out as itself, not as an exception group. ``live``: some
    call runs a child agent, whose events (and the calls' progress) ``reports`` gets and this
    emits as they come."""
    failure: BaseException | None = None
    try:
        async with asyncio.TaskGroup() as group:
            for call in calls:
                tasks.append((call, group.create_task(_run(ctx, call, reports))))
            # Wait here, not in the group's exit: on Python 3.11, a branch that fails while the
            # exit waits cancels this task and never withdraws it (task.cancelling() stays 1).
            # And wait for all of them at once: a loop of waits that wakes for each progress
            # report let a cancel of the run from one branch, with a journal write failing in
            # another, reach the run as a cancel nobody made (the seams fuzzer found it). So
            # the calls' progress is emitted when they have ended, before their results. Only
            # a turn that runs children emits while its calls run, as its children's events
            # must reach the listener while they run.
            if live:
                assert reports is not None
                await wait_reporting(ctx, reports, [task for _, task in tasks], interruptible=True)
            else:
                await asyncio.wait([task for _, task in tasks])
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


def _runs_agent(ctx: RunContext, call: ToolCall) -> bool:
    """Whether the call's tool runs a child agent (see :attr:`Tool.runs_agent`)."""
    found = _find(ctx, call.name)
    return found is not None and found.runs_agent


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


def _repeats(ctx: RunContext, calls: list[ToolCall]) -> bool:
    """Whether this turn makes the same calls as the turn before or the one before that (an
    A,A or A,B,A,B pattern); remembers the turn for the next one."""
    rs = ctx.rs
    signature = json.dumps(
        [[c.name, c.arguments if c.arguments is not None else c.arguments_json] for c in calls],
        sort_keys=True,
    )
    repeated = signature in rs.recent_turns
    rs.recent_turns = (*rs.recent_turns[-1:], signature)
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
        warned = last.model_copy(update={"content": last.content + warning})
        rs.tool_results = (*rs.tool_results[:-1], warned)
    return LoopDetectedEvent(
        run_id=rs.run_id,
        tool_names=[c.name for c in rs.pending_tool_calls],
        repeats=limits.max_repeated_tool_calls,
        action=action,
    )
