"""The ``calling`` state: one model call, streamed or not, after the backoff of a retry.

The model call is a boundary with one rule: a :class:`~fsm_agent.ModelError` becomes an
outcome (retry, fatal, or ``length`` for a context overflow) and is recorded in the journal;
anything else (a checkpoint store that fails, a bug in a model adapter) goes on unchanged, so a
store failure stops the run with that error and the last good checkpoint stays as it was. A
:class:`asyncio.CancelledError` is never converted here: only the run's own interrupt becomes
an outcome (see :meth:`~fsm_agent.kernel.context.RunContext.effect`). The call itself, which
the step-limit summary of ``finalizing`` makes too, is :mod:`~fsm_agent.kernel.states.model_call`.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable

from ...errors import (
    ContextWindowExceededError,
    MalformedResponseError,
    ModelError,
)
from ...machine.agent_machine import Move
from ...machine.table import Outcome, State
from ...policy import backoff_delay
from ...run.events import (
    AttemptDiscardedEvent,
    ModelResponseEvent,
    ModelSwitchedEvent,
    ReasoningEvent,
    RetryingEvent,
    TextEvent,
    UsageEvent,
)
from ...tools.output import trim_old_outputs
from ...values.define import builder
from ...values.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    ToolCall,
)
from ...values.model_settings import settings_request
from ..context import Interrupted, RunContext
from ..phasing import move_by_budget
from .model_call import (
    Answer,
    answer_quietly,
    call_model,
    checked,
    current_model,
    model_name,
    notify_answered,
)

# ``checked`` and ``current_model`` live with the shared model call; they are named here too,
# where they were before it moved.
__all__ = ["CONTINUE_PROMPT", "checked", "current_model", "handle_calling"]

_FINISH_OUTCOMES = {
    FinishReason.STOP: Outcome.STOP,
    FinishReason.TOOL_CALLS: Outcome.TOOL_CALLS,
    FinishReason.LENGTH: Outcome.LENGTH,
    FinishReason.CONTENT_FILTER: Outcome.CONTENT_FILTER,
    FinishReason.ERROR: Outcome.FINISH_ERROR,
    FinishReason.OTHER: Outcome.OTHER,
}
_new_request = builder(ModelRequest)  # one per model call: see builder()


_ANSWERS = frozenset({Outcome.STOP, Outcome.OTHER})  # answers that tool calls override
_KEPT = frozenset(
    {Outcome.TOOL_CALLS, Outcome.STOP, Outcome.OTHER, Outcome.CONTENT_FILTER, Outcome.OUTPUT_CUT}
)
"""Outcomes whose message joins the history."""
# Enum members read on every step, bound once: on Python 3.11 each read of one goes through
# the enum's class attribute lookup (docs/performance.md, the traps).
_TOOL_CALLS, _OTHER, _LENGTH = Outcome.TOOL_CALLS, Outcome.OTHER, Outcome.LENGTH
_USER, _ASSISTANT = Role.USER, Role.ASSISTANT
_CALLING = State.CALLING
CONTINUE_PROMPT = (
    "Your previous answer was cut off by the output token limit. Continue exactly where it "
    "stopped, without repeating anything."
)
"""The user turn that asks for the rest of an answer the output cap cut."""


def _output_cut(ctx: RunContext, output_tokens: int) -> bool:
    """A ``length`` finish with room left in the context: the output cap cut the answer (near
    the context budget, or with no known budget and a context-window error, it is context
    pressure and compaction's case)."""
    limit = ctx.plan.settings.compact_above
    return limit is None or ctx.rs.context_tokens + output_tokens < limit


def _cut_answer(messages: list[Message]) -> str | None:
    """The text of the cut answer this call continues, if it continues one."""
    if len(messages) < 2 or messages[-1].role is not _USER:
        return None
    if messages[-1].text != CONTINUE_PROMPT or messages[-2].role is not _ASSISTANT:
        return None
    return messages[-2].text


# -- calling ---------------------------------------------------------------------------------
def _classify(ctx: RunContext, exc: ModelError) -> Outcome:
    """Retryable or fatal, by the error and the retry policy."""
    if isinstance(exc, ContextWindowExceededError):
        return Outcome.LENGTH
    falls_back_on = ctx.plan.falls_back_on
    if falls_back_on is not None and falls_back_on(exc):
        return Outcome.FALLBACK  # the rows hand the call to the next model (or retry the last)
    if not exc.retryable:
        return Outcome.FATAL_ERROR
    retry = ctx.plan.policy.retry
    if exc.status_code is not None and exc.status_code not in retry.retryable_statuses:
        return Outcome.FATAL_ERROR
    after = exc.retry_after
    if (
        after is not None
        and retry.honour_retry_after
        and (not math.isfinite(after) or after > retry.max_delay_s)
    ):
        return Outcome.FATAL_ERROR  # the server asks for a longer wait than the policy allows
    return Outcome.RETRYABLE_ERROR


def _unique_ids(message: Message, calls: list[ToolCall], step: int) -> Message:
    """The message with every tool call id present and unique (models do repeat them);
    ``calls`` are its tool calls."""
    if len(calls) == 1:
        if calls[0].id:
            return message
    else:
        ids = [c.id for c in calls]
        if all(ids) and len(set(ids)) == len(ids):
            return message
    seen: set[str] = set()
    parts = []
    for index, part in enumerate(message.parts):
        if isinstance(part, ToolCall):
            new_id = part.id or f"call_{step}_{index}"
            while new_id in seen:
                new_id = f"{new_id}_{index}"
            seen.add(new_id)
            part = part.model_copy(update={"id": new_id})
        parts.append(part)
    return message.model_copy(update={"parts": tuple(parts)})


async def handle_calling(ctx: RunContext) -> Outcome:
    """One model call (after the backoff when this is a retry)."""
    move = ctx.last_move
    try:
        if move is not None and move.source is _CALLING:  # a retry, or the next model's turn
            waited = await _wait_before(ctx, move)
            if waited is not None:
                return waited
        request = _request(ctx)
        try:
            answer = await _ask(ctx, request)
        except ModelError as exc:  # only a model's error is an outcome; the rest goes on
            ctx.last_error = ctx.error = exc
            return _classify(ctx, exc)
    except Interrupted:
        return ctx.interrupted
    response = answer.response
    ctx.error = None  # a successful call: earlier retried errors no longer explain an ending
    # Context budget: the provider's count of the request replaces the estimate (compaction).
    input_tokens = response.usage.input_tokens
    if input_tokens and ctx.plan.settings.use_reported_usage:
        ctx.rs.context_tokens = input_tokens
    message = response.message
    calls = message.tool_calls
    outcome = _outcome_of(ctx, response, calls)
    if outcome in _KEPT:
        message = _keep(ctx, message, calls, outcome)
    elif outcome is Outcome.FINISH_ERROR:
        ctx.last_error = MalformedResponseError(
            f"the model reported finish reason {response.raw_finish_reason or 'error'!r}"
        )
        ctx.error = ctx.last_error
    if ctx.listening:
        await _emit_answer(ctx, answer, message, outcome)
    if ctx.plan.hooks.after_model_call:
        await notify_answered(ctx, answer)
        await ctx.emit_all(ctx.take_events())
    return outcome


async def _wait_before(ctx: RunContext, move: Move) -> Outcome | None:
    """Before a call that follows a failed one (``move``): the next model's switch, or the
    retry's backoff (never past the wall-clock deadline: ``deadline`` when it passed
    meanwhile)."""
    if move.row in ctx.plan.switch_rows:
        await _switched(ctx)  # the next model takes the call at once
        return None
    rs = ctx.rs
    error = ctx.last_error
    after = error.retry_after if isinstance(error, ModelError) else None
    delay = backoff_delay(ctx.plan.policy.retry, rs.counters.retries, after, ctx.runtime.random)
    if ctx.listening:  # the failed attempt streamed to the listener: withdraw it
        await ctx.emit(AttemptDiscardedEvent(run_id=rs.run_id, attempt=rs.counters.retries))
        await ctx.emit(
            RetryingEvent(
                run_id=rs.run_id,
                attempt=rs.counters.retries,
                delay_s=delay or 0.0,
                error=str(error),
            )
        )
        if ctx.interrupt is not None:  # the listener may have cancelled
            raise Interrupted
    deadline = ctx.deadline
    if deadline is not None:  # never sleep past the wall-clock limit
        delay = min(delay or 0.0, max(0.0, deadline - ctx.runtime.clock()))
    await ctx.effect(ctx.runtime.sleep(delay or 0.0))
    if deadline is not None and ctx.runtime.clock() >= deadline:
        return Outcome.DEADLINE
    return None


def _request(ctx: RunContext) -> ModelRequest:
    """The request of this call: the thread (a continuation turn added after an output cut,
    old outputs trimmed), the tools on offer, the model settings."""
    rs = ctx.rs
    plan = ctx.plan
    settings = plan.settings
    last = rs.messages[-1] if rs.messages else None
    if last is not None and last.role is _ASSISTANT and not last.tool_calls:
        ctx.append(Message.user(CONTINUE_PROMPT))  # a continuation turn after an output cut
    if settings.keep_recent_outputs is not None:
        trim_old_outputs(
            ctx.rs,
            ctx.count_tokens,
            settings.keep_recent_outputs,
            settings.old_output_max_chars,
        )
    phases = plan.phases
    if phases is None:
        tools = plan.tool_definitions
        messages = tuple(rs.messages)
    else:  # the current phase's tools and instructions
        move_by_budget(ctx, phases)
        tools = phases.tools_of[phases.settle(rs)]
        messages = phases.messages(rs)
    if rs.tool_outputs and plan.pager is not None:  # offer paging once outputs were cut
        tools = (*tools, plan.pager.definition)
    model_settings = ctx.model_settings
    if model_settings is None:
        return _new_request(
            messages=messages,
            tools=tools,
            parallel_tool_calls=settings.parallel_tool_calls if tools else None,
            output=plan.output_schema,
        )
    return settings_request(
        model_settings,
        messages,
        tools,
        parallel_tool_calls=settings.parallel_tool_calls,
        first_turn=not rs.counters.steps,
        output=plan.output_schema,
    )


def _ask(ctx: RunContext, request: ModelRequest) -> Awaitable[Answer]:
    """The model's answer to ``request``: streamed and observed when someone listens or a
    hook sees the call, else the call itself (the hot path)."""
    if ctx.listening or ctx.plan.hooks.before_model_call:
        rs = ctx.rs
        return call_model(
            ctx,
            request,
            step=rs.counters.steps + 1,
            attempt=rs.counters.retries + 1,
            stream=True,
        )
    return answer_quietly(ctx, request)


def _outcome_of(ctx: RunContext, response: ModelResponse, calls: list[ToolCall]) -> Outcome:
    """The outcome a response with these tool calls reports (tool calls win over an answer);
    records its text as the run's last (joined to the cut answer it continues)."""
    rs = ctx.rs
    message = response.message
    outcome = _FINISH_OUTCOMES[response.finish_reason]
    if outcome is _TOOL_CALLS:
        if not calls:
            outcome = Outcome.FINISH_ERROR  # says tool_calls, made none
    elif calls and outcome in _ANSWERS:
        outcome = _TOOL_CALLS  # tool calls present: they are what the model wants
    elif outcome is _LENGTH and _output_cut(ctx, response.usage.output_tokens):
        outcome = Outcome.OUTPUT_CUT
    rs.last_text = message.text.strip()
    # An answer that ends the run on `other` keeps what the provider said; any other turn
    # clears it, so a later answer does not carry an earlier turn's reason.
    rs.raw_finish_reason = response.raw_finish_reason if outcome is _OTHER else None
    cut = _cut_answer(rs.messages)
    if cut is not None:  # a continuation: the answer so far is the cut part and this one
        rs.last_text = (cut + message.text).strip()
    return outcome


def _keep(ctx: RunContext, message: Message, calls: list[ToolCall], outcome: Outcome) -> Message:
    """Add the answer to the history (its tool ``calls``, with unique ids, only when they are
    the outcome) and make them the pending calls; the message as kept."""
    if outcome is not _TOOL_CALLS and calls:
        message = Message(
            role=message.role,
            parts=tuple(p for p in message.parts if not isinstance(p, ToolCall)),
        )
        calls = []
    elif calls:
        fixed = _unique_ids(message, calls, ctx.rs.counters.steps + 1)
        if fixed is not message:
            message, calls = fixed, fixed.tool_calls
    if message.parts:
        ctx.append(message)
    ctx.rs.pending_tool_calls = calls
    return message


async def _emit_answer(ctx: RunContext, answer: Answer, message: Message, outcome: Outcome) -> None:
    """The answer's events: the response, the usage, the reasoning, the text beside tool
    calls."""
    rs = ctx.rs
    run_id = rs.run_id
    await ctx.emit(
        ModelResponseEvent(run_id=run_id, step=rs.counters.steps + 1, response=answer.response)
    )
    await ctx.emit(UsageEvent(run_id=run_id, call=answer.call_usage, total=rs.usage))
    for part in message.reasoning:
        await ctx.emit(ReasoningEvent(run_id=run_id, text=part.text))
    # Text beside tool calls is intermediate; an answer going to the verifier gets its
    # text event in verifying only if rejected (the accepted answer is the final event's).
    if rs.last_text and outcome is Outcome.TOOL_CALLS:
        await ctx.emit(TextEvent(run_id=run_id, text=rs.last_text))


async def _switched(ctx: RunContext) -> None:
    """Tell the listener the failed attempt is withdrawn and which model takes the call."""
    if not ctx.listening:
        return
    rs = ctx.rs
    switches = rs.counters.model_switches
    models = ctx.plan.models
    await ctx.emit(AttemptDiscardedEvent(run_id=rs.run_id, attempt=rs.counters.retries + 1))
    await ctx.emit(
        ModelSwitchedEvent(
            run_id=rs.run_id,
            from_model=model_name(models[switches - 1]),
            to_model=model_name(models[switches]),
            switches=switches,
            error=str(ctx.last_error),
        )
    )
    if ctx.interrupt is not None:  # the listener may have cancelled
        raise Interrupted
