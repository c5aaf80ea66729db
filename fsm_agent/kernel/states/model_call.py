"""One model call, shared by the ``calling`` state and the step-limit summary of
``finalizing``: the ``before_model_call`` hooks, the request event, the effect journal, the call
itself (streamed when someone listens), the run's usage and the ``after_model_call`` hooks.

A :class:`~fsm_agent.ModelError` is journalled and raised on to the state that made the call,
which turns it into an outcome; anything else goes on unchanged. A
:class:`asyncio.CancelledError` is never converted here: only the run's own interrupt becomes
:class:`~fsm_agent.kernel.context.Interrupted` (see
:meth:`~fsm_agent.kernel.context.RunContext.effect`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, NamedTuple

from ...errors import (
    MalformedResponseError,
    ModelError,
)
from ...models import Model
from ...run.events import (
    ModelRequestEvent,
    PartialOutputEvent,
    ReasoningDeltaEvent,
    TextDeltaEvent,
    ToolCallDeltaEvent,
)
from ...values.messages import (
    ModelRequest,
    ModelResponse,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from ..context import ONE_REQUEST, Interrupted, RunContext
from ..limits import usage_fault

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = [
    "Answer",
    "answer_quietly",
    "call_model",
    "checked",
    "current_model",
    "model_name",
    "notify_answered",
]


def current_model(ctx: RunContext) -> Model:
    """The model that takes the run's calls: a fallback chain's ``models[model_switches]``."""
    models = ctx.plan.models
    if len(models) == 1:
        return models[0]
    return models[min(ctx.rs.counters.model_switches, len(models) - 1)]


def model_name(model: Model) -> str:
    """The model's name, or its class name when it has none."""
    return str(getattr(model, "name", type(model).__name__))


class Answer(NamedTuple):
    """What answered a model call: the request as the hooks left it, and the response (a
    tuple: built once per call on the kernel's hot path)."""

    request: ModelRequest
    response: ModelResponse
    unreported: int  # 1 when a call was made but its usage counts no request

    @property
    def call_usage(self) -> Usage:
        """The call's usage, counting the request the provider did not report."""
        return self.response.usage + ONE_REQUEST if self.unreported else self.response.usage


async def call_model(
    ctx: RunContext, request: ModelRequest, *, step: int, attempt: int, stream: bool
) -> Answer:
    """The seams every model call goes through: the ``before_model_call`` hooks (which may
    change the request or answer it), the request event, the effect journal (an outcome an
    earlier process recorded is reused), the call itself (streamed when ``stream`` and someone
    listens) and the run's usage. Emits the events; raises :class:`Interrupted`, or the call's
    error once the journal has it. With no hook and no listener this is
    :func:`answer_quietly`."""
    rs = ctx.rs
    plan = ctx.plan
    streamed = stream and ctx.listening and plan.streams
    if plan.hooks.before_model_call:
        changed = await ctx.effect(
            plan.hooks.run_before_model_call(ctx, request, current_model(ctx), streamed)
        )
        await ctx.emit_all(ctx.take_events())
        if ctx.interrupt is not None:
            raise Interrupted
        if isinstance(changed, ModelResponse):  # a hook's answer: no request is made
            rs.usage = rs.usage.plus(changed.usage)
            return Answer(request, changed, 0)
        request = changed
    if ctx.listening:
        await ctx.emit(
            ModelRequestEvent(run_id=rs.run_id, step=step, attempt=attempt, request=request)
        )
        if ctx.interrupt is not None:  # the listener may have cancelled
            raise Interrupted
    if not streamed:
        return await answer_quietly(ctx, request)
    key, recorded = await _begin(ctx)
    try:
        response = _replayed(recorded) if recorded is not None else await _stream(ctx, request)
    except ModelError as exc:
        await _failed(ctx, key, request, exc)
        raise
    return await _answered(ctx, key, request, response)


async def answer_quietly(ctx: RunContext, request: ModelRequest) -> Answer:
    """The call itself, with its journal entry and usage (see :func:`call_model`)."""
    durable = ctx.durable
    key: str | None = None
    recorded: ModelResponse | ModelError | None = None
    if durable is None:  # no journal to ask: the call is counted
        ctx.rs.model_calls += 1
    else:
        key, recorded = await _begin(ctx)
    try:
        if recorded is not None:
            response = _replayed(recorded)
        else:
            response = checked(await ctx.effect(current_model(ctx).complete(request)))
    except ModelError as exc:
        await _failed(ctx, key, request, exc)
        raise
    if durable is None:
        return _counted(ctx, request, response)
    return await _answered(ctx, key, request, response)


async def _begin(ctx: RunContext) -> tuple[str | None, ModelResponse | ModelError | None]:
    """Count the call; its journal key, and what an earlier process recorded for it."""
    ctx.rs.model_calls += 1
    if ctx.durable is None:
        return None, None
    return await ctx.durable.begin_model_call(ctx.rs)


def _replayed(recorded: ModelResponse | ModelError) -> ModelResponse:
    if isinstance(recorded, ModelError):
        raise recorded
    return recorded


def checked(response: object) -> ModelResponse:
    """``response`` if it is a ``ModelResponse`` whose usage can count (see
    :func:`usage_fault`), else a :class:`MalformedResponseError` saying what is wrong."""
    if not isinstance(response, ModelResponse):
        raise MalformedResponseError(
            f"the model returned {type(response).__name__}, not a ModelResponse"
        )
    fault = usage_fault(response.usage)
    if fault is not None:
        raise MalformedResponseError(f"the model's response was refused: {fault}")
    return response


async def _failed(ctx: RunContext, key: str | None, request: ModelRequest, exc: ModelError) -> None:
    """Journal the failed call, then tell the ``model_call_failed`` hooks (an interrupt
    while they run is the driver's to take, as after an answer)."""
    if key is not None and ctx.durable is not None:
        await ctx.durable.model_failed(key, exc, model=_chain_member(ctx))
    hooks = ctx.plan.hooks
    if hooks.model_call_failed:
        with contextlib.suppress(Interrupted):
            await ctx.effect(
                hooks.notify(
                    ctx, hooks.model_call_failed, request=request, error=exc, run_state=ctx.rs
                )
            )


def _chain_member(ctx: RunContext) -> str | None:
    """The name of the chain's model that takes the call (``None`` for a single model)."""
    return None if len(ctx.plan.models) == 1 else model_name(current_model(ctx))


async def _answered(
    ctx: RunContext, key: str | None, request: ModelRequest, response: ModelResponse
) -> Answer:
    """Journal the response and add its usage to the run's."""
    if ctx.durable is not None:
        response = await ctx.durable.model_answered(key, response, model=_chain_member(ctx))
    return _counted(ctx, request, response)


def _counted(ctx: RunContext, request: ModelRequest, response: ModelResponse) -> Answer:
    """Add the response's usage to the run's (and, in a chain, count which model answered)."""
    member = _chain_member(ctx)
    if member is not None:  # which model of the chain answered, kept in the run state
        answered = ctx.rs.answered_by
        answered[member] = answered.get(member, 0) + 1
    # A provider that reports no request count made one all the same.
    unreported = 0 if response.usage.requests else 1
    ctx.rs.usage = ctx.rs.usage.plus(response.usage, requests=unreported)
    return Answer(request, response, unreported)


async def notify_answered(ctx: RunContext, answer: Answer) -> None:
    """The ``after_model_call`` hooks. On an interrupt the answer stands: the driver takes the
    interrupt before the next handler."""
    hooks = ctx.plan.hooks
    with contextlib.suppress(Interrupted):
        await ctx.effect(
            hooks.notify(
                ctx,
                hooks.after_model_call,
                request=answer.request,
                response=answer.response,
                run_state=ctx.rs,
            )
        )


async def _stream(ctx: RunContext, request: ModelRequest) -> ModelResponse:
    """Stream a call: a delta event as each delta arrives; the response at the end."""
    run_id = ctx.rs.run_id
    stream = current_model(ctx).stream(request).__aiter__()  # type: ignore[attr-defined]
    response: ModelResponse | None = None
    spec = ctx.plan.output_spec if request.output is not None else None
    text: list[str] = []  # a typed answer's text so far, for its partial value
    partial: JsonValue = None
    try:
        while True:
            try:
                item = await ctx.effect(anext(stream))
            except StopAsyncIteration:
                break
            if isinstance(item, ModelResponse):
                response = item
            elif isinstance(item, TextDelta):
                await ctx.emit(TextDeltaEvent(run_id=run_id, text=item.text))
                if spec is not None:
                    text.append(item.text)
                    now = spec.partial("".join(text))
                    if now is not None and now != partial:
                        partial = now
                        await ctx.emit(PartialOutputEvent(run_id=run_id, partial=now))
            elif isinstance(item, ReasoningDelta):
                await ctx.emit(ReasoningDeltaEvent(run_id=run_id, text=item.text))
            elif isinstance(item, ToolCallDelta):
                await ctx.emit(
                    ToolCallDeltaEvent(
                        run_id=run_id,
                        index=item.index,
                        call_id=item.id,
                        name=item.name,
                        arguments_fragment=item.arguments_fragment,
                    )
                )
            if ctx.interrupt is not None:
                raise Interrupted
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
    if response is None:
        raise MalformedResponseError("the stream ended without a final response")
    return checked(response)
