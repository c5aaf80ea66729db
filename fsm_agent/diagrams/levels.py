"""The overview of the machine, and a run drawn on it: one edge per pair of states; pure.

The full drawing (:func:`~fsm_agent.diagrams.to_dot`) shows every row; the overview shows the
states and the moves between them, so it reads at the width of a page:

- one edge per (source, destination) pair, labelled with the outcomes that take it (guards,
  stop reasons and counter updates are in the state's detail, :mod:`.detail`);
- the driver's interrupts that leave several states for the same destination (``cancel`` and
  ``hook_error`` from every state, the limits from the working states) written once, in a
  note beside the endings, instead of an edge from every state;
- laid out top to bottom, the main flow (``idle`` → ``compacting`` → ``calling`` →
  ``dispatching`` / ``verifying`` → ``finalizing`` → ``done``) down the middle; a move back up
  leaves its state from the top, a move down past a rank from its lower corner, so that edges
  keep clear of the labels beside the states.

With a recorded run (a :class:`~fsm_agent.diagrams.Plan` made with ``run=``) the same picture
draws the run: visited states filled with their counts, the edges it took in blue labelled with
the rows it took (outcome, stop reason, count; the guard where two taken rows share an
outcome), an interrupt it took drawn from the state it left, every other edge faded.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..machine.table import TERMINAL as _TERMINAL
from ..machine.table import State
from .text import (
    DOT_STYLES,
    Edge,
    Node,
    Plan,
    _attrs,
    _mermaid_classes,
    _node_styles,
    _quote,
    plan,
)

__all__ = ["OVERVIEW_STYLES", "overview_dot", "overview_mermaid"]

OVERVIEW_STYLES: dict[str, dict[str, str]] = {
    "graph": {
        "rankdir": "TB",
        "fontname": "Helvetica",
        "fontsize": "14",
        "labelloc": "t",
        "nodesep": "0.25",
        "ranksep": "0.45",
        "newrank": "true",
    },
    "node": {
        "shape": "box",
        "style": "rounded",
        "fontname": "Helvetica",
        "fontsize": "13",
        "margin": "0.14,0.06",
    },
    "edge": {"fontname": "Helvetica", "fontsize": "11"},
    "note": {
        "shape": "note",
        "style": "dashed",
        "color": "#8c8c8c",
        "fontcolor": "#555555",
        "fontsize": "11",
    },
    "interrupt": {"style": "dashed", "color": "#8c8c8c", "fontcolor": "#555555"},
    "faded": {"color": "#cccccc", "fontcolor": "#9a9a9a"},
}
"""Graphviz attributes of the overview, per role; the run's colours come from
:data:`~fsm_agent.diagrams.DOT_STYLES` (``visited_node``, ``visited_edge``, ``final``,
``terminal``, ``unreachable``), so every level draws a run alike."""

_MAIN_FLOW = (
    State.IDLE,
    State.COMPACTING,
    State.CALLING,
    State.DISPATCHING,
    State.FINALIZING,
    State.DONE,
)
"""The spine of the overview: each state one rank below the one before."""

_SIDE_BY_SIDE = (
    (State.DISPATCHING, State.VERIFYING, State.SUSPENDED),
    (State.DONE, State.ABORTED),
)
"""States drawn on one rank: where a turn goes after the model, and the two endings."""

_WRAP = 20  # characters per line of an edge label
_NOTE_WRAP = 34  # characters per line of the interrupt note


@dataclass(frozen=True, slots=True)
class _Pair:
    """The rows between two states (or from the interrupt note to a state), drawn as one edge."""

    key: str
    source: State | None  # None: the interrupt note
    dest: State
    edges: tuple[Edge, ...]
    sources: frozenset[State] = frozenset()  # for the note: the states the rows leave

    @property
    def visits(self) -> int:
        return sum(edge.visits for edge in self.edges)

    @property
    def reachable(self) -> bool:
        return any(edge.reachable for edge in self.edges)

    @property
    def interrupt(self) -> bool:
        return all(edge.interrupt for edge in self.edges)


def _pairs(p: Plan) -> list[_Pair]:
    """The overview's edges: the rows grouped by (source, dest); the interrupts that leave
    several states on the same outcome for the same destination grouped by destination, for
    the note (``source`` None), unless the drawn run took them."""
    sources_of: dict[tuple[str, State], set[State]] = {}
    for edge in p.edges:
        if edge.interrupt:
            sources_of.setdefault((edge.outcome, edge.dest), set()).add(edge.source)
    broadcast = {key for key, sources in sources_of.items() if len(sources) > 1}
    by_pair: dict[tuple[State | None, State], list[Edge]] = {}
    for edge in p.edges:
        shared = (edge.outcome, edge.dest) in broadcast and not edge.visits
        tail = None if shared else edge.source
        by_pair.setdefault((tail, edge.dest), []).append(edge)
    pairs = []
    for (tail, dest), edges in by_pair.items():
        name = "note" if tail is None else tail.value
        pairs.append(
            _Pair(
                key=f"{name}_{dest.value}",
                source=tail,
                dest=dest,
                edges=tuple(edges),
                sources=frozenset(edge.source for edge in edges),
            )
        )
    return pairs


def _outcomes(edges: Iterable[Edge]) -> list[str]:
    """The distinct outcomes of ``edges``, in row order."""
    return list(dict.fromkeys(edge.outcome for edge in edges))


def _wrap(words: Sequence[str]) -> str:
    return "\n".join(textwrap.wrap(", ".join(words), _WRAP, break_on_hyphens=False))


def _row_name(edge: Edge, numbered: bool) -> str:
    """A taken row as the run level names it: ``outcome / stop ×n``, with its guard when
    another taken row of the same outcome needs telling apart."""
    name = edge.outcome
    if numbered and edge.guard:
        name += f" [{edge.guard}]"
    if edge.stop:
        name += f" / {edge.stop}"
    return f"{name} ×{edge.visits}"


def _pair_label(pair: _Pair, p: Plan) -> str:
    """The words on a pair's edge: its outcomes (those the scope allows, unless none is); on a
    run, the rows it took."""
    if p.run is not None:
        taken = [edge for edge in pair.edges if edge.visits]
        if not taken:
            return _overview_label(pair, p)
        counts: dict[str, int] = {}
        for edge in taken:
            counts[edge.outcome] = counts.get(edge.outcome, 0) + 1
        return "\n".join(_row_name(edge, counts[edge.outcome] > 1) for edge in taken)
    return _overview_label(pair, p)


def _overview_label(pair: _Pair, p: Plan) -> str:
    live = [edge for edge in pair.edges if edge.reachable] or list(pair.edges)
    label = _wrap(_outcomes(live))
    if pair.source is None:
        label += "\n" + _wrap([f"(from {_describe(pair.sources, p.nodes)})"])
    return label


def _describe(sources: frozenset[State], nodes: Sequence[Node]) -> str:
    """The states an interrupt leaves, in words."""
    if sources >= {node.state for node in nodes if not node.terminal}:
        return "every state"
    return ", ".join(node.state.value for node in nodes if node.state in sources)


def _node_label(node: Node, p: Plan) -> str:
    label = node.state.value
    if node.visits:
        label += f"\n×{node.visits}"
    if node.final and p.run is not None and node.state is State.SUSPENDED:
        label += "\nwaiting for a human"
    elif node.final and p.run is not None:
        stop = p.run.stop_reason
        label += "\nended" + ("" if stop is None else f": {stop.value}")
    return label


def overview_dot(diagram: Plan | None = None, *, link: Callable[[State], str] | None = None) -> str:
    """Graphviz DOT text of the overview of a :class:`~fsm_agent.diagrams.Plan` (by default, of
    the table as it is); when the plan holds a run, the run drawn on it. ``link`` gives each
    state's node a URL (for example to its detail). Pure.

    In the SVG Graphviz makes of it, a state's node has the id ``state-NAME``, an edge
    ``move-SOURCE-DEST``, the note of the shared interrupts ``interrupts``; each edge's tooltip
    lists its rows."""
    p = plan() if diagram is None else diagram
    s, base = OVERVIEW_STYLES, DOT_STYLES
    pairs = _pairs(p)
    lines = [
        "// Generated from the transition table by fsm_agent.diagrams; do not edit.",
        "digraph fsm_agent {",
        f"  graph [{_attrs(s['graph'], {'label': p.title})}];",
        f"  node [{_attrs(s['node'])}];",
        f"  edge [{_attrs(s['edge'])}];",
        f"  __start [{_attrs(base['start'], {'id': 'start'})}];",
    ]
    for node in p.nodes:
        parts: list[Mapping[str, str]] = [
            {"label": _node_label(node, p), "id": f"state-{node.state.value}"}
        ]
        if link is not None:
            parts.append({"URL": link(node.state), "tooltip": f"{node.state.value}: the detail"})
        parts += _node_styles(node, base)
        lines.append(f"  {node.state.value} [{_attrs(*parts)}];")
    notes = [pair for pair in pairs if pair.source is None]
    if notes:
        note = _attrs(s["note"], {"id": "interrupts"})
        lines.append(f"  __interrupts [{note}, label={_note_label(notes, p)}];")
    spine = [state for state in _MAIN_FLOW if any(n.state is state for n in p.nodes)]
    lines.append(f'  __start -> {spine[0].value} [id="move-start"];')
    for pair in pairs:
        if pair.source is not None:
            lines.append(_dot_pair(pair, p))
    # the spine, one rank per state, with the side states level with their neighbours
    lines.append("  " + " -> ".join(state.value for state in spine) + " [style=invis, weight=20];")
    for group in _SIDE_BY_SIDE:
        present = [state.value for state in group if any(n.state is state for n in p.nodes)]
        if group[-1] is State.ABORTED and notes:
            present.append("__interrupts")
        if len(present) > 1:
            lines.append(f"  {{rank=same; {'; '.join(present)};}}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _note_label(notes: Sequence[_Pair], p: Plan) -> str:
    """The note's text, quoted for DOT: each group of shared interrupts, where from and where
    to, in left-aligned lines."""
    lines = ["the driver's interrupts:"]
    for pair in notes:
        live = [edge for edge in pair.edges if edge.reachable]
        if not live:
            continue
        lines.extend(textwrap.wrap(", ".join(_outcomes(live)), _NOTE_WRAP))
        where = f"from {_describe(pair.sources, p.nodes)} to {pair.dest.value}"
        lines.extend("   " + line for line in textwrap.wrap(where, _NOTE_WRAP))
    return '"' + "".join(_quote(line)[1:-1] + "\\l" for line in lines) + '"'


def _dot_pair(pair: _Pair, p: Plan) -> str:
    s, base = OVERVIEW_STYLES, DOT_STYLES
    tail = "__interrupts" if pair.source is None else pair.source.value
    tooltip = "\n".join(f"{edge.label}  (row {edge.row})" for edge in pair.edges)
    parts: list[Mapping[str, str]] = [
        {"id": f"move-{pair.key.replace('_', '-', 1)}", "tooltip": tooltip},
    ]
    label = _pair_label(pair, p)
    if label:
        parts.append({"label": label})
    if pair.interrupt:
        parts.append(s["interrupt"])
    if not pair.reachable:
        parts.append(base["unreachable"])
    if p.run is not None:
        parts.append(base["visited_edge"] if pair.visits else s["faded"])
    if pair.source is not None:
        parts.append(_route(pair.source, pair.dest))
    return f"  {tail} -> {pair.dest.value} [{_attrs(*parts)}];"


def _rank(state: State) -> int:
    """How far down the overview ``state`` is drawn: its place on the main flow, or that of the
    state it is drawn beside."""
    for group in _SIDE_BY_SIDE:
        if state in group:
            state = group[0]
    return _MAIN_FLOW.index(state) if state in _MAIN_FLOW else len(_MAIN_FLOW)


def _route(source: State, dest: State) -> Mapping[str, str]:
    """Where an edge leaves its state: a move back up past a rank from the top, a move down
    past a rank to a working state from the lower right corner, an error exit (to a terminal
    state off the main flow) from the bottom; so that long edges keep clear of the labels
    beside the states they pass."""
    if _rank(source) - _rank(dest) >= 2:
        return {"tailport": "n"}
    if _rank(dest) - _rank(source) >= 2 and dest not in _TERMINAL:
        return {"tailport": "se"}
    if dest is not _MAIN_FLOW[-1] and dest in _TERMINAL and source is not dest:
        return {"tailport": "s"}
    return {}


# --- Mermaid -------------------------------------------------------------------------------------


def overview_mermaid(diagram: Plan | None = None) -> str:
    """Mermaid ``stateDiagram-v2`` text of the overview (one transition per pair of states, the
    interrupts from a note state); with a run, the run's counts and classes. Pure."""
    p = plan() if diagram is None else diagram
    pairs = _pairs(p)
    spine = [state for state in _MAIN_FLOW if any(n.state is state for n in p.nodes)]
    lines = [
        "stateDiagram-v2",
        f"    %% {p.title}: generated from the transition table by fsm_agent.diagrams",
        "    direction TB",
        f"    [*] --> {spine[0].value}",
    ]
    if any(pair.source is None for pair in pairs):
        lines.append('    state "interrupts (the driver)" as interrupts')
    for pair in pairs:
        tail = "interrupts" if pair.source is None else pair.source.value
        label = _pair_label(pair, p).replace("\n", " ")
        lines.append(f"    {tail} --> {pair.dest.value}" + (f" : {label}" if label else ""))
    lines.extend(f"    {n.state.value} --> [*]" for n in p.nodes if n.terminal)
    for node in p.nodes:
        if node.visits or node.final:
            extra = _node_label(node, p).split("\n", 1)[1].replace("\n", ", ")
            lines.append(f"    {node.state.value} : {extra}")
    lines.extend(_mermaid_classes(p.nodes))
    return "\n".join(lines) + "\n"
