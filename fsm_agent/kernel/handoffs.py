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

This module declares the handoffs, the plan's part of them; the run's part (the turn that
hands off, the target entering the run) is :mod:`fsm_agent.kernel.handover`. A run without
handoffs pays one attribute check per tool turn (``plan.handoffs``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol

from typing_extensions import TypeVar

from ..errors import ConfigurationError, HandoffError
from ..run.state import RunState
from ..tools import Tool, ToolContext
from ..values.messages import Message, Role

__all__ = [
    "HANDED_OVER",
    "Handoff",
    "HandoffFilter",
    "HandoffTool",
    "by_tool_name",
    "declared",
    "declared_graph",
    "graph_agents",
    "handoff_graph",
    "handoff_tools",
    "holder",
    "without_tool_calls",
]

AgentT = TypeVar("AgentT", default=Any)
"""The type of a handoff's target: the :class:`~fsm_agent.Agent` it was declared with."""

HandoffFilter = Callable[[tuple[Message, ...]], Sequence[Message]]
"""A handoff's input filter: given the conversation (its system message left out), the messages
the target sees after its own system prompt. It must keep every tool call with its one result."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,48}")

HANDED_OVER = "(The conversation was handed to you, {name!r}: answer from here.)"
"""The message a target gets last when its input filter leaves nothing for it to answer (the
conversation ends with an answer, or is empty)."""


@dataclass(frozen=True, eq=False)
class Handoff(Generic[AgentT]):
    """A declared handoff to ``agent``: the model of the agent that declares it may call the
    tool ``transfer_to_<name>`` (described by ``description``) to give it the conversation.
    ``input_filter`` (default: none) chooses what of the conversation the target sees (see
    :func:`without_tool_calls`). ``name`` also names the target in the run state, the events
    and the bounds, so one name means one agent across a handoff graph."""

    agent: AgentT
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
    conversation to its target (:func:`~fsm_agent.kernel.handover.hand_off`). A call past
    ``Policy.max_handoffs`` (``limit``), or after an earlier call of the same turn of one of
    the plan's handoff tools (``offered``), gets an error result and hands nothing off."""

    def __init__(self, handoff: Handoff[Any], limit: int | None, offered: frozenset[str]) -> None:
        name = handoff.name

        async def transfer(context: ToolContext[Any]) -> str:
            # The run's cancel check is a method of its context: the run that made the call.
            rs = getattr(getattr(context.cancel_requested, "__self__", None), "rs", None)
            if not isinstance(rs, RunState):
                raise HandoffError(
                    f"the handoff {name!r} runs inside an agent's run only", handoff=name
                )
            _refuse(rs, context.call_id, name, limit, offered)
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


def _refuse(
    rs: RunState, call_id: str, name: str, limit: int | None, offered: frozenset[str]
) -> None:
    """Raise :class:`HandoffError` (the call's error result) when this call may not hand off."""
    if limit is not None and len(rs.handoff_trace) >= limit:
        raise HandoffError(
            f"the run's handoff limit (Policy.max_handoffs={limit}) is reached; answer the user "
            "yourself",
            handoff=name,
        )
    for call in rs.pending_tool_calls:
        if call.id == call_id:
            return
        if call.name in offered:
            raise HandoffError(
                "an earlier call of this turn already hands the conversation off; one handoff "
                "per turn",
                handoff=name,
            )


class _Declaring(Protocol):
    """An agent, as the handoff graph reads it: the handoffs it declares."""

    @property
    def handoffs(self) -> tuple[Handoff[Any], ...]:
        """The agents it may hand the conversation to."""
        ...


DeclaringT = TypeVar("DeclaringT", bound=_Declaring)


def handoff_graph(agent: _Declaring) -> dict[str, Handoff[Any]]:
    """Every handoff reachable from ``agent``, by name (raises
    :class:`~fsm_agent.ConfigurationError` when one name is given to two agents)."""
    found: dict[str, Handoff[Any]] = {}
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


def declared_graph(agent: _Declaring) -> dict[str, list[str]]:
    """The handoff graph of ``agent`` as names: ``""`` (the agent a run starts with) and each
    handoff's name, to the names of the handoffs that agent declares."""
    graph = {"": [h.name for h in agent.handoffs]}
    for name, found in handoff_graph(agent).items():
        graph[name] = [h.name for h in found.agent.handoffs]
    return graph


def graph_agents(agent: DeclaringT) -> list[DeclaringT]:
    """``agent`` and every agent a chain of its handoffs can reach, each once."""
    agents = [agent]
    for handoff in handoff_graph(agent).values():
        if all(handoff.agent is not a for a in agents):
            agents.append(handoff.agent)
    return agents


def holder(agent: _Declaring, rs: RunState) -> Handoff[Any] | None:
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


def declared(
    handoffs: Iterable[Handoff[Any]], kind: type[Any], owner_output: object
) -> tuple[Handoff[Any], ...]:
    """``handoffs`` checked for an agent whose output type is ``owner_output``: each to an
    agent of class ``kind`` (:class:`~fsm_agent.Agent`) without phases, with that output type,
    under a name of its own."""
    checked = tuple(handoffs)
    names: set[str] = set()
    for handoff in checked:
        if not isinstance(handoff, Handoff):
            raise ConfigurationError(
                f"handoffs must be fsm_agent.Handoff values (an agent with a name and a "
                f"description), got {type(handoff).__name__}"
            )
        if not isinstance(handoff.agent, kind):
            raise ConfigurationError(
                f"handoff {handoff.name!r}: agent must be a fsm_agent.Agent, got "
                f"{type(handoff.agent).__name__}"
            )
        if handoff.agent.phases is not None:
            raise ConfigurationError(
                f"handoff {handoff.name!r}: an agent with phases cannot take a handoff (the "
                "phase table is the run's, from its first turn)"
            )
        if handoff.name in names:
            raise ConfigurationError(f"two handoffs are named {handoff.name!r}")
        names.add(handoff.name)
        if handoff.agent.output_type is not owner_output:
            raise ConfigurationError(
                f"handoff {handoff.name!r}: its agent answers {handoff.agent.output_type!r}, "
                f"this one {owner_output!r}; the run's answer has one type"
            )
    return checked


def handoff_tools(handoffs: Sequence[Handoff[Any]], limit: int | None) -> list[Tool]:
    """The tools that offer ``handoffs`` to the model, under the run's ``limit`` of handoffs
    (``Policy.max_handoffs``)."""
    offered = frozenset(h.tool_name for h in handoffs)
    return [HandoffTool(h, limit, offered) for h in handoffs]


def by_tool_name(handoffs: Sequence[Handoff[Any]]) -> Mapping[str, Handoff[Any]]:
    """``handoffs`` by the name of their tool."""
    return {h.tool_name: h for h in handoffs}
