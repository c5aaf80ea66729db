"""The detail of one state: its rows in the order they are tried, each with its guard, stop
reason and counter updates, and where each one goes; pure.

The state is drawn as a table, one line per row (the driver's interrupts last, under their own
heading), whose last column names the state the row moves to; beside it, one arrow from the
table to each of those states (a fan of one arrow per row would only repeat that column, and
cross itself). With a recorded run, the rows it took, and the arrows they took, are blue with
their counts; with a scope, the rows it makes impossible are grey.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from ..errors import ConfigurationError
from ..machine.table import State
from .text import DOT_STYLES, Edge, Node, Plan, _attrs, plan

__all__ = ["DETAIL_STYLES", "state_dot", "state_mermaid"]

DETAIL_STYLES: dict[str, dict[str, str]] = {
    "graph": {
        "rankdir": "LR",
        "fontname": "Helvetica",
        "fontsize": "14",
        "labelloc": "t",
        "nodesep": "0.25",
        "ranksep": "0.9",
    },
    "node": {"shape": "box", "style": "rounded", "fontname": "Helvetica", "fontsize": "13"},
    "edge": {"color": "#6e6e6e", "arrowsize": "0.7"},
    "table": {"shape": "plain", "fontsize": "12"},
}
"""Graphviz attributes of a state's detail, per role; the run's and the scope's colours come
from :data:`~fsm_agent.diagrams.DOT_STYLES`."""

_HEAD = "#eef2f8"  # the table's heading lines
_TAKEN = "#dbe8ff"  # a row the drawn run took (DOT_STYLES' visited fill)
_GREY = "#9a9a9a"  # a row the scope makes impossible
_WRAP = 34  # characters per line of the counter updates
_COLUMNS = ("row", "outcome", "guard", "stop reason", "counter updates", "to")


def _rows_of(p: Plan, state: State) -> list[Edge]:
    rows = [edge for edge in p.edges if edge.source is state]
    if not rows:
        having = ", ".join(dict.fromkeys(edge.source.value for edge in p.edges))
        raise ConfigurationError(
            f"{state.value!r} has no rows to draw (a terminal state); draw one of: {having}"
        )
    return rows


def _node(p: Plan, state: State) -> Node:
    return next(node for node in p.nodes if node.state is state)


def _cell(text: str, **attrs: str) -> str:
    extra = "".join(f' {key.upper()}="{value}"' for key, value in attrs.items())
    return f'<TD ALIGN="LEFT" BALIGN="LEFT"{extra}>{text or " "}</TD>'


def _font(text: str, colour: str | None, bold: bool = False) -> str:
    if not text:
        return ""  # Graphviz refuses an empty <FONT> element
    body = escape(text)
    if bold:
        body = f"<B>{body}</B>"
    return body if colour is None else f'<FONT COLOR="{colour}">{body}</FONT>'


def _updates(updates: Sequence[str], colour: str | None) -> str:
    """The counter updates, wrapped so that the column stays narrow."""
    lines: list[str] = []
    for update in updates:
        if lines and len(lines[-1]) + len(update) + 2 <= _WRAP:
            lines[-1] += f", {update}"
        else:
            lines.append(update)
    return "<BR/>".join(_font(line, colour) for line in lines)


def _table(p: Plan, state: State, rows: Sequence[Edge]) -> str:
    """The HTML-like label of the state's table."""
    run = p.run is not None
    columns = (*_COLUMNS[:-1], "taken", _COLUMNS[-1]) if run else _COLUMNS
    title = state.value
    node = _node(p, state)
    if node.visits:
        title += f"  ×{node.visits}"
    lines = [
        '<TABLE BORDER="1" CELLBORDER="0" CELLSPACING="0" CELLPADDING="4" COLOR="#555555">',
        f'<TR><TD COLSPAN="{len(columns)}" BGCOLOR="{_HEAD}"><B>{escape(title)}</B>'
        f'<BR/><FONT POINT-SIZE="11">{escape(p.title)}: the rows of {state.value}, tried in '
        "order; the first whose guard holds moves</FONT></TD></TR>",
        "<TR>" + "".join(_cell(f"<B>{c}</B>", bgcolor=_HEAD) for c in columns) + "</TR>",
    ]
    interrupts = False
    for edge in rows:
        if edge.interrupt and not interrupts:
            interrupts = True
            lines.append(
                f'<TR><TD COLSPAN="{len(columns)}" ALIGN="LEFT" BGCOLOR="{_HEAD}">'
                "<I>the driver's interrupts</I></TD></TR>"
            )
        colour = None if edge.reachable else _GREY
        fill = {"bgcolor": _TAKEN} if edge.visits else {}
        cells = [
            _cell(_font(str(edge.row), colour), **fill),
            _cell(_font(edge.outcome, colour, bold=bool(edge.visits)), **fill),
            _cell(_font(edge.guard and f"[{edge.guard}]", colour), **fill),
            _cell(_font(edge.stop, colour), **fill),
            _cell(_updates(edge.updates, colour), **fill),
        ]
        if run:
            cells.append(_cell(_font(f"×{edge.visits}" if edge.visits else "", colour), **fill))
        cells.append(_cell(_font(edge.dest.value, colour), **fill))
        lines.append("<TR>" + "".join(cells) + "</TR>")
    lines.append("</TABLE>")
    return "\n".join(lines)


def state_dot(state: State, diagram: Plan | None = None) -> str:
    """Graphviz DOT text of the detail of ``state`` in a :class:`~fsm_agent.diagrams.Plan` (by
    default, of the table as it is): its rows in order, each with its guard, stop reason and
    counter updates and destination, and one arrow from the table to each destination. Pure;
    raises :class:`~fsm_agent.errors.ConfigurationError` for a state without rows (a terminal
    one).

    In the SVG Graphviz makes of it, the table has the id ``state-NAME``, a destination
    ``to-NAME`` and the arrow to it ``arrow-NAME``."""
    p = plan() if diagram is None else diagram
    rows = _rows_of(p, state)
    s, base = DETAIL_STYLES, DOT_STYLES
    lines = [
        "// Generated from the transition table by fsm_agent.diagrams; do not edit.",
        f"digraph {state.value} {{",
        f"  graph [{_attrs(s['graph'])}];",
        f"  node [{_attrs(s['node'])}];",
        f"  edge [{_attrs(s['edge'])}];",
        f"  rows [{_attrs(s['table'], {'id': f'state-{state.value}'})}, "
        f"label=<{_table(p, state, rows)}>];",
    ]
    for dest in dict.fromkeys(edge.dest for edge in rows):
        node = _node(p, dest)
        parts: list[Mapping[str, str]] = [{"label": dest.value, "id": f"to-{dest.value}"}]
        if node.terminal:
            parts.append(base["terminal"])
        if not any(edge.reachable for edge in rows if edge.dest is dest):
            parts.append(base["unreachable"] | {"style": "rounded,dotted"})
        if any(edge.visits for edge in rows if edge.dest is dest):
            parts.append(base["visited_node"])
        lines.append(f"  to_{dest.value} [{_attrs(*parts)}];")
    for dest, leading in _by_destination(rows).items():
        lines.append(f"  rows:e -> to_{dest.value}:w [{_attrs(*_arrow(dest, leading))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _by_destination(rows: Sequence[Edge]) -> dict[State, list[Edge]]:
    """The rows by the state they move to, destinations in the order of their first row."""
    found: dict[State, list[Edge]] = {}
    for edge in rows:
        found.setdefault(edge.dest, []).append(edge)
    return found


def _arrow(dest: State, leading: Sequence[Edge]) -> list[Mapping[str, str]]:
    """The attributes of the one arrow to ``dest``, which the rows ``leading`` there share:
    dashed when only interrupts lead there, dotted when none can be taken, blue when the run
    took one."""
    numbers = ", ".join(str(edge.row) for edge in leading)
    noun = "row" if len(leading) == 1 else "rows"
    parts: list[Mapping[str, str]] = [
        {"id": f"arrow-{dest.value}", "tooltip": f"{noun} {numbers} move to {dest.value}"}
    ]
    if all(edge.interrupt for edge in leading):
        parts.append({"style": "dashed"})
    if not any(edge.reachable for edge in leading):
        parts.append({"style": "dotted", "color": "#c8c8c8"})
    if any(edge.visits for edge in leading):
        parts.append(DOT_STYLES["visited_edge"])
    return parts


def state_mermaid(state: State, diagram: Plan | None = None) -> str:
    """Mermaid ``stateDiagram-v2`` text of the detail of ``state``: one transition per row, in
    order, labelled ``row N outcome [guard] / stop, then updates``. Pure; raises
    :class:`~fsm_agent.errors.ConfigurationError` for a state without rows."""
    p = plan() if diagram is None else diagram
    rows = _rows_of(p, state)
    lines = [
        "stateDiagram-v2",
        f"    %% {p.title}: {state.value}, generated from the transition table by "
        "fsm_agent.diagrams",
        "    direction LR",
    ]
    for edge in rows:
        label = f"row {edge.row} {edge.outcome}"
        if edge.guard:
            label += f" [{edge.guard}]"
        if edge.stop:
            label += f" / {edge.stop}"
        if edge.updates:
            label += ", then " + ", ".join(edge.updates)
        if not edge.reachable:
            label += " (unreachable)"
        if edge.visits:
            label += f" ×{edge.visits}"
        lines.append(f"    {state.value} --> {edge.dest.value} : {label}")
    return "\n".join(lines) + "\n"
