"""The run's side of handoffs (declared in :mod:`fsm_agent.kernel.handoffs`): a tool turn
whose call handed off gives the conversation to the target, which then makes the run's model
turns under the plan the run's own plan compiles for it
(:func:`~fsm_agent.kernel.plan.handoff_plan`); a resumed run continues under the agent that
held it.
"""

from __future__ import annotations

from typing import Any

from ..errors import HandoffError, InvalidInputError
from ..machine.table import Outcome
from ..run.events import HandoffEvent
from ..run.state import HandoffChange
from ..values.messages import Message, Role, validate_history
from ..values.model_settings import merge_settings
from .context import RunContext
from .handoffs import HANDED_OVER, Handoff, holder
from .plan import RunOwner, handoff_plan

__all__ = ["enter_agent", "hand_off", "resumed_agent"]


def _taken(ctx: RunContext) -> tuple[Handoff[Any], str] | None:
    """The handoff the turn makes: its first handoff call that succeeded, with the call id."""
    handoffs = ctx.plan.handoffs
    for result in ctx.rs.tool_results:
        if result.name in handoffs and not result.is_error:
            return handoffs[result.name], result.call_id
    return None


async def hand_off(ctx: RunContext, outcome: Outcome) -> Outcome:
    """End a tool turn of an agent with handoffs: record the turn's results and, when one of
    its calls handed off, give the conversation to the target (its system prompt, the
    conversation through the handoff's filter, its plan). Returns the turn's ``outcome``, or
    ``tool_abort`` (with a :class:`HandoffError`) when the filter fails."""
    taken = _taken(ctx)
    ctx.close_pending_calls("")
    if taken is None:
        return outcome
    handoff, call_id = taken
    rs = ctx.rs
    try:
        messages = _filtered(handoff, tuple(m for m in rs.messages if m.role is not Role.SYSTEM))
    except HandoffError as error:
        ctx.error = error
        return Outcome.TOOL_ABORT
    source = rs.agent
    step = rs.counters.steps
    change = HandoffChange(
        source=source, dest=handoff.name, call_id=call_id, step=step, move=len(rs.trace)
    )
    rs.handoff_trace = (*rs.handoff_trace, change)
    enter_agent(ctx, handoff.name, handoff.agent)
    system = ctx.plan.system_message
    rs.messages = []
    rs.context_tokens = 0
    for message in ([system] if system is not None else []) + messages:
        ctx.append(message)
    last = messages[-1] if messages else None
    if last is None or (last.role is Role.ASSISTANT and not last.tool_calls):
        # A filter left no turn for the target to answer (an answer last reads as one cut
        # short, to be continued): say whose turn it is.
        ctx.append(Message.user(HANDED_OVER.format(name=handoff.name)))
    if ctx.listening:
        await ctx.emit(
            HandoffEvent(
                run_id=rs.run_id,
                source=source,
                dest=handoff.name,
                call_id=call_id,
                step=step,
            )
        )
    return outcome


def _filtered(handoff: Handoff[Any], conversation: tuple[Message, ...]) -> list[Message]:
    """The messages the target sees after its system prompt (raises :class:`HandoffError` when
    the filter raises or returns a history that is not valid)."""
    chosen = handoff.input_filter
    if chosen is None:
        return list(conversation)
    try:
        messages = list(chosen(conversation))
        validate_history(messages)
    except InvalidInputError as exc:
        raise HandoffError(
            f"the input filter of handoff {handoff.name!r} returned an invalid history ({exc}); "
            "return messages that keep every tool call with its one result",
            handoff=handoff.name,
        ) from exc
    except Exception as exc:
        raise HandoffError(
            f"the input filter of handoff {handoff.name!r} raised {type(exc).__name__}: {exc}",
            handoff=handoff.name,
        ) from exc
    return [m for m in messages if m.role is not Role.SYSTEM]


def enter_agent(ctx: RunContext, name: str | None, agent: RunOwner) -> None:
    """Make ``agent`` (called ``name``; ``None``: the run's own) the one the run's next model
    turns are made by: its plan under the run's policy, its tokenizer and model settings."""
    ctx.rs.agent = name
    plan = handoff_plan(ctx.origin, agent)
    ctx.plan = plan
    ctx.count_tokens = plan.compactor.tokenizer
    ctx.model_settings = merge_settings(agent.model_settings)


def resumed_agent(ctx: RunContext) -> None:
    """A resumed run that a handoff gave to another agent: continue under that agent (raises
    like :func:`holder`)."""
    found = holder(ctx.origin.parts, ctx.rs)
    if found is not None:
        enter_agent(ctx, found.name, found.agent)
