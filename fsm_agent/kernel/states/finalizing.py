"""The ``finalizing`` state: the run's output.

Most runs take the fast path: the output is the last answer (or the done tool's message). At
the step limit, with ``summarize_on_max_steps``, one tools-off summary call asks the model for
its best answer. That call is a model call like any other (streamed to a listener,
with its request, response and usage events; its answer, tool calls left out, is appended to
the run's messages), so the run's limits hold for it:

- a usage limit already reached (requests, tokens, cost) means the call is not made: the output
  is the fallback text and the outcome ``usage_exceeded`` (stop reason ``usage_limit``);
- a wall-clock deadline that has passed, or passes while the call runs (or while a listener
  holds one of its events), means the call is not made or is cut short: the output is the
  fallback text and the outcome ``deadline`` (stop reason ``timeout``);
- a call that fails with a :class:`~fsm_agent.ModelError` keeps stop reason ``max_steps`` with
  the fallback text (a warning on the ``fsm_agent`` logger says why); any other error goes on
  unchanged, as in ``calling``.

Every one of these outcomes is declared for ``finalizing`` beside its rows, so no ending of the
summary call can leave the run without a move.
"""

from __future__ import annotations

from ...errors import ModelError
from ...log import logger
from ...machine.table import Outcome, StopReason
from ...run.events import AttemptDiscardedEvent, ModelResponseEvent, ReasoningEvent, UsageEvent
from ...values.messages import Message, ModelRequest, ToolCall
from ...values.model_settings import summary_settings
from ..context import Interrupted, RunContext
from ..limits import usage_exceeded
from .model_call import Answer, call_model, notify_answered

__all__ = ["SUMMARY_FALLBACK", "SUMMARY_PROMPT", "finalizing_needs_no_call", "handle_finalizing"]

SUMMARY_PROMPT = (
    "You have reached the maximum number of steps for this task. Without calling any tools, "
    "summarise what you have done so far and give the best answer you can."
)
SUMMARY_FALLBACK = (
    "The agent stopped after reaching its step limit and could not produce a summary."
)
_FALLBACK_OUTPUT = {
    StopReason.CONTENT_FILTER: "The answer was withheld by the provider's content filter.",
    StopReason.CONTEXT_LIMIT: "The conversation no longer fits the model's context window.",
}


def finalizing_needs_no_call(ctx: RunContext) -> Outcome | None:
    """The fast path of ``finalizing``: the output is the last answer (or the done tool's
    message); ``None`` when the step limit asks for the summary call."""
    rs = ctx.rs
    reason = rs.stop_reason
    if reason is StopReason.MAX_STEPS and ctx.plan.policy.summarize_on_max_steps:
        return None
    if reason is StopReason.DONE_TOOL:
        rs.output = rs.done_message or rs.last_text
    else:
        rs.output = rs.last_text or (_FALLBACK_OUTPUT.get(reason, "") if reason else "")
    return Outcome.FINALIZED


def _summary_request(ctx: RunContext) -> ModelRequest:
    return ModelRequest(
        messages=(*ctx.rs.messages, Message.user(SUMMARY_PROMPT)),  # a temporary copy
        tools=(),
        tool_choice="none",
        **summary_settings(ctx.model_settings),  # sampling as set; no tool choice
    )


def _fall_back(ctx: RunContext, why: str) -> None:
    logger.warning(
        "run %s: no step-limit summary (%s); using the fallback output", ctx.rs.run_id, why
    )
    ctx.rs.output = SUMMARY_FALLBACK


async def handle_finalizing(ctx: RunContext) -> Outcome:
    """Produce the output: the tools-off summary call at the step limit, else the
    last answer (or the done tool's message)."""
    without_call = finalizing_needs_no_call(ctx)
    if without_call is not None:
        return without_call
    rs = ctx.rs
    plan = ctx.plan
    if ctx.interrupt is Outcome.DEADLINE or ctx.deadline_passed():
        _fall_back(ctx, "the wall-clock limit passed")
        return Outcome.DEADLINE
    if plan.usage_limited and usage_exceeded(plan.policy, rs.usage, rs.model_calls):
        _fall_back(ctx, "a usage limit is reached")
        return Outcome.USAGE_EXCEEDED
    # The same seams as any model call: the model-call hooks and the effect journal.
    answer: Answer | None = None
    try:
        answer = await call_model(
            ctx, _summary_request(ctx), step=rs.counters.steps, attempt=1, stream=True
        )
    except Interrupted:
        interrupted = ctx.interrupted
        if interrupted is Outcome.DEADLINE:
            _fall_back(ctx, "the wall-clock limit passed during the call")
        return interrupted
    except ModelError as exc:  # the boundary maps model errors; anything else goes on
        _fall_back(ctx, f"the call failed: {exc!r}")
        if ctx.listening:  # whatever it streamed is not the answer
            await ctx.emit(AttemptDiscardedEvent(run_id=rs.run_id, attempt=1))
    if answer is not None:
        response = answer.response
        message = response.message
        rs.output = message.text.strip() or SUMMARY_FALLBACK
        if message.tool_calls:  # asked for none: a call here would go without a result
            parts = tuple(p for p in message.parts if not isinstance(p, ToolCall))
            message = Message(role=message.role, parts=parts)
        if message.text.strip():  # the answer the user is given stays in the thread
            ctx.append(message)
        if ctx.listening:
            step = rs.counters.steps
            await ctx.emit(ModelResponseEvent(run_id=rs.run_id, step=step, response=response))
            await ctx.emit(UsageEvent(run_id=rs.run_id, call=answer.call_usage, total=rs.usage))
            for part in message.reasoning:
                await ctx.emit(ReasoningEvent(run_id=rs.run_id, text=part.text))
        if plan.hooks.after_model_call:
            await notify_answered(ctx, answer)
            await ctx.emit_all(ctx.take_events())
    return Outcome.FINALIZED
