"""Diagrams as text: the table (optionally scoped to a policy, optionally with a recorded run)
turned into plain data (:func:`plan`), then written as Graphviz DOT or Mermaid. Pure and
deterministic; no dependency.

An edge reads like a UML transition, ``outcome [guard] / stop reason``; where several rows share a
(state, outcome), they are numbered in the order they are tried and the last one reads ``[else]``.
Which rows are interrupts comes from the states' declarations; guard labels come from the guard
registry; what a policy makes impossible is the checker's own reading of it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..analysis.checker.environment import impossible_outcomes
from ..machine.guards import guard_label, guard_value_combinations
from ..machine.table import DECLARATIONS, TABLE, TERMINAL, Limits, Outcome, Row, State
from ..policy import Policy, limits_of
from .trace import RunPath

__all__ = ["DOT_STYLES", "Edge", "Node", "Plan", "Scope", "plan", "to_dot", "to_mermaid"]


# --- what a diagram is drawn for -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scope:
    """What a diagram is drawn for: the numbers the guards compare against, and the outcomes the
    agent can never report. Rows those make impossible, and the states only they lead to, are
    greyed out. Without a scope a diagram shows the default policy's numbers and greys nothing.
    """

    limits: Limits
    impossible: frozenset[Outcome] = frozenset()

    @classmethod
    def of(
        cls,
        policy: Policy,
        *,
        verifier: bool = False,
        stop_conditions: bool = False,
        models: int = 1,
        output_type: bool = False,
    ) -> Scope:
        """The scope of an agent with ``policy``; ``verifier`` and ``stop_conditions`` say
        whether it has a verifier and stop conditions (code, so not part of the policy),
        ``models`` how many models its fallback chain holds (1: a single model), and
        ``output_type`` whether it validates its answers as an output type."""
        return cls(
            limits_of(policy, verification=verifier, models=models, output_validation=output_type),
            impossible_outcomes(
                policy,
                stop_conditions=stop_conditions,
                models=models,
                output_validation=output_type,
            ),
        )


# --- the plan: plain data between the table and the text -----------------------------------------


@dataclass(frozen=True, slots=True)
class Node:
    """A state as drawn."""

    state: State
    terminal: bool
    reachable: bool = True  # False: the scope makes the state unreachable (greyed)
    visits: int = 0  # times the drawn run entered it (the start counts)
    final: bool = False  # the drawn run ended (or stopped) here


@dataclass(frozen=True, slots=True)
class Edge:
    """A row as drawn: ``label`` reads ``outcome [guard] / stop reason``."""

    row: int
    source: State
    dest: State
    label: str
    detail: str  # the row's updates and note, for tooltips
    interrupt: bool  # one of the driver's interrupts (cancel, limits), drawn lighter
    reachable: bool = True
    visits: int = 0
    outcome: str = ""  # the row's outcome, as the label's parts for the levels to recombine
    guard: str = ""  # the guard's label, "else" for the last of several rows, "" unguarded
    stop: str = ""  # the stop reason the row sets, or ""
    updates: tuple[str, ...] = ()  # the counter updates, as ``steps += 1``


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything a text backend needs: nodes in :class:`State` order, edges in row order."""

    title: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    run: RunPath | None = None


_UNSCOPED = Limits(max_model_switches=1)
"""The limits a drawing without a scope labels its guards with: the default policy's, and a
fallback chain of two models (so the rows that move down a chain read as they would there)."""


def plan(
    rows: Sequence[Row] = TABLE,
    *,
    scope: Scope | None = None,
    run: RunPath | None = None,
    title: str = "fsm_agent",
) -> Plan:
    """The nodes and edges of a diagram of ``rows``; pure."""
    limits = _UNSCOPED if scope is None else scope.limits
    live_rows, live_states = _live(rows, scope)
    groups: dict[tuple[State, Outcome], list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault((row.source, row.outcome), []).append(i)
    edges = []
    for i, row in enumerate(rows):
        group = groups[row.source, row.outcome]
        head = row.outcome.value
        if len(group) > 1:
            head = f"{group.index(i) + 1}. {head}"
        guard = ""
        if row.guard_name is not None:
            guard = guard_label(row.guard_name, limits)
        elif len(group) > 1:
            guard = "else"
        if guard:
            head += f" [{guard}]"
        if row.stop is not None:
            head += f" / {row.stop.value}"
        detail = "; ".join([f"row {i}", *(str(u) for u in row.updates), *filter(None, [row.note])])
        edges.append(
            Edge(
                row=i,
                source=row.source,
                dest=row.dest,
                label=head,
                detail=detail,
                interrupt=row.outcome in DECLARATIONS[row.source].interrupts,
                reachable=i in live_rows,
                visits=0 if run is None else run.row_visits.get(i, 0),
                outcome=row.outcome.value,
                guard=guard,
                stop="" if row.stop is None else row.stop.value,
                updates=tuple(str(u) for u in row.updates),
            )
        )
    nodes = tuple(
        Node(
            state=state,
            terminal=state in TERMINAL,
            reachable=state in live_states,
            visits=0 if run is None else run.state_visits.get(state, 0),
            final=run is not None and run.final is state,
        )
        for state in State
    )
    return Plan(title, nodes, tuple(edges), run)


def _live(rows: Sequence[Row], scope: Scope | None) -> tuple[frozenset[int], frozenset[State]]:
    """The rows that can fire under ``scope`` and the states they reach from ``idle``."""
    if scope is None:
        return frozenset(range(len(rows))), frozenset(State)
    lim = scope.limits
    combos = list(guard_value_combinations(lim))
    possible: set[int] = set()
    earlier: dict[tuple[State, Outcome], list[Row]] = {}
    for i, row in enumerate(rows):
        before = earlier.setdefault((row.source, row.outcome), [])
        if row.outcome not in scope.impossible and any(
            all(r.guard is not None and not r.guard(c, lim) for r in before)
            and (row.guard is None or row.guard(c, lim))
            for c in combos
        ):
            possible.add(i)
        before.append(row)
    reached = {State.IDLE}
    queue = deque([State.IDLE])
    while queue:
        state = queue.popleft()
        for i in possible:
            if rows[i].source is state and rows[i].dest not in reached:
                reached.add(rows[i].dest)
                queue.append(rows[i].dest)
    return frozenset(i for i in possible if rows[i].source in reached), frozenset(reached)


# --- DOT -----------------------------------------------------------------------------------------

DOT_STYLES: dict[str, dict[str, str]] = {
    "graph": {
        "rankdir": "TB",
        "fontname": "Helvetica",
        "labelloc": "t",
        "nodesep": "0.8",
        "ranksep": "0.6",
    },
    "node": {"shape": "box", "style": "rounded", "fontname": "Helvetica", "margin": "0.15,0.08"},
    "edge": {"fontname": "Helvetica", "fontsize": "10"},
    "start": {"shape": "point", "width": "0.15", "label": ""},
    "cluster": {"label": "", "style": "dashed,rounded", "color": "#b4b4b4"},
    "terminal": {"peripheries": "2", "style": "rounded,bold"},
    "interrupt": {
        "style": "dashed",
        "color": "#8c8c8c",
        "fontcolor": "#6e6e6e",
        "fontsize": "9",
        "constraint": "false",
    },
    "unreachable": {"style": "dotted", "color": "#c8c8c8", "fontcolor": "#b4b4b4"},
    "visited_node": {"style": "rounded,filled", "fillcolor": "#dbe8ff", "color": "#1f5fd1"},
    "visited_edge": {"color": "#1f5fd1", "fontcolor": "#1f5fd1", "penwidth": "2.2"},
    "final": {"color": "#c62828", "penwidth": "3"},
}
"""Graphviz attributes per role, applied in the order: base, terminal/interrupt, unreachable,
visited, final (a later role overrides an earlier one's attribute)."""


def _attrs(*parts: Mapping[str, str]) -> str:
    merged: dict[str, str] = {}
    for part in parts:
        merged.update(part)
    return ", ".join(f"{key}={_quote(value)}" for key, value in merged.items())


def _quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _visits(count: int) -> str:
    return f"×{count}"


def _node_label(node: Node, run: RunPath | None) -> str:
    label = node.state.value
    if node.visits:
        label += f"\n{_visits(node.visits)}"
    if node.final and run is not None:
        label += "\nfinal" + ("" if run.stop_reason is None else f": {run.stop_reason.value}")
    return label


def to_dot(diagram: Plan | None = None) -> str:
    """Graphviz DOT text of a :class:`Plan` (by default, of the table as it is); pure.

    Interrupt rows that leave several states for the same destination on the same outcome are
    drawn once, from a dashed box around those states (Graphviz's ``ltail``); the other
    interrupt rows between the same two states share one edge, and so do a state's self-loops
    (the retries and the moves down a fallback chain), labelled by guard.
    """
    p = plan() if diagram is None else diagram
    s = DOT_STYLES
    broadcasts = _broadcasts(p.edges)
    clusters = sorted({sources for sources, _ in broadcasts}, key=lambda c: (-len(c), _order(c)))
    lines = [
        "// Generated from the transition table by fsm_agent.diagrams; do not edit.",
        "digraph fsm_agent {",
        f"  graph [{_attrs(s['graph'], {'label': p.title, 'compound': 'true'})}];",
        f"  node [{_attrs(s['node'])}];",
        f"  edge [{_attrs(s['edge'])}];",
        f"  __start [{_attrs(s['start'])}];",
        *_dot_nodes(p, frozenset(State), clusters, "  "),
        "  __start -> idle;",
    ]
    in_broadcast = {edge.row for families in broadcasts.values() for f in families for edge in f}
    bundles: list[list[Edge]] = []
    pairs: dict[tuple[State, State], list[Edge]] = {}
    loops_of: dict[State, list[Edge]] = {}  # each state's self-loops share one edge
    for edge in p.edges:
        if edge.row in in_broadcast:
            continue
        if not edge.interrupt and edge.source is edge.dest:
            if edge.source in loops_of:
                loops_of[edge.source].append(edge)
            else:
                bundles.append(loops_of.setdefault(edge.source, [edge]))
        elif not edge.interrupt:
            bundles.append([edge])
        elif (edge.source, edge.dest) in pairs:
            pairs[edge.source, edge.dest].append(edge)
        else:
            bundles.append(pairs.setdefault((edge.source, edge.dest), [edge]))
    for bundle in bundles:
        lines.append(_dot_edge(bundle[0].source, bundle[0].dest, [[e] for e in bundle], {}))
    for (sources, dest), families in broadcasts.items():
        tail = min(sources, key=_order)
        ltail = {"ltail": f"cluster_{clusters.index(sources)}"}
        lines.append(_dot_edge(tail, dest, families, ltail))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _order(states: Iterable[State] | State) -> tuple[int, ...]:
    members = list(State)
    if isinstance(states, State):
        return (members.index(states),)
    return tuple(sorted(members.index(state) for state in states))


def _broadcasts(edges: Iterable[Edge]) -> dict[tuple[frozenset[State], State], list[list[Edge]]]:
    """Interrupt rows grouped into families (same label and destination, several sources), the
    families grouped by their sources; empty when the source sets do not nest (no clusters)."""
    families: dict[tuple[str, State], list[Edge]] = {}
    for edge in edges:
        if edge.interrupt:
            families.setdefault((edge.label, edge.dest), []).append(edge)
    grouped: dict[tuple[frozenset[State], State], list[list[Edge]]] = {}
    for (_, dest), family in families.items():
        sources = frozenset(edge.source for edge in family)
        if len(sources) > 1 and dest not in sources:
            grouped.setdefault((sources, dest), []).append(family)
    sets = sorted({sources for sources, _ in grouped}, key=len, reverse=True)
    for i, big in enumerate(sets):
        if any(small & big and not small <= big for small in sets[i + 1 :]):
            return {}
    return grouped


def _dot_nodes(
    p: Plan, container: frozenset[State], clusters: list[frozenset[State]], indent: str
) -> list[str]:
    """The node statements of ``container``, nesting the clusters inside it."""
    s = DOT_STYLES
    inner = [c for c in clusters if c < container]
    children = [c for c in inner if not any(c < other for other in inner)]
    lines = []
    for child in children:
        lines.append(f"{indent}subgraph cluster_{clusters.index(child)} {{")
        lines.append(f"{indent}  graph [{_attrs(s['cluster'])}];")
        lines.extend(_dot_nodes(p, child, clusters, indent + "  "))
        lines.append(f"{indent}}}")
    for node in p.nodes:
        if node.state not in container or any(node.state in child for child in children):
            continue
        parts = [{"label": _node_label(node, p.run)}, *_node_styles(node, s)]
        lines.append(f"{indent}{node.state.value} [{_attrs(*parts)}];")
    return lines


def _node_styles(node: Node, s: Mapping[str, dict[str, str]]) -> list[Mapping[str, str]]:
    """The styles ``s`` gives a state's box for what it is: terminal, unreachable, visited by
    the run, where the run ended."""
    parts: list[Mapping[str, str]] = []
    if node.terminal:
        parts.append(s["terminal"])
    if not node.reachable:
        parts.append(s["unreachable"] | {"style": "rounded,dotted"})
    if node.visits:
        parts.append(s["visited_node"])
        if node.terminal:
            parts.append({"style": "rounded,filled,bold"})
    if node.final:
        parts.append(s["final"])
    return parts


def _dot_edge(
    tail: State,
    head: State,
    families: list[list[Edge]],
    extra: Mapping[str, str],
) -> str:
    """One DOT edge drawing one or more rows: one label line per family of rows."""
    s = DOT_STYLES
    edges = [edge for family in families for edge in family]
    lines = []
    for family in families:
        label = family[0].label
        visits = sum(edge.visits for edge in family)
        if len(families) == 1 and len(edges) == 1:
            label = label.replace(" / ", "\n/ ").replace(" [", "\n[").replace("\n[else]", " [else]")
        lines.append(label + (f" {_visits(visits)}" if visits else ""))
    if tail is head and len(families) > 1:
        # self-loops: one line per outcome, each guard once on a line after its outcomes
        by_guard: dict[str, list[str]] = {}
        for family in families:
            outcome, _, guard = family[0].label.partition(" [")
            by_guard.setdefault(guard, []).append(outcome)
        visits = sum(edge.visits for edge in edges)
        lines = [line for guard, outcomes in by_guard.items() for line in (*outcomes, f"[{guard}")]
        if visits:
            lines.append(_visits(visits))
    parts: list[Mapping[str, str]] = [
        {
            "id": "row" + "_".join(str(edge.row) for edge in edges),
            "label": "\n".join(lines),
            "tooltip": "\n".join(edge.detail for edge in edges),
        },
        extra,
    ]
    if edges[0].interrupt:
        parts.append(s["interrupt"])
    if not any(edge.reachable for edge in edges):
        parts.append(s["unreachable"])
    if any(edge.visits for edge in edges):
        parts.append(s["visited_edge"])
    return f"  {tail.value} -> {head.value} [{_attrs(*parts)}];"


# --- Mermaid -------------------------------------------------------------------------------------

_MERMAID_CLASSES = {
    "terminal": "font-weight:bold,stroke-width:3px",
    "unreachable": "fill:#f4f4f4,color:#b4b4b4,stroke:#c8c8c8,stroke-dasharray:4 4",
    "visited": "fill:#dbe8ff,stroke:#1f5fd1,stroke-width:2px",
    "final": "stroke:#c62828,stroke-width:4px",
}


def to_mermaid(diagram: Plan | None = None) -> str:
    """Mermaid ``stateDiagram-v2`` text of a :class:`Plan` (by default, of the table as it is);
    pure. Unreachable rows are marked ``(unreachable)``, a drawn run's counts read ``×n``."""
    p = plan() if diagram is None else diagram
    lines = [
        "stateDiagram-v2",
        f"    %% {p.title}: generated from the transition table by fsm_agent.diagrams",
        "    [*] --> idle",
    ]
    for edge in p.edges:
        label = edge.label
        if not edge.reachable:
            label += " (unreachable)"
        if edge.visits:
            label += f" {_visits(edge.visits)}"
        lines.append(f"    {edge.source.value} --> {edge.dest.value} : {label}")
    lines.extend(f"    {n.state.value} --> [*]" for n in p.nodes if n.terminal)
    for node in p.nodes:
        if node.visits or node.final:
            label = _node_label(node, p.run).split("\n", 1)[1].replace("\n", ", ")
            lines.append(f"    {node.state.value} : {label}")
    lines.extend(_mermaid_classes(p.nodes))
    return "\n".join(lines) + "\n"


def _mermaid_classes(nodes: Sequence[Node]) -> list[str]:
    """The Mermaid class lines that style terminal, unreachable, visited and final states."""
    members: dict[str, list[str]] = {name: [] for name in _MERMAID_CLASSES}
    for node in nodes:
        for name, flag in (
            ("terminal", node.terminal),
            ("unreachable", not node.reachable),
            ("visited", node.visits > 0),
            ("final", node.final),
        ):
            if flag:
                members[name].append(node.state.value)
    lines = []
    for name, style in _MERMAID_CLASSES.items():
        if members[name]:
            lines.append(f"    classDef {name} {style}")
            lines.append(f"    class {','.join(members[name])} {name}")
    return lines
