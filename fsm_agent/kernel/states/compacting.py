"""The ``compacting`` state: inject pending feedback, then keep the context within its budget.

The check is O(1): the run keeps its token count current as messages join (and the provider's
count replaces it after every call), so a step that needs no compaction reads two numbers.
When that count and the tokenizer's sum over the history differ (the provider corrected it),
compaction scales its goal and its result by their ratio: an underestimate is corrected again
by the next call, where an overestimate could end a run that still fits.
Compaction itself runs the agent's :class:`~fsm_agent.compaction.Compactor` when the count is
above the budget, when the message window is full, or when forced by a ``length`` finish or a
context-window error. Its outcome:

- ``proceed``: within budget, or only the message window was full and nothing could go;
- ``compacted``: the history is shorter and within budget (counts an attempt);
- ``cannot_compact``: over budget (or forced) and the attempts are spent, nothing could be
  removed, or what remains is still over budget.
"""

from __future__ import annotations

from ...compaction import CompactionJob, CompactionResult, ModelCall
from ...machine.table import Outcome
from ...models import Model
from ...run.events import CompactedEvent, Event, ModelRequestEvent, UsageEvent
from ...values.messages import Message, ModelRequest, ModelResponse
from ..context import ONE_REQUEST, Interrupted, RunContext
from .model_call import checked, current_model

__all__ = ["FEEDBACK_PREFIX", "compacting_needs_nothing", "handle_compacting"]

# Enum members read on every step, bound once: on Python 3.11 each read of one goes through
# the enum's class attribute lookup (docs/performance.md, the traps).
_PROCEED, _LENGTH = Outcome.PROCEED, Outcome.LENGTH

FEEDBACK_PREFIX = "Previous attempt was not complete. Feedback: "


def compacting_needs_nothing(ctx: RunContext) -> Outcome | None:
    """The fast path of most steps: ``proceed`` when there is no feedback to inject and the
    context is within budget and window (the handler would do nothing), else ``None``."""
    rs = ctx.rs
    if rs.feedback is not None:
        return None
    move = ctx.last_move
    if move is not None and move.outcome is _LENGTH:
        return None
    settings = ctx.plan.settings
    limit = settings.compact_above
    if limit is not None and rs.context_tokens > limit:
        return None
    max_messages = settings.max_messages
    if max_messages is not None and len(rs.messages) > max_messages:
        return None
    return _PROCEED


async def handle_compacting(ctx: RunContext) -> Outcome:
    """Inject pending feedback, then compact when over budget, over the message window, or
    forced by ``length``."""
    rs = ctx.rs
    plan = ctx.plan
    if rs.feedback is not None:
        ctx.append(Message.user(FEEDBACK_PREFIX + rs.feedback))
        rs.feedback = None
    move = ctx.last_move
    forced = move is not None and move.outcome is Outcome.LENGTH
    settings = plan.policy.compaction
    limit = plan.settings.compact_above
    tokens = rs.context_tokens
    over = limit is not None and tokens > limit
    max_messages = plan.settings.max_messages
    crowded = max_messages is not None and len(rs.messages) > max_messages
    if not (forced or over or crowded):
        return Outcome.PROCEED
    needed = forced or over
    if rs.counters.compactions >= plan.policy.max_compaction_attempts:
        return Outcome.CANNOT_COMPACT if needed else Outcome.PROCEED

    goal: int | None = None
    if needed:
        goal = tokens // 2 if limit is None else int(limit * settings.target)
        if forced:
            goal = min(goal, tokens // 2)  # a forced compaction at least halves the context
    compactor = plan.compactor
    thread = compactor.count(rs.messages)
    scale = tokens / thread.tokens if thread.tokens else 1.0  # the provider's correction
    events: list[Event] = []  # the compaction's model calls', emitted once it ends
    job = CompactionJob(
        target=None if goal is None else int(goal / scale),
        max_messages=None
        if max_messages is None or not crowded
        else max(2, int(max_messages * settings.target)),
        keep_recent=settings.keep_recent_messages,
        forced=forced,
        tokenizer=compactor.tokenizer,
        complete=_summary_caller(ctx, events),
    )
    try:
        result = await compactor.compact(thread, job)
    except Interrupted:
        await ctx.emit_all(events)
        return ctx.interrupted
    await ctx.emit_all(events)
    if not result.changed:
        return Outcome.CANNOT_COMPACT if needed else Outcome.PROCEED
    rs.messages = list(result.messages)
    rs.context_tokens = int(result.tokens_after * scale)
    fits = limit is None or rs.context_tokens <= limit
    if ctx.listening:
        await ctx.emit(_compacted_event(ctx, result, forced=forced, tokens_before=tokens))
    return Outcome.COMPACTED if fits or not needed else Outcome.CANNOT_COMPACT


def _summary_caller(ctx: RunContext, events: list[Event]) -> ModelCall:
    """What a compaction strategy calls to ask a model (a summary): counted as the run's
    model call, journaled, its usage added; its events go into ``events``."""
    rs = ctx.rs

    async def complete(request: ModelRequest, model: Model | None = None) -> ModelResponse:
        rs.model_calls += 1
        if ctx.durable is not None:
            await ctx.durable.before_call()
        if ctx.listening:
            events.append(
                ModelRequestEvent(
                    run_id=rs.run_id, step=rs.counters.steps, attempt=1, request=request
                )
            )
        response = checked(await ctx.effect((model or current_model(ctx)).complete(request)))
        call_usage = response.usage if response.usage.requests else response.usage + ONE_REQUEST
        rs.usage = rs.usage + call_usage
        if ctx.listening:
            events.append(UsageEvent(run_id=rs.run_id, call=call_usage, total=rs.usage))
        return response

    return complete


def _compacted_event(
    ctx: RunContext, result: CompactionResult, *, forced: bool, tokens_before: int
) -> CompactedEvent:
    """The event of a compaction that changed the history."""
    return CompactedEvent(
        run_id=ctx.rs.run_id,
        strategy=result.strategy,
        forced=forced,
        tokens_before=tokens_before,
        tokens_after=ctx.rs.context_tokens,
        messages_removed=result.removed,
        errors=result.errors,
    )
