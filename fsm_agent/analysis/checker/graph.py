"""Graph search over the explored abstract states: strongly connected components, shortest paths
inside a component, and the heaviest path through the component DAG. Pure; no machine."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

from ...machine.table import TERMINAL, Outcome, State
from .environment import _Key
from .report import PathMove

S = State

_Edge: TypeAlias = tuple[Outcome, int, int, int]
"""(outcome, row index, destination node, model calls made by the move)."""


@dataclass(slots=True)
class _Graph:
    """The explored graph: node keys, BFS tree (for shortest paths) and successor edges."""

    keys: list[_Key] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    via: list[Outcome | None] = field(default_factory=list)
    edges: list[list[_Edge]] = field(default_factory=list)
    complete: bool = True
    missing: list[tuple[int, Outcome]] = field(default_factory=list)

    def add(self, key: _Key, parent: int, outcome: Outcome | None) -> int:
        self.keys.append(key)
        self.parent.append(parent)
        self.via.append(outcome)
        self.edges.append([])
        return len(self.keys) - 1

    def path_to(self, node: int) -> list[PathMove]:
        """The BFS-tree path from ``idle`` to ``node`` (a shortest one)."""
        moves: list[PathMove] = []
        while self.parent[node] >= 0:
            outcome = self.via[node]
            assert outcome is not None
            node = self.parent[node]
            moves.append((self.keys[node][0], outcome))
        moves.reverse()
        return moves


def _sccs(adjacency: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Tarjan's strongly connected components, iteratively; components come sinks first."""
    count = len(adjacency)
    order = [-1] * count
    low = [0] * count
    on_stack = [False] * count
    component = [-1] * count
    components: list[list[int]] = []
    stack: list[int] = []
    counter = 0
    for start in range(count):
        if order[start] != -1:
            continue
        order[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack[start] = True
        work = [(start, 0)]
        while work:
            node, position = work[-1]
            successors = adjacency[node]
            if position < len(successors):
                work[-1] = (node, position + 1)
                nxt = successors[position]
                if order[nxt] == -1:
                    order[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack[nxt] = True
                    work.append((nxt, 0))
                elif on_stack[nxt]:
                    low[node] = min(low[node], order[nxt])
                continue
            work.pop()
            if work:
                above = work[-1][0]
                low[above] = min(low[above], low[node])
            if low[node] == order[node]:
                members: list[int] = []
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component[member] = len(components)
                    members.append(member)
                    if member == node:
                        break
                components.append(members)
    return component, components


def _path_within(
    graph: _Graph, start: int, goal: int, inside: Callable[[int], bool], skip_suspended: bool
) -> list[PathMove]:
    """A shortest path of at least one move from ``start`` to ``goal`` through nodes ``inside``."""
    back: dict[int, tuple[int, Outcome]] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if skip_suspended and graph.keys[node][0] is S.SUSPENDED:
            continue
        for outcome, _row, target, _cost in graph.edges[node]:
            if target in back or not inside(target):
                continue
            back[target] = (node, outcome)
            if target == goal:
                moves: list[PathMove] = []
                current = goal
                while True:
                    previous, via = back[current]
                    moves.append((graph.keys[previous][0], via))
                    current = previous
                    if current == start:
                        return moves[::-1]
            queue.append(target)
    raise AssertionError("no path inside a strongly connected component")  # pragma: no cover


def _depths(graph: _Graph) -> list[int]:
    depth = [0] * len(graph.keys)
    for node in range(1, len(graph.keys)):  # a parent is always added before its child
        depth[node] = depth[graph.parent[node]] + 1
    return depth


def _longest(
    graph: _Graph, component: list[int], components: list[list[int]], weight: Callable[[_Edge], int]
) -> list[PathMove]:
    """A heaviest path from ``idle`` through the component DAG (moves inside a component, which
    only cycles through ``suspended`` make, weigh nothing), ending in a terminal node if one
    is among the heaviest."""
    best: list[int | None] = [None] * len(components)
    entered: list[tuple[int, Outcome, int] | None] = [None] * len(components)
    best[component[0]] = 0
    for index in range(len(components) - 1, -1, -1):  # Tarjan lists sinks first
        here = best[index]
        if here is None:
            continue
        for node in components[index]:
            for edge in graph.edges[node]:
                outcome, _row, target, _cost = edge
                other = component[target]
                there = best[other]
                if other != index and (there is None or here + weight(edge) > there):
                    best[other] = here + weight(edge)
                    entered[other] = (node, outcome, target)
    top = max(value for value in best if value is not None)
    goal = min(
        (m for i, value in enumerate(best) if value == top for m in components[i]),
        key=lambda m: graph.keys[m][0] not in TERMINAL,
    )
    moves: list[PathMove] = []
    current = goal
    while True:
        index = component[current]
        arrival = entered[index]
        start = 0 if arrival is None else arrival[2]
        if start != current:
            inside = set(components[index])
            moves[:0] = _path_within(graph, start, current, inside.__contains__, False)
        if arrival is None:
            return moves
        node, outcome, _target = arrival
        moves.insert(0, (graph.keys[node][0], outcome))
        current = node


def _targets(graph: _Graph, *, within_run: bool) -> list[list[int]]:
    """Successor lists; ``within_run`` drops the moves out of ``suspended`` (a resume starts a
    new invocation of the run)."""
    return [
        [] if within_run and graph.keys[node][0] is S.SUSPENDED else [e[2] for e in out]
        for node, out in enumerate(graph.edges)
    ]
