"""``fsm-agent diagram --agent MODULE:ATTR``: an agent's overview drawn for its policy, with a
box for each agent it uses as a tool, linked to that child's own drawing (written beside it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import diagrams
from ..diagrams.composition import AgentBox, composition_dot, composition_mermaid
from ..diagrams.handoffs import handoffs_dot, handoffs_mermaid
from ..kernel.agent import Agent
from ..kernel.composition import AgentTool, agent_bounds
from ..kernel.handoffs import declared_graph, handoff_graph
from ..kernel.plan import plan_of

__all__ = ["agent_drawings"]


def agent_drawings(
    agent: Agent[Any, Any], name: str | None, fmt: str, title: str
) -> dict[str | None, str]:
    """The DOT (or, for ``fmt="mermaid"``, Mermaid) text of ``agent``'s drawing as the file
    ``name``, and of each child's beside it as ``STEM-TOOL`` with the same suffix (linked from
    the parent's box), by file name; for an agent with handoffs, its handoff graph as
    ``STEM-handoffs``. Without ``name``, the agent's drawing alone."""
    files: dict[str | None, str] = {}
    boxes = []
    for tool in agent.tools.values():
        if not isinstance(tool, AgentTool):
            continue
        worst = agent_bounds(tool.agent).max_model_calls
        link = None
        if name is not None:
            path = Path(name)
            child = path.with_name(f"{path.stem}-{tool.name}{path.suffix}")
            files |= agent_drawings(tool.agent, str(child), fmt, f"agent tool '{tool.name}'")
            link = child.name  # beside the parent's file: a relative link
        boxes.append(AgentBox(tool.name, agent.policy.max_tool_calls, worst, link=link))
    plan = plan_of(agent)
    scope = diagrams.Scope.of(
        agent.policy,
        verifier=agent.verifier is not None,
        stop_conditions=bool(agent.stop_conditions),
        models=len(plan.models),
        output_type=plan.output_spec is not None,
    )
    drawing = diagrams.plan(scope=scope, title=f"fsm_agent: {title}")
    draw = composition_mermaid if fmt == "mermaid" else composition_dot
    if agent.handoffs and name is not None:  # who may hold the conversation, beside it
        path = Path(name)
        graph = declared_graph(agent)
        bound = next(line for line in agent_bounds(agent).lines() if line.startswith("handoffs"))
        chain = handoffs_mermaid if fmt == "mermaid" else handoffs_dot
        back = {n: "" for n, h in handoff_graph(agent).items() if h.agent is agent}
        text = chain(graph, entry=title, bound=" ".join(bound.split()), aliases=back)
        files[str(path.with_name(f"{path.stem}-handoffs{path.suffix}"))] = text
    return {name: draw(drawing, boxes), **files}
