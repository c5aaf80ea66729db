"""The driver: walks one run through the machine, a move at a time, until the run rests.

Each move goes through four layers, in this order, one concern each:

1. **next outcome** (:func:`ready_outcome`, else the state's handler): an interrupt the
   driver sees first (cancel, a hook failure under ``hook_failure_mode="fail"``, and in the
   states that declare the limits: the deadline, a usage limit, a stop condition), else the
   state's fast path, else its handler (the effects). Under the test suite
   (:func:`assert_declared`) the outcome must be declared for the state.
2. **decide**: the pure ``decide(state, outcome, counters)`` of the machine picks the move.
3. **apply** (:func:`apply`): counters, state, trace and stop reason; the calls still pending
   get their results; then the checkpoint, before anyone hears of the move.
4. **publish** (:func:`publish`): the ``on_transition`` hooks, the ``state_changed`` event and,
   when the run rests, the result, the ``after_run`` hooks and the terminal event.

Around the loop, a finalisation step always runs: the deadline timer is stopped and the run log
closed, whatever ended the loop. A cancel of the caller's task is recorded as the run's ending
(``aborted``, ``cancelled``: the handle's result is set and ``after_run`` hears of it) and then
goes on, unchanged. User code cannot end the loop early: hooks, verifiers and stop conditions
each have a defined outcome (see ``docs/hooks.md``). An error that is not user code's (a
checkpoint store that fails, a bug in a model adapter) goes on unchanged and leaves the run at
its last good checkpoint, so it can be resumed by its id: as for a cancel, the run's writes are
stored before it goes on, so the store does not change after the caller hears of it.
"""

from __future__ import annotations

import asyncio
import contextlib
from asyncio import current_task
from typing import Any

from ..errors import CheckpointError, FsmAgentError
from ..machine.agent_machine import Move
from ..machine.table import DECLARATIONS, TERMINAL, Outcome, State, StopReason
from ..run.events import AbortedEvent, FinalEvent, StateChangedEvent, SuspendedEvent
from ..run.state import explained
from .context import Interrupted, RunContext
from .hooks import report_hook_failure
from .limits import usage_exceeded
from .plan import CHECK_ENV
from .run import RunResult
from .states import FAST_PATHS, HANDLERS

__all__ = [
    "CHECK_ENV",
    "UndeclaredOutcomeError",
    "apply",
    "assert_declared",
    "drive",
    "publish",
    "ready_outcome",
]


# Enum members read on every step, bound once: on Python 3.11 each read of one
# (``State.DONE``) goes through ``EnumType.__getattr__`` (docs/performance.md, the traps).
_SUSPENDED, _FINALIZING, _ABORTED, _DONE = (
    State.SUSPENDED,
    State.FINALIZING,
    State.ABORTED,
    State.DONE,
)
_COMPACTING, _CALLING = State.COMPACTING, State.CALLING
_RESTING = frozenset({State.DONE, State.ABORTED, State.SUSPENDED})
_CANCEL, _DEADLINE, _HOOK_ERROR = Outcome.CANCEL, Outcome.DEADLINE, Outcome.HOOK_ERROR
_UNVERIFIED = StopReason.UNVERIFIED
_DECLARED = {state: declaration.all for state, declaration in DECLARATIONS.items()}


class UndeclaredOutcomeError(FsmAgentError, AssertionError):
    """A state's handler reported an outcome its declaration does not list: a bug in the
    kernel (or in a custom table's declarations), caught by the driver's declaration check."""


# -- layer 1: the next outcome ---------------------------------------------------------------
def _interrupt(ctx: RunContext, state: State, deadline: float | None) -> Outcome | None:
    """The interrupt outcome that replaces ``state``'s handler, if any."""
    interrupt = ctx.interrupt
    if interrupt is _CANCEL or interrupt is _HOOK_ERROR:
        return interrupt
    plan = ctx.plan
    if state not in plan.limit_states:
        return None
    if interrupt is _DEADLINE or (deadline is not None and ctx.runtime.clock() >= deadline):
        return _DEADLINE
    if (
        plan.usage_limited
        and (state is _COMPACTING or state is _CALLING)
        and usage_exceeded(plan.policy, ctx.rs.usage, ctx.rs.model_calls)
    ):
        return Outcome.USAGE_EXCEEDED
    if state is _COMPACTING and plan.stop_conditions:
        return _stop_condition(ctx)
    return None


def _stop_condition(ctx: RunContext) -> Outcome | None:
    """``stop_condition`` when one of the agent's stop conditions fires (a string it returns is
    kept as the run's stop detail). A condition that raises is a failing hook: ``hook_error``
    is reported and it does not fire, or under ``hook_failure_mode="fail"`` the run aborts."""
    rs = ctx.rs
    for condition in ctx.plan.stop_conditions:
        error: str | None = None
        cause: BaseException | None = None
        try:
            fired = condition(rs)
            stops = bool(fired)
        except Exception as caught:
            cause = explained(caught)
            error = f"{type(cause).__name__}: {cause}"
        if error is not None:
            name = getattr(condition, "__name__", type(condition).__name__)
            report_hook_failure(ctx, f"stop condition {name}", error, cause)
            if ctx.interrupt is _HOOK_ERROR:
                return _HOOK_ERROR
            continue
        if stops:
            if isinstance(fired, str):
                rs.stop_detail = fired
            return Outcome.STOP_CONDITION
    return None


def ready_outcome(
    ctx: RunContext, state: State, deadline: float | None, *, quiet: bool
) -> Outcome | None:
    """Layer 1, without an effect: the interrupt, else the fast path's outcome; ``None`` when
    the state's handler must run. ``quiet`` says nothing but ``ctx.interrupt`` can interrupt
    (no deadline, usage limit or stop condition)."""
    outcome = None if quiet and ctx.interrupt is None else _interrupt(ctx, state, deadline)
    if outcome is None and (fast := FAST_PATHS.get(state)) is not None:
        outcome = fast(ctx)
    return outcome


def assert_declared(state: State, outcome: Outcome) -> None:
    """Layer 1's check under the test suite: raise :class:`UndeclaredOutcomeError` when
    ``outcome`` (from an interrupt, a fast path or a handler) is not declared for ``state``."""
    if outcome not in _DECLARED[state]:
        raise UndeclaredOutcomeError(
            f"the handler of {state.value!r} reported {outcome.value!r}, which "
            f"DECLARATIONS does not list for it: declare it (with its rows) or fix the handler"
        )


# -- layer 3: apply ----------------------------------------------------------------------------
def apply(ctx: RunContext, move: Move) -> None:
    """Layer 3: record ``move`` in the run state (the driver then checkpoints it)."""
    rs = ctx.rs
    rs.counters = move.counters
    rs.state = dest = move.dest
    rs.trace.append(move)
    ctx.last_move = move
    if move.stop is not None:
        rs.stop_reason = move.stop
        if move.stop is _UNVERIFIED and ctx.error is not None:
            rs.error = str(ctx.error)  # the verifier's failure (verifying keeps it on ctx.error)
    if (dest is _FINALIZING or dest is _ABORTED) and rs.pending_tool_calls:
        ctx.close_pending_calls(f"the run stopped ({rs.stop_reason})")
    if dest is _ABORTED and ctx.error is not None:
        rs.error = str(ctx.error)


# -- layer 4: publish --------------------------------------------------------------------------
async def _notify(ctx: RunContext, hooks: Any, resting: bool, **kwargs: object) -> None:
    """Run observing hooks from the driver. While the run moves, an interrupt cuts them short
    (it is taken before the next handler); once it rests, each runs to its own timeout."""
    notify = ctx.plan.hooks.notify(ctx, hooks, **kwargs)
    if resting:
        await notify
        return
    with contextlib.suppress(Interrupted):
        await ctx.effect(notify)


async def publish(ctx: RunContext, move: Move) -> None:
    """Layer 4: tell the hooks and the listener about ``move``; when the run rests, set the
    handle's result, run ``after_run`` and emit the terminal event."""
    rs = ctx.rs
    hooks = ctx.plan.hooks
    dest = move.dest
    resting = dest in TERMINAL or dest is _SUSPENDED
    if hooks.on_transition:
        await _notify(ctx, hooks.on_transition, resting, move=move, run_state=rs)
    listening = ctx.listening
    if listening:
        await ctx.emit(
            StateChangedEvent(
                run_id=rs.run_id,
                source=move.source,
                outcome=move.outcome,
                dest=dest,
                row=move.row,
                stop_reason=move.stop,
                phase=rs.phase,
            )
        )
    if not resting:
        if listening:
            await ctx.emit_all(ctx.take_events())
        return
    result = _set_result(ctx)
    if hooks.after_run:
        await _notify(ctx, hooks.after_run, True, result=result, run_state=rs)
    if listening:
        await ctx.emit_all(ctx.take_events())
        await ctx.emit(_terminal_event(ctx))


def _terminal_event(ctx: RunContext) -> FinalEvent | AbortedEvent | SuspendedEvent:
    rs = ctx.rs
    assert rs.stop_reason is not None
    if rs.state is _DONE:
        return FinalEvent(run_id=rs.run_id, output=rs.output or "", stop_reason=rs.stop_reason)
    if rs.state is _ABORTED:
        return AbortedEvent(run_id=rs.run_id, stop_reason=rs.stop_reason, error=rs.error)
    return SuspendedEvent(
        run_id=rs.run_id,
        pending=tuple(r.call for r in rs.human_requests),
        questions={r.call.id: r.question for r in rs.human_requests if r.question is not None},
    )


def _set_result(ctx: RunContext) -> RunResult[Any]:
    result = ctx.result = RunResult.of(ctx.rs, ctx.error, ctx.plan.output_spec)
    if ctx.handle is not None:
        ctx.handle.result = result
    return result


# -- the loop ----------------------------------------------------------------------------------
async def drive(ctx: RunContext) -> None:
    """Run ``ctx``'s run until it rests, emitting its events when someone listens."""
    rs = ctx.rs
    plan = ctx.plan
    decide = plan.decide
    # max_wall_clock_s bounds the run's active time over all its invocations (a suspended
    # run's wait for a human does not count): a resumed run continues the same budget.
    wall = plan.policy.max_wall_clock_s
    clock = ctx.runtime.clock
    started = clock()
    spent = rs.active_s
    deadline = ctx.deadline = None if wall is None else started + wall - spent
    timer = None
    if deadline is not None:
        timer = asyncio.get_running_loop().call_later(
            max(0.0, deadline - started), ctx.request_interrupt, _DEADLINE
        )
    hooks = plan.hooks
    quiet = deadline is None and not plan.usage_limited and not plan.stop_conditions
    observed = bool(ctx.listening or hooks.on_transition)  # else only a rest is published
    check = plan.checks_declarations
    ctx.task = current_task()
    try:
        if hooks.before_run:
            await _notify(ctx, hooks.before_run, False, run_state=rs, agent=ctx.agent)
            if ctx.listening:
                await ctx.emit_all(ctx.take_events())
        while True:
            state = rs.state
            if state in TERMINAL or (state is _SUSPENDED and ctx.last_move is not None):
                return
            outcome = ready_outcome(ctx, state, deadline, quiet=quiet)
            if outcome is None:
                outcome = await HANDLERS[state](ctx)  # the effects
                if ctx.interrupt is _CANCEL:
                    outcome = _CANCEL  # cancelled while the handler's events went out
            if check:
                assert_declared(state, outcome)
            move = decide(state, outcome, rs.counters)
            if deadline is not None:
                rs.active_s = spent + (clock() - started)
            apply(ctx, move)
            if ctx.durable is not None:
                await ctx.durable.moved(rs)  # the checkpoint, before anyone hears of the move
            if observed or move.dest in _RESTING:
                await publish(ctx, move)
    except asyncio.CancelledError:
        await _cancelled(ctx)
        raise
    except Exception:
        await _store_before_error(ctx)
        raise
    finally:
        if timer is not None:
            timer.cancel()
        if ctx.durable is not None:
            ctx.durable.close()
        if ctx.handle is not None:
            ctx.handle._detach()


async def _store_before_error(ctx: RunContext) -> None:
    """An error goes through the driver: the run's writes are stored first (those handed over
    and those deferred), so the store does not change after the caller hears of the error,
    which goes on whatever the store says. A cancel of the caller's task that lands meanwhile
    is a cancel, and goes on in the error's place."""
    if ctx.durable is not None:
        try:
            with contextlib.suppress(Exception):
                await ctx.durable.interrupted()
        except asyncio.CancelledError:
            await _cancelled(ctx)
            raise


async def _cancelled(ctx: RunContext) -> None:
    """The caller's task was cancelled: the cancels the run made of its own task withdrawn,
    the cancel recorded (:func:`_record_cancel`)."""
    ctx.take_own_cancels()
    await _record_cancel(ctx)


async def _record_cancel(ctx: RunContext) -> None:
    """The caller's task was cancelled: the run ends ``aborted`` with ``cancelled``, its
    handle has the result and ``after_run`` hears of it; then the cancel goes on. A durable
    run stores nothing more, so it resumes from its latest checkpoint."""
    rs = ctx.rs
    last = ctx.last_move
    if rs.state in TERMINAL or (last is not None and last.dest is _SUSPENDED):
        return  # the run already rests
    move = ctx.plan.decide(rs.state, _CANCEL, rs.counters)
    rs.counters = move.counters
    rs.state = move.dest
    rs.stop_reason = move.stop
    rs.trace.append(move)
    ctx.last_move = move
    if rs.pending_tool_calls:
        ctx.close_pending_calls("the run was cancelled")
    rs.error = "the task running the agent was cancelled"
    result = _set_result(ctx)
    hooks = ctx.plan.hooks
    if hooks.after_run:
        await _notify(ctx, hooks.after_run, True, result=result, run_state=rs)
    if ctx.durable is not None:  # last: the writes already handed to the store, awaited
        with contextlib.suppress(CheckpointError):  # the cancel goes on regardless
            await ctx.durable.interrupted()
