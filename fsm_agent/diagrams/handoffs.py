"""A handoff graph drawn, with a run's handoffs on it; pure.

The agents that may hold a run's conversation are a cluster: the agent the run starts with
(``""`` in the graph, drawn under ``entry``'s label) and each agent named by a handoff, one edge
per declared handoff, labelled with the tool that makes it. A run's ``handoff_trace`` colours the
agents that held the conversation and numbers each handoff in the order it was made, so the
drawing says who held the conversation when. Beside the cluster, the note gives the bound of the
handoffs; every turn, whoever holds the conversation, is a turn of the one loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..run.state import HandoffChange

__all__ = ["handoffs_dot", "handoffs_mermaid"]

_VISITED = 'style="rounded,filled", fillcolor="#dbe8ff", color="#1f5fd1"'


def _node(name: str) -> str:
    """A node id for an agent name (``""``: the agent the run starts with)."""
    return "agent_start" if not name else "agent_" + name.replace("-", "_")


def _order(
    path: Sequence[HandoffChange], aliases: Mapping[str, str]
) -> tuple[set[str], dict[tuple[str, str], list[int]]]:
    """The agents that held the conversation, and the numbers (1, 2, ...) of the handoffs made
    along each edge (an edge by its source's node and its handoff's name)."""
    held = {""} if path else set()
    made: dict[tuple[str, str], list[int]] = {}
    for number, change in enumerate(path, start=1):
        held.add(aliases.get(change.dest, change.dest))
        source = change.source or ""
        made.setdefault((aliases.get(source, source), change.dest), []).append(number)
    return held, made


def _edges(
    graph: Mapping[str, Sequence[str]], aliases: Mapping[str, str]
) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The nodes (agents, each once) and the edges (source node, dest node, handoff name)."""
    nodes: list[str] = []
    edges: list[tuple[str, str, str]] = []
    for source, dests in graph.items():
        here = aliases.get(source, source)
        if here not in nodes:
            nodes.append(here)
        for dest in dests:
            there = aliases.get(dest, dest)
            if there not in nodes:
                nodes.append(there)
            if (here, there, dest) not in edges:
                edges.append((here, there, dest))
    return nodes, edges


def _label(name: str, entry: str) -> str:
    return name or entry


def handoffs_mermaid(
    graph: Mapping[str, Sequence[str]],
    path: Sequence[HandoffChange] = (),
    *,
    entry: str = "start",
    bound: str | None = None,
    aliases: Mapping[str, str] | None = None,
) -> str:
    """Mermaid ``flowchart`` text: who may hand the conversation to whom (``graph``: each
    agent's name, ``""`` for the agent the run starts with, to the names it may hand off to),
    a run's handoffs numbered in order, and ``bound`` (the bound's line) as a note.
    ``aliases`` draws a name as another's node (a handoff back to the agent the run starts
    with: its name to ``""``)."""
    same = aliases or {}
    held, made = _order(path, same)
    nodes, edges = _edges(graph, same)
    lines = ["flowchart LR", '    subgraph chain ["who holds the conversation"]']
    for name in nodes:
        lines.append(f'        {_node(name)}["{_label(name, entry)}"]')
    for source, dest, name in edges:
        numbers = made.get((source, name), [])
        text = f"transfer_to_{name}" + (f" #{','.join(map(str, numbers))}" if numbers else "")
        lines.append(f'        {_node(source)} -- "{text}" --> {_node(dest)}')
    lines.append("    end")
    if bound is not None:
        lines.append(f'    note["{bound}"] -.- chain')
    lines.append("    classDef visited fill:#dbe8ff,stroke:#1f5fd1,stroke-width:2px")
    lines.append("    classDef entry stroke-width:3px")
    lines.append(f"    class {_node('')} entry")
    for name in nodes:
        if name in held:
            lines.append(f"    class {_node(name)} visited")
    return "\n".join(lines) + "\n"


def handoffs_dot(
    graph: Mapping[str, Sequence[str]],
    path: Sequence[HandoffChange] = (),
    *,
    entry: str = "start",
    bound: str | None = None,
    aliases: Mapping[str, str] | None = None,
) -> str:
    """Graphviz DOT text of :func:`handoffs_mermaid`'s drawing."""
    same = aliases or {}
    held, made = _order(path, same)
    nodes, edges = _edges(graph, same)
    lines = [
        "digraph handoffs {",
        '  rankdir=LR; fontname="Helvetica";',
        '  node [shape=box, style=rounded, fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
        '  subgraph cluster_chain {\n    label="who holds the conversation"; style="rounded";',
    ]
    for name in nodes:
        attrs = [f'label="{_label(name, entry)}"']
        if not name:
            attrs.append("penwidth=2")
        if name in held:
            attrs.append(_VISITED)
        lines.append(f"    {_node(name)} [{', '.join(attrs)}];")
    for source, dest, name in edges:
        numbers = made.get((source, name), [])
        text = f"transfer_to_{name}" + (f" #{','.join(map(str, numbers))}" if numbers else "")
        style = ', color="#1f5fd1", penwidth=2.2' if numbers else ""
        lines.append(f'    {_node(source)} -> {_node(dest)} [label="{text}"{style}];')
    lines.append("  }")
    if bound is not None:
        lines.append(f'  note [shape=note, label="{bound}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
