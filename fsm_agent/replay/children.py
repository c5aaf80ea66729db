"""Replaying a composed run: the children of a recording's agent (the agents it used as tools)
run again on their recorded model answers and tool results.

The recording's header keeps each child's definition (:class:`ChildHeader`: its system prompt,
policy, tools and verifier, and its own children); its events keep each child's events, wrapped
in ``child`` events under the parent's call. A replay gives each agent tool an agent that
replays that child's events, with the recorded run ids, so the replayed run emits the same
``child`` events. The runs of one agent tool share one replayed model, which answers in the
recorded order (children called in parallel that the replay interleaves otherwise diverge).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from ..kernel.plan import plan_of
from ..policy import Policy
from ..run.events import ChildEvent, Event
from ..values.messages import ToolDefinition

if TYPE_CHECKING:
    from ..kernel.agent import Agent

__all__ = ["ChildHeader", "child_headers", "child_parts", "innermost"]


class ChildHeader(BaseModel):
    """What a recording keeps of an agent used as a tool, to replay it."""

    model_config = ConfigDict(extra="forbid")

    description: str
    system_prompt: str | None
    policy: Policy
    tools: list[ToolDefinition]
    verifier: bool = False
    children: dict[str, ChildHeader] = {}


def child_headers(agent: Agent[Any, Any]) -> dict[str, ChildHeader]:
    """The header of each agent ``agent`` uses as a tool (and theirs), by tool name."""
    from ..kernel.composition import AgentTool

    return {
        tool.name: ChildHeader(
            description=tool.description,
            system_prompt=tool.agent.system_prompt,
            policy=tool.agent.policy,
            tools=list(plan_of(tool.agent).tool_definitions),
            verifier=tool.agent.verifier is not None,
            children=child_headers(tool.agent),
        )
        for tool in agent.tools.values()
        if isinstance(tool, AgentTool)
    }


def innermost(event: Event) -> Event:
    """The event a ``child`` event wraps, however deep; any other event itself."""
    while isinstance(event, ChildEvent):
        event = event.event
    return event


def _subtree(
    events: Sequence[Event], parents: set[str], tool_name: str
) -> tuple[list[Event], list[str]]:
    """The events of the runs of ``tool_name`` called by the runs ``parents``, as those runs
    emitted them (their own unwrapped, their children's still wrapped), and their run ids."""
    found: list[Event] = []
    ids: list[str] = []
    below: set[str] = set()
    for event in events:
        if not isinstance(event, ChildEvent):
            continue
        if event.run_id in parents and event.tool_name == tool_name:
            if event.child_run_id not in ids:
                ids.append(event.child_run_id)
            found.append(event.event)
        elif event.run_id in below or event.run_id in ids:
            below.add(event.child_run_id)
            found.append(event)
    return found, ids


def child_parts(
    children: dict[str, ChildHeader], events: Sequence[Event], parents: set[str]
) -> list[tuple[str, ChildHeader, list[Event], list[str]]]:
    """For each of ``children`` (by tool name) of the runs ``parents``: its header, its part of
    ``events`` and its run ids in order."""
    return [(name, child, *_subtree(events, parents, name)) for name, child in children.items()]
