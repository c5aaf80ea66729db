"""A composition drawn: the parent's overview with, inside its ``dispatching`` state (where its
tools run), one box per agent it uses as a tool, saying how often the parent may call it and
what one of its runs may cost, linked to the child's own overview (each child runs its own
machine, drawn on its own page rather than nested, so that every picture keeps the overview's
size); and a composed run: the parent's path with, inside ``dispatching``, one box per child run
its calls started, with that child's path, linked to the child's run drawn on its own machine.
Pure.

The boxes are plain data (:class:`AgentBox`, :class:`ChildRunBox`): the caller reads them from
an agent and its bounds, or from stored runs, so this module needs neither.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .levels import overview_dot, overview_mermaid
from .text import Plan

__all__ = [
    "AgentBox",
    "ChildRunBox",
    "composed_run_dot",
    "composed_run_mermaid",
    "composition_dot",
    "composition_mermaid",
]

_CELL = 'BORDER="1" COLOR="#6a4fc4" BGCOLOR="#f3efff" ALIGN="LEFT" BALIGN="LEFT"'
_SPACED = '  graph [nodesep="0.5"];'  # room beside the taller dispatching for the edges' labels
_LABEL = re.compile(r'label="((?:[^"\\]|\\.)*)"')
_PATH_WIDTH = 38  # characters per line of a child's path


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


@dataclass(frozen=True, slots=True)
class ChildRunBox:
    """A child run one call of the parent started: the agent tool's ``name``, the parent's
    ``call_id``, the states the child entered with how often (in the order it first entered
    them), how it ended (``ending``: the stop reason, or the state it rests in), its
    ``model_calls``, and ``link``, where its run is drawn (``None``: nowhere)."""

    name: str
    call_id: str
    visits: tuple[tuple[str, int], ...]
    ending: str
    model_calls: int
    link: str | None = None

    def lines(self) -> list[str]:
        """The box's text, line by line: the call, the child's path, how it ended."""
        steps = [state if n == 1 else f"{state} ×{n}" for state, n in self.visits]
        text = [f"agent tool '{self.name}', call {self.call_id}:"]
        line = ""
        for step in steps:
            joined = f"{line} → {step}" if line else step
            if line and len(joined) > _PATH_WIDTH:
                text.append(line + " →")
                joined = step
            line = joined
        text.append(line)
        calls = "model call" if self.model_calls == 1 else "model calls"
        text.append(f"{self.ending}, {self.model_calls} {calls}")
        if self.link is not None:
            text.append(f"its run: {self.link}")
        return text


def _inside_dispatching(dot: str, boxes: Sequence[AgentBox | ChildRunBox]) -> str:
    """``dot`` (an overview) with ``boxes`` drawn inside its ``dispatching`` node, under the
    node's own text, each a cell with the id ``agent-tool-NAME`` (``agent-call-CALL`` for a
    child run), linked (``HREF``) to what it names."""
    if not boxes:
        return dot
    lines = dot.rstrip().splitlines()
    assert lines[-1] == "}", "an overview is one digraph"
    for index, line in enumerate(lines):
        found = _LABEL.search(line) if line.startswith("  dispatching [") else None
        if found is None:
            continue
        own = found.group(1).replace("\\n", "\n").split("\n")
        rows = [f"<TR><TD>{html.escape(text)}</TD></TR>" for text in own]
        rows += [f"<TR><TD {_cell(box)}>{_text(box.lines())}</TD></TR>" for box in boxes]
        table = f'<<TABLE BORDER="0" CELLSPACING="3" CELLPADDING="3">{"".join(rows)}</TABLE>>'
        lines[index] = f"{line[: found.start()]}label={table}{line[found.end() :]}"
    return "\n".join([*lines[:-1], _SPACED, "}"]) + "\n"


def _cell(box: AgentBox | ChildRunBox) -> str:
    """The attributes of ``box``'s cell: its id, tooltip and link."""
    if isinstance(box, ChildRunBox):
        ident, tip = f"agent-call-{box.call_id}", f"agent tool {box.name}, call {box.call_id}"
    else:
        ident, tip = f"agent-tool-{box.name}", f"agent tool {box.name}"
    attrs = f'{_CELL} ID="{html.escape(ident)}" TOOLTIP="{html.escape(tip)}"'
    if box.link is not None:
        attrs += f' HREF="{html.escape(box.link)}"'
    return attrs


def _text(lines: Sequence[str]) -> str:
    """Left-aligned lines of a cell, in the boxes' smaller font."""
    joined = "".join(f'{html.escape(line)}<BR ALIGN="LEFT"/>' for line in lines)
    return f'<FONT POINT-SIZE="11">{joined}</FONT>'


def composition_dot(parent: Plan, boxes: Sequence[AgentBox]) -> str:
    """Graphviz DOT text: ``parent``'s overview with each of ``boxes`` inside ``dispatching``
    (where the tools run), linked (``HREF``) to the child's overview. In the SVG a box has the
    id ``agent-tool-NAME``."""
    return _inside_dispatching(overview_dot(parent), boxes)


def composition_mermaid(parent: Plan, boxes: Sequence[AgentBox]) -> str:
    """Mermaid ``stateDiagram-v2`` text: ``parent``'s overview with a note on ``dispatching``
    for each of ``boxes``."""
    return _noted(overview_mermaid(parent), boxes)


def composed_run_dot(parent: Plan, children: Sequence[ChildRunBox]) -> str:
    """Graphviz DOT text: a run of the parent drawn on its overview (``parent`` holds the run),
    with the run of each of ``children`` inside ``dispatching``, where the call that started it
    ran, linked (``HREF``) to the child's own drawing. In the SVG a box has the id
    ``agent-call-CALL_ID``."""
    return _inside_dispatching(overview_dot(parent), children)


def composed_run_mermaid(parent: Plan, children: Sequence[ChildRunBox]) -> str:
    """Mermaid ``stateDiagram-v2`` text: the parent's run with a note on ``dispatching`` for
    each of ``children``."""
    return _noted(overview_mermaid(parent), children)


def _noted(overview: str, boxes: Sequence[AgentBox | ChildRunBox]) -> str:
    lines = [overview.rstrip("\n")]
    for box in boxes:
        lines.append(f"    note right of dispatching : {' '.join(box.lines())}")
    return "\n".join(lines) + "\n"
