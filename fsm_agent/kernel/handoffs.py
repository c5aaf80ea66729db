"""Handoffs: an agent ends its turn by handing the conversation to another agent, which
continues the same run under its own system prompt, tools, model and model settings.

The handoff graph is declared: ``Agent(..., handoffs=[Handoff(agent, name=..., ...)])`` offers
the model one tool per target, ``transfer_to_<name>``. A handoff is a call of a tool turn, so
it takes the loop's own rows: the turn ends ``tools_done`` (on to ``compacting``, or to
``finalizing`` when the steps are spent) and the next model turn is the target's. What stays
the run's is what the machine reads: the policy of the agent the run started with (its
limits, counters, usage, deadline, ``max_handoffs``), its checkpointer, hooks, verifier and
output type. ``RunState.agent`` names the agent holding the conversation and
``RunState.handoff_trace`` keeps every handoff, so a resumed run continues under the right
agent; a :class:`~fsm_agent.run.events.HandoffEvent` reports each.

A run without handoffs pays one attribute check per tool turn (``plan.handoffs``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, HandoffError, InvalidInputError
from ..machine.table import Outcome
from ..run.events import HandoffEvent
from ..run.state import HandoffChange, RunState
from ..tools import Tool, ToolContext
from ..values.messages import Message, Role, validate_history
from ..values.model_settings import merge_settings
from .context import RunContext

if TYPE_CHECKING:
    from .agent import Agent

__all__ = [
    "HANDED_OVER",
    "Handoff",
    "HandoffFilter",
    "HandoffTool",
    "by_tool_name",
    "declared",
    "declared_graph",
    "enter_agent",
    "graph_agents",
    "hand_off",
    "handoff_graph",
    "handoff_tools",
    "holder",
    "resumed_agent",
    "without_tool_calls",
]

HandoffFilter = Callable[[tuple[Message, ...]], Sequence[Message]]
"""A handoff's input filter: given the conversation (its system message left out), the messages
the target sees after its own system prompt. It must keep every tool call with its one result."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,48}")

HANDED_OVER = "(The conversation was handed to you, {name!r}: answer from here.)"
"""The message a target gets last when its input filter leaves nothing for it to answer (the
conversation ends with an answer, or is empty)."""


@dataclass(frozen=True, eq=False)
class Handoff:
    """A declared handoff to ``agent``: the model of the agent that declares it may call the
    tool ``transfer_to_<name>`` (described by ``description``) to give it the conversation.
    ``input_filter`` (default: none) chooses what of the conversation the target sees (see
    :func:`without_tool_calls`). ``name`` also names the target in the run state, the events
    and the bounds, so one name means one agent across a handoff graph."""

    agent: Agent[Any, Any]
    name: str
    description: str
    input_filter: HandoffFilter | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigurationError(
                f"handoff name {self.name!r} must be 1 to 48 letters, digits, '_' or '-' (it "
                "names the tool transfer_to_<name>)"
            )
        if not isinstance(self.description, str) or not self.description.strip():
            raise ConfigurationError(
                f"handoff {self.name!r} needs a description: the model reads it to decide when "
                "to hand the conversation over"
            )
        if self.input_filter is not None and not callable(self.input_filter):
            raise ConfigurationError(f"handoff {self.name!r}: input_filter must be callable")

    @property
    def tool_name(self) -> str:
        """The name of the tool the model calls to hand off: ``transfer_to_<name>``."""
        return f"transfer_to_{self.name}"


def without_tool_calls(messages: tuple[Message, ...]) -> list[Message]:
    """An input filter: the conversation without its tool calls and results (the target sees
    what the user and the agents said, not how the tools were used)."""
    kept = []
    for message in messages:
        if message.role is Role.TOOL:
            continue
        if message.tool_calls:
            parts = tuple(p for p in message.parts if p not in message.tool_calls)
            if not parts:
                continue
            message = message.model_copy(update={"parts": parts})
        kept.append(message)
    return kept


class HandoffTool(Tool):
    """The tool ``transfer_to_<name>`` of a :class:`Handoff`. Its call only asks: once the
    turn's calls have ended, the first of the turn's handoff calls that succeeded gives the
    conversation to its target (:func:`hand_off`). A call past ``Policy.max_handoffs``, or after
    an earlier handoff call of the same turn, gets an error result and hands nothing off."""

    def __init__(self, handoff: Handoff) -> None:
        name = handoff.name

        async def transfer(context: ToolContext[Any]) -> str:
            # The run's cancel check is a method of its context: the run that made the call.
            ctx = getattr(context.cancel_requested, "__self__", None)
            if not isinstance(ctx, RunContext):
                raise HandoffError(
                    f"the handoff {name!r} runs inside an agent's run only", handoff=name
                )
            _refuse(ctx, context.call_id, name)
            return f"Handed the conversation to {name!r}; it answers from the next turn."

        super().__init__(
            transfer,
            name=handoff.tool_name,
            description=handoff.description,
            idempotent=True,
        )
        self.handoff = handoff

    def __repr__(self) -> str:
        return f"HandoffTool({self.name!r})"


def _refuse(ctx: RunContext, call_id: str, name: str) -> None:
    """Raise :class:`HandoffError` (the call's error result) when this call may not hand off."""
    limit = ctx.plan.policy.max_handoffs
    made = len(ctx.rs.handoff_trace)
    if limit is not None and made >= limit:
        raise HandoffError(
            f"the run's handoff limit (Policy.max_handoffs={limit}) is reached; answer the user "
            "yourself",
            handoff=name,
        )
    handoffs = ctx.plan.handoffs
    for call in ctx.rs.pending_tool_calls:
        if call.id == call_id:
            return
        if call.name in handoffs:
            raise HandoffError(
                "an earlier call of this turn already hands the conversation off; one handoff "
                "per turn",
                handoff=name,
            )


def handoff_graph(agent: Agent[Any, Any]) -> dict[str, Handoff]:
    """Every handoff reachable from ``agent``, by name (raises
    :class:`~fsm_agent.ConfigurationError` when one name is given to two agents)."""
    found: dict[str, Handoff] = {}
    queue = [agent]
    seen = {id(agent)}
    while queue:
        for handoff in queue.pop(0).handoffs:
            known = found.get(handoff.name)
            if known is not None and known.agent is not handoff.agent:
                raise ConfigurationError(
                    f"two agents are handed off to under the name {handoff.name!r}: a name "
                    "means one agent in a handoff graph (the run state records it)"
                )
            found[handoff.name] = handoff
            if id(handoff.agent) not in seen:
                seen.add(id(handoff.agent))
                queue.append(handoff.agent)
    return found


def declared_graph(agent: Agent[Any, Any]) -> dict[str, list[str]]:
    """The handoff graph of ``agent`` as names: ``""`` (the agent a run starts with) and each
    handoff's name, to the names of the handoffs that agent declares."""
    graph = {"": [h.name for h in agent.handoffs]}
    for name, found in handoff_graph(agent).items():
        graph[name] = [h.name for h in found.agent.handoffs]
    return graph


def graph_agents(agent: Agent[Any, Any]) -> list[Agent[Any, Any]]:
    """``agent`` and every agent a chain of its handoffs can reach, each once."""
    agents = [agent]
    for handoff in handoff_graph(agent).values():
        if all(handoff.agent is not a for a in agents):
            agents.append(handoff.agent)
    return agents


def _taken(ctx: RunContext) -> tuple[Handoff, str] | None:
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


def _filtered(handoff: Handoff, conversation: tuple[Message, ...]) -> list[Message]:
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


def enter_agent(ctx: RunContext, name: str | None, agent: Agent[Any, Any]) -> None:
    """Make ``agent`` (called ``name``; ``None``: the run's own) the one the run's next model
    turns are made by: its plan under the run's policy, its tokenizer and model settings."""
    ctx.rs.agent = name
    plan = ctx.agent._handoff_plan(agent)
    ctx.plan = plan
    ctx.count_tokens = plan.compactor.tokenizer
    ctx.model_settings = merge_settings(agent.model_settings)


def holder(agent: Agent[Any, Any], rs: RunState) -> Handoff | None:
    """The handoff that gave the stored run ``rs`` to the agent now holding it (``None``: the
    run's own agent holds it); raises :class:`~fsm_agent.ConfigurationError` when ``agent``'s
    handoff graph declares no agent of that name."""
    name = rs.agent
    if name is None:
        return None
    graph = handoff_graph(agent)
    found = graph.get(name)
    if found is None:
        raise ConfigurationError(
            f"run {rs.run_id!r} was handed off to the agent {name!r}, which this agent's "
            f"handoff graph does not declare ({', '.join(sorted(graph)) or 'none'}); resume it "
            "with the agent that started it"
        )
    return found


def resumed_agent(ctx: RunContext) -> None:
    """A resumed run that a handoff gave to another agent: continue under that agent (raises
    like :func:`holder`)."""
    found = holder(ctx.agent, ctx.rs)
    if found is not None:
        enter_agent(ctx, found.name, found.agent)


def declared(handoffs: Iterable[Handoff], owner: Agent[Any, Any]) -> tuple[Handoff, ...]:
    """``handoffs`` checked for the agent ``owner`` (each to an agent without phases, with
    ``owner``'s output type, under a name of its own)."""
    checked = tuple(handoffs)
    names: set[str] = set()
    for handoff in checked:
        if not isinstance(handoff, Handoff):
            raise ConfigurationError(
                f"handoffs must be fsm_agent.Handoff values (an agent with a name and a "
                f"description), got {type(handoff).__name__}"
            )
        if not isinstance(handoff.agent, _agent_class(owner)):
            raise ConfigurationError(
                f"handoff {handoff.name!r}: agent must be a fsm_agent.Agent, got "
                f"{type(handoff.agent).__name__}"
            )
        if handoff.agent.phases is not None:
            raise ConfigurationError(
                f"handoff {handoff.name!r}: an agent with phases cannot take a handoff (the "
                "phase table is the run's, from its first turn)"
            )
        owner_output = owner.output_type
        if handoff.name in names:
            raise ConfigurationError(f"two handoffs are named {handoff.name!r}")
        names.add(handoff.name)
        if handoff.agent.output_type is not owner_output:
            raise ConfigurationError(
                f"handoff {handoff.name!r}: its agent answers {handoff.agent.output_type!r}, "
                f"this one {owner_output!r}; the run's answer has one type"
            )
    return checked


def _agent_class(owner: Agent[Any, Any]) -> type:
    """:class:`~fsm_agent.Agent`, read from an agent (this module is below the agent's): the
    last class of its hierarchy with the method that plans a handoff."""
    return [c for c in type(owner).__mro__ if hasattr(c, "_handoff_plan")][-1]


def handoff_tools(handoffs: Sequence[Handoff]) -> list[Tool]:
    """The tools that offer ``handoffs`` to the model."""
    return [HandoffTool(h) for h in handoffs]


def by_tool_name(handoffs: Sequence[Handoff]) -> Mapping[str, Handoff]:
    """``handoffs`` by the name of their tool."""
    return {h.tool_name: h for h in handoffs}
