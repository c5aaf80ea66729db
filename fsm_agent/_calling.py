"""The ``calling`` state: one model call, streamed or not, after the backoff of a retry."""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator

from ._context import ONE_REQUEST, Interrupted, RunContext
from .errors import (
    ContextWindowExceededError,
    FsmAgentError,
    MalformedResponseError,
    ModelError,
)
from .events import (
    Event,
    ModelRequestEvent,
    ModelResponseEvent,
    ReasoningDeltaEvent,
    ReasoningEvent,
    RetryingEvent,
    TextDeltaEvent,
    TextEvent,
    ToolCallDeltaEvent,
    UsageEvent,
)
from .messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    trusted,
)
from .policy import backoff_delay
from .table import Outcome, State
from .tool_output import trim_old_outputs

__all__ = ["handle_calling"]

_FINISH_OUTCOMES = {
    FinishReason.STOP: Outcome.STOP,
    FinishReason.TOOL_CALLS: Outcome.TOOL_CALLS,
    FinishReason.LENGTH: Outcome.LENGTH,
    FinishReason.CONTENT_FILTER: Outcome.CONTENT_FILTER,
    FinishReason.ERROR: Outcome.FINISH_ERROR,
    FinishReason.OTHER: Outcome.OTHER,
}


# -- calling ---------------------------------------------------------------------------------
def _classify(ctx: RunContext, exc: BaseException) -> Outcome:
    """Retryable or fatal, by the error and the retry policy."""
    if isinstance(exc, ContextWindowExceededError):
        return Outcome.LENGTH
    if not isinstance(exc, ModelError) or not exc.retryable:
        return Outcome.FATAL_ERROR
    retry = ctx.agent.policy.retry
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


async def handle_calling(ctx: RunContext) -> AsyncIterator[Event]:
    """One model call (after the backoff when this is a retry)."""
    rs = ctx.rs
    agent = ctx.agent
    run_id = rs.run_id
    move = ctx.last_move
    try:
        if move is not None and move.source is State.CALLING:
            error = ctx.last_error
            after = error.retry_after if isinstance(error, ModelError) else None
            delay = backoff_delay(
                agent.policy.retry, rs.counters.retries, after, agent.runtime.random
            )
            if ctx.listening:
                yield RetryingEvent(
                    run_id=run_id,
                    attempt=rs.counters.retries,
                    delay_s=delay or 0.0,
                    error=str(error),
                )
                if ctx.interrupt is not None:  # the listener may have cancelled
                    raise Interrupted
            deadline = ctx.deadline
            if deadline is not None:  # never sleep past the wall-clock limit
                delay = min(delay or 0.0, max(0.0, deadline - agent.runtime.clock()))
            await ctx.effect(agent.runtime.sleep(delay or 0.0))
            if deadline is not None and agent.runtime.clock() >= deadline:
                ctx.outcome = Outcome.DEADLINE
                return
        output_limits = agent.policy.tool_output
        if output_limits.keep_recent is not None:
            trim_old_outputs(ctx, output_limits.keep_recent, output_limits.old_max_chars)
        tools = agent.tool_definitions
        if rs.tool_outputs and agent.pager is not None:  # offer paging once outputs were cut
            tools = (*tools, agent.pager.definition)
        request = trusted(
            ModelRequest,
            {
                "messages": tuple(rs.messages),
                "tools": tools,
                "tool_choice": None,
                "parallel_tool_calls": agent.policy.parallel_tool_calls if tools else None,
                "max_tokens": None,
                "temperature": None,
                "stop_sequences": (),
                "reasoning_effort": None,
                "reasoning_budget_tokens": None,
            },
        )
        supplied: ModelResponse | None = None  # by a hook, instead of calling the model
        if agent.hooks.before_model_call:
            changed = await ctx.effect(agent.hooks.run_before_model_call(ctx, request))
            if ctx.listening:
                for event in ctx.take_events():
                    yield event
            if ctx.interrupt is not None:
                raise Interrupted
            if isinstance(changed, ModelResponse):
                supplied = changed
            else:
                request = changed
        if ctx.listening and supplied is None:
            yield ModelRequestEvent(
                run_id=run_id,
                step=rs.counters.steps + 1,
                attempt=rs.counters.retries + 1,
                request=request,
            )
            if ctx.interrupt is not None:
                raise Interrupted
        if supplied is None:
            rs.model_calls += 1
        response: ModelResponse | None = supplied
        key: str | None = None  # the call's journal key, when a checkpointer records it
        recorded: ModelResponse | ModelError | None = None  # its outcome in an earlier process
        if supplied is None and ctx.durable is not None:
            key, recorded = ctx.durable.begin_model_call(rs)
        try:
            if recorded is not None:
                if isinstance(recorded, ModelError):
                    raise recorded
                response = recorded
            elif supplied is None and ctx.listening and agent.streams:
                async for item in _stream(ctx, request):
                    if isinstance(item, ModelResponse):
                        response = item
                    else:
                        yield item
            elif supplied is None:
                response = await ctx.effect(agent.model.complete(request))
            if not isinstance(response, ModelResponse):
                raise MalformedResponseError(
                    f"the model returned {type(response).__name__}, not a ModelResponse"
                )
        except (Interrupted, asyncio.CancelledError):
            raise
        except Exception as exc:
            if key is not None and ctx.durable is not None:
                ctx.durable.model_failed(key, exc)
            ctx.outcome = _classify(ctx, exc)
            ctx.last_error = ctx.error = (
                exc
                if isinstance(exc, FsmAgentError)
                else ModelError(f"the model raised {type(exc).__name__}: {exc}")
            )
            return
    except Interrupted:
        ctx.outcome = ctx.interrupt
        return
    if key is not None and ctx.durable is not None:
        ctx.durable.model_answered(key, response)
    ctx.error = None  # a successful call: earlier retried errors no longer explain an ending
    # A provider that reports no request count made one all the same (a hook's answer made none).
    unreported = 0 if response.usage.requests or supplied is not None else 1
    rs.usage = rs.usage.plus(response.usage, requests=unreported)
    # Context budget: the provider's count of the request replaces the estimate (compaction).
    if response.usage.input_tokens and agent.policy.compaction.use_reported_usage:
        rs.context_tokens = response.usage.input_tokens
    message = response.message
    calls = message.tool_calls
    outcome = _FINISH_OUTCOMES[response.finish_reason]
    if calls and outcome in (Outcome.STOP, Outcome.OTHER):
        outcome = Outcome.TOOL_CALLS  # tool calls present: they are what the model wants
    elif outcome is Outcome.TOOL_CALLS and not calls:
        outcome = Outcome.FINISH_ERROR  # says tool_calls, made none
    rs.last_text = message.text.strip()
    if outcome in (Outcome.TOOL_CALLS, Outcome.STOP, Outcome.OTHER, Outcome.CONTENT_FILTER):
        if outcome is not Outcome.TOOL_CALLS and calls:
            message = Message.model_construct(
                role=message.role,
                parts=tuple(p for p in message.parts if not isinstance(p, ToolCall)),
            )
            calls = []
        elif calls:
            fixed = _unique_ids(message, calls, rs.counters.steps + 1)
            if fixed is not message:
                message, calls = fixed, fixed.tool_calls
        if message.parts:
            ctx.append(message)
        rs.pending_tool_calls = calls
    elif outcome is Outcome.FINISH_ERROR:
        ctx.last_error = MalformedResponseError(
            f"the model reported finish reason {response.raw_finish_reason or 'error'!r}"
        )
        ctx.error = ctx.last_error
    ctx.outcome = outcome
    if ctx.listening:
        yield ModelResponseEvent(run_id=run_id, step=rs.counters.steps + 1, response=response)
        call_usage = response.usage + ONE_REQUEST if unreported else response.usage
        yield UsageEvent(run_id=run_id, call=call_usage, total=rs.usage)
        for part in message.reasoning:
            yield ReasoningEvent(run_id=run_id, text=part.text)
        if rs.last_text and (
            outcome is Outcome.TOOL_CALLS or (outcome is Outcome.STOP and agent.limits.verification)
        ):
            yield TextEvent(run_id=run_id, text=rs.last_text)
    if agent.hooks.after_model_call:
        # On an interrupt the outcome stands; the driver takes it before the next handler.
        with contextlib.suppress(Interrupted):
            await ctx.effect(
                agent.hooks.notify(
                    ctx,
                    agent.hooks.after_model_call,
                    request=request,
                    response=response,
                    run_state=rs,
                )
            )
        if ctx.listening:
            for event in ctx.take_events():
                yield event


async def _stream(ctx: RunContext, request: ModelRequest) -> AsyncIterator[Event | ModelResponse]:
    """Stream a call: delta events as they arrive, then the response as the last item."""
    run_id = ctx.rs.run_id
    stream = ctx.agent.model.stream(request).__aiter__()  # type: ignore[attr-defined]
    response: ModelResponse | None = None
    try:
        while True:
            try:
                item = await ctx.effect(anext(stream))
            except StopAsyncIteration:
                break
            if isinstance(item, ModelResponse):
                response = item
            elif isinstance(item, TextDelta):
                yield TextDeltaEvent(run_id=run_id, text=item.text)
            elif isinstance(item, ReasoningDelta):
                yield ReasoningDeltaEvent(run_id=run_id, text=item.text)
            elif isinstance(item, ToolCallDelta):
                yield ToolCallDeltaEvent(
                    run_id=run_id,
                    index=item.index,
                    call_id=item.id,
                    name=item.name,
                    arguments_fragment=item.arguments_fragment,
                )
            if ctx.interrupt is not None:
                raise Interrupted
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
    if response is None:
        raise MalformedResponseError("the stream ended without a final response")
    yield response
