"""A composition drawn: the parent's overview, and level with its ``dispatching`` state (where
its tools run) one box per agent it uses as a tool, saying how often the parent may call it and
what one of its runs may cost, linked to the child's own overview (each child runs its own
machine, drawn on its own page rather than nested, so that every picture keeps the overview's
size); pure.

The boxes are plain data (:class:`AgentBox`): the caller reads them from an agent and its
bounds, so this module needs no agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .levels import overview_dot, overview_mermaid
from .text import Plan, _attrs, _quote

__all__ = ["AgentBox", "composition_dot", "composition_mermaid"]

_BOX = {
    "shape": "note",
    "style": "filled",
    "fillcolor": "#f3efff",
    "color": "#6a4fc4",
    "fontsize": "11",
}


@dataclass(frozen=True, slots=True)
class AgentBox:
    """An agent the parent uses as a tool: the tool's ``name``, the most ``runs`` of it in one
    run of the parent and the most ``model_calls`` one of its runs makes (``None``:
    unbounded), and ``link``, where its own overview is drawn (``None``: nowhere)."""

    name: str
    runs: int | None
    model_calls: int | None
    link: str | None = None

    def lines(self) -> list[str]:
        """The box's text, line by line."""
        runs = "any number of" if self.runs is None else f"≤ {self.runs}"
        calls = "unbounded" if self.model_calls is None else f"≤ {self.model_calls}"
        text = [
            f"agent tool '{self.name}', run in dispatching:",
            f"{runs} runs per run,",
            f"{calls} model calls each",
        ]
        if self.link is not None:
            text.append(f"its machine: {self.link}")
        return text


def composition_dot(parent: Plan, boxes: Sequence[AgentBox]) -> str:
    """Graphviz DOT text: ``parent``'s overview with each of ``boxes`` level with
    ``dispatching`` (where the tools run), linked (``URL``) to the child's overview. In the SVG
    a box has the id ``agent-tool-NAME``."""
    overview = overview_dot(parent).rstrip()
    assert overview.endswith("}"), "an overview is one digraph"
    lines = [overview[:-1].rstrip()]
    for index, box in enumerate(boxes):
        node = f"__agent_{index}"
        label = '"' + "".join(_quote(line)[1:-1] + "\\l" for line in box.lines()) + '"'
        parts = [_BOX, {"id": f"agent-tool-{box.name}", "tooltip": f"agent tool {box.name}"}]
        if box.link is not None:
            parts.append({"URL": box.link})
        lines.append(f"  {node} [{_attrs(*parts)}, label={label}];")
    if boxes:  # level with dispatching, without an edge: one would cross the overview's labels
        names = "; ".join(f"__agent_{index}" for index in range(len(boxes)))
        lines.append(f"  {{rank=same; dispatching; {names};}}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def composition_mermaid(parent: Plan, boxes: Sequence[AgentBox]) -> str:
    """Mermaid ``stateDiagram-v2`` text: ``parent``'s overview with a note on ``dispatching``
    for each of ``boxes``."""
    lines = [overview_mermaid(parent).rstrip("\n")]
    for box in boxes:
        lines.append(f"    note right of dispatching : {' '.join(box.lines())}")
    return "\n".join(lines) + "\n"
