"""The explorer's worst case of a composition: a parent whose tools include other agents.

The parent's graph is explored as :func:`~fsm_agent.analysis.checker.check` explores it; a
child's run is one step of the parent's ``dispatching``, so the search walks the parent's graph
with one more bit per node: whether the path has left ``dispatching`` yet (tools ran). A path
that has can have run up to ``max_tool_calls`` tools, each of them a call of the costliest
child, so its model calls are its own plus that many times the child's worst case (explored the
same way). The heaviest path over (node, bit) is the composition's worst case; the parent's
``usage_limits.max_requests`` caps it, as the children share it. This is the explorer's side of
the composed bound that :func:`~fsm_agent.analysis.bounds.bounds` computes from formulas.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...machine.agent_machine import AgentMachine, default_machine
from ...machine.table import State
from ...policy import Policy
from . import DEFAULT_MAX_STATES
from .environment import _env
from .explore import _explore
from .graph import _sccs, _targets

__all__ = ["explored_model_calls"]


def explored_model_calls(
    policy: Policy,
    *,
    children: Sequence[int | None] = (),
    machine: AgentMachine = default_machine,
    verification: bool = False,
    stop_conditions: bool = True,
    models: int = 1,
    output_validation: bool = False,
    max_states: int = DEFAULT_MAX_STATES,
) -> int | None:
    """The most model calls a run under ``policy`` makes, by exhaustive search, when its tools
    include agents whose own worst cases are ``children`` (``None``: unbounded); ``None`` when
    the search finds no bound (a cycle of model calls, or a child that may be called without
    limit)."""
    env = _env(machine, policy, verification, stop_conditions, models, output_validation)
    graph = _explore(machine, env, track_calls=env.max_requests is not None, max_states=max_states)
    component, components = _sccs(_targets(graph, within_run=False))
    if not graph.complete or any(
        edge[3] and component[edge[2]] == component[node]
        for node, edges in enumerate(graph.edges)
        for edge in edges
    ):
        return None  # a model call inside a cycle: no bound
    known = [c for c in children if c is not None]
    times = policy.max_tool_calls
    bonus: int | None = 0
    if children:
        bonus = None if times is None or len(known) < len(children) else times * max(known)
    before: list[int | None] = [None] * len(components)  # tools have not run on the path
    after: list[int | None] = [None] * len(components)  # they have
    before[component[0]] = 0
    for index in range(len(components) - 1, -1, -1):  # Tarjan lists sinks first
        if any(graph.keys[node][0] is State.DISPATCHING for node in components[index]):
            after[index] = _most(after[index], before[index])  # a cycle through dispatching
        for node in components[index]:
            ran = graph.keys[node][0] is State.DISPATCHING
            for _outcome, _row, target, cost in graph.edges[node]:
                other = component[target]
                if other == index:
                    continue
                for here, tools_ran in ((before[index], ran), (after[index], True)):
                    if here is None:
                        continue
                    lands = after if tools_ran else before
                    lands[other] = _most(lands[other], here + cost)
    reached_after = [value for value in after if value is not None]
    total: int | None = max(value for value in before if value is not None)
    if reached_after:
        total = None if bonus is None else max(total or 0, max(reached_after) + bonus)
    requests = policy.usage_limits.max_requests
    return requests if total is None or (requests is not None and requests < total) else total


def _most(a: int | None, b: int | None) -> int | None:
    """The larger of two path weights (``None``: not reached)."""
    if a is None:
        return b
    return a if b is None else max(a, b)
