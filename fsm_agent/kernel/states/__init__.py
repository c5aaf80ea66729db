"""One async handler per state: the only place where effects happen.

A handler is a coroutine that returns its :class:`~fsm_agent.machine.table.Outcome`; it hands the
events its work produces to the listener with ``await ctx.emit(event)`` (see
:class:`~fsm_agent.kernel.context.Emitted`), building them only when someone listens. It never
chooses the next state; the driver in :mod:`fsm_agent.kernel.agent` asks the table.

Interruptions (the caller's cancel, the wall-clock deadline) reach a handler in two ways: the
driver checks them before every handler, and while a handler awaits an effect (``ctx.effect``)
the interrupt cancels that await, which the handler turns into the interrupt's outcome.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TypeVar

from ...events import (
    HookErrorEvent,
    UsageEvent,
    VerificationFailedEvent,
)
from ...machine.table import Outcome, State, StopReason
from ...messages import (
    Message,
    ModelRequest,
    Role,
)
from ..context import Interrupted, RunContext
from .calling import Answer, call_model, handle_calling, notify_answered
from .compacting import compacting_needs_nothing, handle_compacting
from .dispatching import handle_dispatching

__all__ = ["FAST_PATHS", "HANDLERS", "RunContext", "Verdict"]

T = TypeVar("T")

SUMMARY_PROMPT = (
    "You have reached the maximum number of steps for this task. Without calling any tools, "
    "summarise what you have done so far and give the best answer you can."
)
SUMMARY_FALLBACK = (
    "The agent stopped after reaching its step limit and could not produce a summary."
)
DONE_REMINDER = (
    "You answered without calling the 'done' tool. When the task is complete, call 'done' "
    "with your final answer; otherwise continue working."
)
_FALLBACK_OUTPUT = {
    StopReason.CONTENT_FILTER: "The answer was withheld by the provider's content filter.",
    StopReason.CONTEXT_LIMIT: "The conversation no longer fits the model's context window.",
}


# Enum members read by every run, bound once: on Python 3.11 each read of one
# (``State.DONE``) goes through ``EnumType.__getattr__``, about ten global reads.
_START, _FINALIZED = Outcome.START, Outcome.FINALIZED
_MAX_STEPS, _DONE_TOOL = StopReason.MAX_STEPS, StopReason.DONE_TOOL


@dataclass(frozen=True, slots=True)
class Verdict:
    """A verifier's answer: accepted, or rejected with feedback for the model [S002]."""

    complete: bool
    feedback: str | None = None

    @classmethod
    def accept(cls) -> Verdict:
        """The answer is complete."""
        return cls(True)

    @classmethod
    def reject(cls, feedback: str) -> Verdict:
        """The answer is not complete; ``feedback`` goes back to the model."""
        return cls(False, feedback)


# -- idle ------------------------------------------------------------------------------------
async def handle_idle(ctx: RunContext) -> Outcome:
    """Enqueue the system prompt (once, first), any earlier history, and the user input."""
    system = ctx.agent.system_message
    history = ctx.history
    if system is not None:
        ctx.append(system)
        history = [m for m in history if m.role is not Role.SYSTEM]
    for message in history:
        ctx.append(message)
    assert ctx.input is not None
    ctx.append(ctx.input)
    return _START


# -- verifying -------------------------------------------------------------------------------
async def _awaited(answer: Awaitable[Verdict | bool]) -> Verdict | bool:
    return await answer


async def handle_verifying(ctx: RunContext) -> Outcome:
    """Ask the verifier (or apply the done-tool requirement) about the last answer."""
    rs = ctx.rs
    agent = ctx.agent
    feedback: str | None = None
    if agent.policy.require_done_tool:
        feedback = DONE_REMINDER
    elif agent.verifier is not None:
        try:
            answer = agent.verifier(output=rs.last_text, run_state=rs)
            verdict: Verdict | bool = (
                answer if isinstance(answer, Verdict | bool) else await ctx.effect(_awaited(answer))
            )
        except Interrupted:
            return ctx.interrupted
        except Exception as exc:
            if ctx.listening:
                await ctx.emit(HookErrorEvent(run_id=rs.run_id, hook="verifier", error=repr(exc)))
            verdict = Verdict.reject(f"the answer could not be verified ({type(exc).__name__})")
        if not isinstance(verdict, Verdict | bool):  # user code returned garbage: a failure
            if ctx.listening:
                error = f"returned {type(verdict).__name__}; expected a Verdict or a bool"
                await ctx.emit(HookErrorEvent(run_id=rs.run_id, hook="verifier", error=error))
            verdict = Verdict.reject("the answer could not be verified (no verdict)")
        if isinstance(verdict, bool):
            verdict = Verdict(verdict, None if verdict else "The answer was not accepted.")
        if not verdict.complete:
            feedback = verdict.feedback or "The answer was not accepted."
    if feedback is None:
        return Outcome.VERIFIED
    rs.feedback = feedback
    if ctx.listening:
        await ctx.emit(VerificationFailedEvent(run_id=rs.run_id, feedback=feedback))
    return Outcome.REJECTED


# -- finalizing ------------------------------------------------------------------------------
def finalizing_needs_no_call(ctx: RunContext) -> Outcome | None:
    """The fast path of ``finalizing``: the output is the last answer (or the done tool's
    message); ``None`` when the step limit asks for the summary call."""
    rs = ctx.rs
    reason = rs.stop_reason
    if reason is _MAX_STEPS and ctx.agent.policy.summarize_on_max_steps:
        return None
    if reason is _DONE_TOOL:
        rs.output = rs.done_message or rs.last_text
    else:
        rs.output = rs.last_text or (_FALLBACK_OUTPUT.get(reason, "") if reason else "")
    return _FINALIZED


async def handle_finalizing(ctx: RunContext) -> Outcome:
    """Produce the output: the tools-off summary call at the step limit [S000 §6], else the
    last answer (or the done tool's message)."""
    without_call = finalizing_needs_no_call(ctx)
    if without_call is not None:
        return without_call
    rs = ctx.rs
    agent = ctx.agent
    request = ModelRequest.model_construct(
        messages=(*rs.messages, Message.user(SUMMARY_PROMPT)),  # a temporary copy
        tools=(),
        tool_choice="none",
        parallel_tool_calls=None,
        max_tokens=None,
        temperature=None,
        stop_sequences=(),
        reasoning_effort=None,
        reasoning_budget_tokens=None,
    )
    # The same seams as any model call: the model-call hooks and the effect journal.
    answer: Answer | None = None
    try:
        answer = await call_model(ctx, request, step=rs.counters.steps, attempt=1, stream=False)
    except Interrupted:
        return ctx.interrupted
    except Exception:
        rs.output = SUMMARY_FALLBACK
    if answer is not None:
        rs.output = answer.response.message.text.strip() or SUMMARY_FALLBACK
        if ctx.listening:
            await ctx.emit(UsageEvent(run_id=rs.run_id, call=answer.call_usage, total=rs.usage))
        if agent.hooks.after_model_call:
            await notify_answered(ctx, answer)
            await ctx.emit_all(ctx.take_events())
    return _FINALIZED


async def handle_suspended(ctx: RunContext) -> Outcome:
    """A resumed run: the human's decisions are applied by dispatching."""
    return Outcome.RESUME


Handler = Callable[[RunContext], Coroutine[object, object, Outcome]]
HANDLERS: dict[State, Handler] = {
    State.IDLE: handle_idle,
    State.COMPACTING: handle_compacting,
    State.CALLING: handle_calling,
    State.DISPATCHING: handle_dispatching,
    State.VERIFYING: handle_verifying,
    State.SUSPENDED: handle_suspended,
    State.FINALIZING: handle_finalizing,
}
"""The handler of every non-terminal state."""

FAST_PATHS: dict[State, Callable[[RunContext], Outcome | None]] = {
    State.COMPACTING: compacting_needs_nothing,
    State.FINALIZING: finalizing_needs_no_call,
}
"""Synchronous versions of a state's handler for when it needs no effect and emits no event:
they do its work and give its outcome, or ``None`` (having done nothing): run the handler.
Most moves take them."""
