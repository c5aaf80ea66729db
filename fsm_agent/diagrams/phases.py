"""A phase table drawn with the loop beside it, and a run's path through both; pure.

The task machine is a cluster of the user's phases (the initial phase marked, goal phases
double-bordered, each transition labelled with its guard, budget moves dashed); beside it, the
loop every turn of every phase runs, drawn from the loop's own table (one edge per pair of
states). A run's path colours the phases it entered and counts each phase move (its
``phase_trace``), and colours the loop states it visited and counts each loop move (its
``trace``, as ``(source, dest)`` pairs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..machine.table import TABLE, State
from ..phases.table import PhaseChange, Phases

__all__ = ["phases_dot", "phases_mermaid"]

_LOOP_STATES = [s for s in State if s is not State.IDLE]
_VISITED = ', style="rounded,filled", fillcolor="#dbe8ff", color="#1f5fd1"'


def _moves(path: Sequence[PhaseChange]) -> tuple[Counter[str], Counter[tuple[str, str]]]:
    entered = Counter(change.dest for change in path)
    moved = Counter((c.source, c.dest) for c in path if c.source is not None)
    return entered, moved


def _loop_edges() -> list[tuple[State, State]]:
    edges: list[tuple[State, State]] = []
    for row in TABLE:
        pair = (row.source, row.dest)
        if row.source is not State.IDLE and pair not in edges:
            edges.append(pair)
    return edges


def _label(phases: Phases, index: int) -> str:
    t = phases.transitions[index]
    if t.label:
        return t.label
    if t.guard is not None:
        return getattr(t.guard, "__name__", "guard")
    return ""


def phases_mermaid(
    phases: Phases,
    path: Sequence[PhaseChange] = (),
    *,
    loop: bool = True,
    loop_path: Sequence[tuple[State, State]] = (),
) -> str:
    """Mermaid ``stateDiagram-v2`` text: the phases, the loop beside them, a run's path."""
    entered, moved = _moves(path)
    looped = Counter(loop_path)
    lines = ["stateDiagram-v2", "    direction LR", '    state "task phases" as task {']
    lines.append(f"        [*] --> {phases.initial}")
    for i, t in enumerate(phases.transitions):
        label = _label(phases, i)
        count = moved.get((t.source, t.dest), 0)
        text = " ".join(x for x in (label, f"x{count}" if count else "") if x)
        lines.append(f"        {t.source} --> {t.dest}" + (f" : {text}" if text else ""))
    for p in phases.phases:
        if p.on_budget is not None:
            lines.append(f"        {p.name} --> {p.on_budget} : budget {p.max_steps} spent")
    for goal in sorted(phases.goals):
        lines.append(f"        {goal} --> [*]")
    lines.append("    }")
    if loop:
        lines.append('    state "each turn: the loop" as loop {')
        for source, dest in _loop_edges():
            count = looped.get((source, dest), 0)
            label = f" : x{count}" if count else ""
            lines.append(f"        {source.value} --> {dest.value}{label}")
        lines.append("    }")
        lines.append("    task --> loop : every turn of a phase")
    lines.append("    classDef goal font-weight:bold,stroke-width:3px")
    lines.append("    classDef visited fill:#dbe8ff,stroke:#1f5fd1,stroke-width:2px")
    for goal in sorted(phases.goals):
        lines.append(f"    class {goal} goal")
    visited_loop = sorted({s.value for pair in looped for s in pair if s is not State.IDLE})
    for name in [*entered, *visited_loop]:
        lines.append(f"    class {name} visited")
    return "\n".join(lines) + "\n"


def phases_dot(
    phases: Phases,
    path: Sequence[PhaseChange] = (),
    *,
    loop: bool = True,
    loop_path: Sequence[tuple[State, State]] = (),
) -> str:
    """Graphviz DOT text: the phases in one cluster, the loop in another, a run's path."""
    entered, moved = _moves(path)
    looped = Counter(loop_path)
    visited_loop = {s for pair in looped for s in pair}
    lines = [
        "digraph phases {",
        "  compound=true; rankdir=LR;",
        '  node [shape=box, style=rounded, fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10];',
        '  subgraph cluster_task {\n    label="task phases"; style="rounded";',
        '    start [shape=point, label=""];',
    ]
    for p in phases.phases:
        attrs = [f'label="{p.name}' + (f"\\n≤ {p.max_steps} turns" if p.max_steps else "") + '"']
        if p.name in phases.goals:
            attrs.append("peripheries=2")
        if p.name in entered:
            attrs.append(_VISITED.lstrip(", "))
        lines.append(f"    {p.name} [{', '.join(attrs)}];")
    lines.append(f"    start -> {phases.initial};")
    for i, t in enumerate(phases.transitions):
        label = _label(phases, i)
        count = moved.get((t.source, t.dest), 0)
        text = " ".join(x for x in (label, f"×{count}" if count else "") if x)
        style = ', color="#1f5fd1", penwidth=2.2' if count else ""
        lines.append(f'    {t.source} -> {t.dest} [label="{text}"{style}];')
    for p in phases.phases:
        if p.on_budget is not None:
            lines.append(
                f'    {p.name} -> {p.on_budget} [style=dashed, label="budget {p.max_steps} spent"];'
            )
    lines.append("  }")
    if loop:
        lines.append('  subgraph cluster_loop {\n    label="each turn: the loop"; style=dashed;')
        for state in _LOOP_STATES:
            style = _VISITED if state in visited_loop else ""
            lines.append(f'    loop_{state.value} [label="{state.value}"{style}];')
        for source, dest in _loop_edges():
            count = looped.get((source, dest), 0)
            taken = f' [label="×{count}", color="#1f5fd1", penwidth=2.2]' if count else ""
            lines.append(f"    loop_{source.value} -> loop_{dest.value}{taken};")
        lines.append("  }")
        lines.append(
            f"  {phases.initial} -> loop_calling [style=dotted, arrowhead=none, "
            'ltail=cluster_task, lhead=cluster_loop, label="every turn"];'
        )
    lines.append("}")
    return "\n".join(lines) + "\n"
