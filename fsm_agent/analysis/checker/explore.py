"""The exhaustive search: every abstract state a policy allows, breadth-first from ``idle``
through the pure ``decide()``, and the failures read off the explored graph (a missing row, a
cycle, an unused row or state, a run over a model-call budget)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from ...machine.agent_machine import AgentMachine, IllegalMoveError, Move, default_machine
from ...machine.table import TERMINAL, Counters, Limits, Outcome, State, StopReason
from ...policy import (
    HookFailureMode,
    LoopGuardAction,
    Policy,
    RetryPolicy,
    ToolFailureMode,
    UsageLimits,
)
from ..bounds import Bounds
from .environment import _ZERO, _Env, _env, _Key, kernel_outcomes
from .graph import _depths, _Graph, _path_within, _sccs, _targets
from .report import Failure, FailureKind, PathMove, _counters_text

__all__ = ["replay"]

S, On = State, Outcome


def replay(
    path: Iterable[PathMove], limits: Limits, machine: AgentMachine = default_machine
) -> list[Move]:
    """The moves ``machine`` makes for ``path`` from fresh counters (raises
    :class:`~fsm_agent.machine.agent_machine.IllegalMoveError` if the path is not a legal run)."""
    counters = Counters()
    moves: list[Move] = []
    expected = S.IDLE
    for state, outcome in path:
        if state is not expected:
            raise IllegalMoveError(f"the path jumps from {expected.value!r} to {state.value!r}")
        move = machine.decide(state, outcome, counters, limits)
        moves.append(move)
        counters, expected = move.counters, move.dest
    return moves


def _explore(machine: AgentMachine, env: _Env, *, track_calls: bool, max_states: int) -> _Graph:
    """Breadth-first search of every node reachable from ``idle`` (keyed with the calls made
    so far when ``track_calls``: the usage limit on requests reads them)."""
    graph = _Graph()
    index: dict[_Key, int] = {}
    root: _Key = (S.IDLE, _ZERO, None, 0)
    index[root] = graph.add(root, -1, None)
    queue = deque([0])
    limits = env.limits
    while queue:
        node = queue.popleft()
        state, counters, stop, calls = graph.keys[node]
        out = graph.edges[node]
        for outcome in env.outcomes(state, counters, calls, stop):
            try:
                move = machine.decide(state, outcome, counters, limits)
            except IllegalMoveError:
                graph.missing.append((node, outcome))
                continue
            cost = env.calls(state, outcome, stop)
            total = calls + cost if track_calls and move.dest not in TERMINAL else 0
            key = (*env.node(move, stop), total)
            target = index.get(key)
            if target is None:
                if len(graph.keys) >= max_states:
                    graph.complete = False
                    return graph
                target = index[key] = graph.add(key, node, outcome)
                queue.append(target)
            out.append((outcome, move.row, target, cost))
    return graph


def _cycle_failure(graph: _Graph, members: list[int], kind: FailureKind, message: str) -> Failure:
    """The shortest lasso into a component: a shortest path to its nearest node, then a shortest
    cycle back to that node (one that avoids ``suspended`` for a non-termination)."""
    depth = _depths(graph)
    entry = min(members, key=depth.__getitem__)
    inside = set(members)
    prefix = graph.path_to(entry)
    skip_suspended = kind is FailureKind.NON_TERMINATION
    loop = _path_within(graph, entry, entry, inside.__contains__, skip_suspended)
    state, counters, _stop, _calls = graph.keys[entry]
    return Failure(
        kind,
        f"{message}; it loops through {state.value} (counters {_counters_text(counters)})",
        (*prefix, *loop),
        len(prefix),
    )


def _totals(
    path: Sequence[PathMove], env: _Env, machine: AgentMachine, tool_turns: bool
) -> list[int]:
    """The running count of model calls (or tool turns) along ``path``."""
    totals: list[int] = []
    total = 0
    pending: StopReason | None = None
    for move in replay(path, env.limits, machine):
        if tool_turns:
            total += move.outcome is On.TOOL_CALLS
        else:
            total += env.calls(move.source, move.outcome, pending)
        pending = (move.stop or pending) if move.dest is S.FINALIZING else None
        totals.append(total)
    return totals


def _reference_coverage(machine: AgentMachine, max_states: int) -> tuple[set[int], set[State]]:
    """The rows and states that runs under two permissive reference policies use (verification
    and output validation off, then both on; a fallback chain of two models; every interrupt
    enabled; small limits that do not mask each other). A row or state that a checked policy
    leaves unused but these use is disabled by that policy."""
    reference = Policy(
        max_steps=4,
        retry=RetryPolicy(max_retries=1),
        max_consecutive_errors=2,
        max_compaction_attempts=1,
        max_verifications=1,
        tool_failure_mode=ToolFailureMode.FAIL,
        hook_failure_mode=HookFailureMode.FAIL,
        max_repeated_tool_calls=3,
        on_repeated_tool_calls=LoopGuardAction.FINALIZE,
        max_wall_clock_s=1.0,
        usage_limits=UsageLimits(max_requests=100),
    )
    rows: set[int] = set()
    states: set[State] = set()
    for verification in (False, True):
        env = _env(
            machine,
            reference,
            verification,
            stop_conditions=True,
            models=2,
            output_validation=verification,
        )
        graph = _explore(machine, env, track_calls=False, max_states=max_states)
        rows |= _used_rows(graph)
        states |= {key[0] for key in graph.keys}
    return rows, states


def _used_rows(graph: _Graph) -> set[int]:
    return {row for out in graph.edges for _o, row, _t, _c in out}


def _missing_row_failures(graph: _Graph) -> list[Failure]:
    """The outcomes the kernel can report where the table has no row: one failure each."""
    return _first_of_each(
        graph,
        graph.missing,
        FailureKind.MISSING_ROW,
        "the kernel can report {outcome!r} in {state!r} and no row takes it",
    )


def _unchecked_answer_failures(graph: _Graph, limits: Limits) -> list[Failure]:
    """Where answers must pass a check (a verifier, the done-tool requirement, an output type),
    each move that ends a run ``completed`` from anywhere but ``verifying``: one failure per
    state and outcome."""
    if not (limits.verification or limits.output_validation):
        return []
    found = (
        (node, outcome)
        for node, out in enumerate(graph.edges)
        if graph.keys[node][0] is not S.VERIFYING
        for outcome, _row, target, _calls in out
        if graph.keys[target][0] is S.FINALIZING and graph.keys[target][2] is StopReason.COMPLETED
    )
    return _first_of_each(
        graph,
        found,
        FailureKind.UNCHECKED_ANSWER,
        "{outcome!r} in {state!r} ends the run 'completed' without passing 'verifying'",
    )


def _first_of_each(
    graph: _Graph, found: Iterable[tuple[int, Outcome]], kind: FailureKind, says: str
) -> list[Failure]:
    """One failure of ``kind`` per state and outcome in ``found`` (nodes and the outcome
    reported there, in breadth-first order: the first found has the shortest path), its
    message ``says`` with the state's and the outcome's values."""
    failures: list[Failure] = []
    seen: set[tuple[State, Outcome]] = set()
    for node, outcome in found:
        state = graph.keys[node][0]
        if (state, outcome) not in seen:
            seen.add((state, outcome))
            message = says.format(state=state.value, outcome=outcome.value)
            failures.append(Failure(kind, message, (*graph.path_to(node), (state, outcome))))
    return failures


def _cycle(
    graph: _Graph, full: tuple[list[int], list[list[int]]], computed: Bounds
) -> Failure | None:
    """A non-termination counterexample, or an unbounded-work one, or ``None``; ``full`` are
    the strongly connected components of the whole graph."""
    _component, components = full
    whole = _targets(graph, within_run=False)
    if all(len(c) == 1 and c[0] not in whole[c[0]] for c in components):
        return None
    within_run = _targets(graph, within_run=True)
    _component, run_components = _sccs(within_run)
    cyclic = [c for c in run_components if len(c) > 1 or c[0] in within_run[c[0]]]
    if cyclic:
        depth = _depths(graph)
        why = (
            "" if computed.max_model_calls is not None else f" ({computed.model_calls_derivation})"
        )
        return _cycle_failure(
            graph,
            min(cyclic, key=lambda members: min(depth[m] for m in members)),
            FailureKind.NON_TERMINATION,
            f"{len(cyclic)} cycle(s) that never reach a terminal or suspended state{why}",
        )
    for members in components:
        inside = set(members)
        if any(e[3] and e[2] in inside for m in members for e in graph.edges[m]):
            return _cycle_failure(
                graph,
                members,
                FailureKind.UNBOUNDED_WORK,
                "a run that suspends and resumes can make model calls forever",
            )
    return None


def _coverage(
    graph: _Graph, machine: AgentMachine, max_states: int
) -> tuple[list[Failure], tuple[State, ...], tuple[int, ...]]:
    """Failures for states and rows that no run reaches, under this policy or the reference
    policies; and the states and rows only this policy leaves unused (disabled by it)."""
    used = _used_rows(graph)
    reached = {key[0] for key in graph.keys}
    reference_rows, reference_states = _reference_coverage(machine, max_states)
    failures = [
        Failure(
            FailureKind.UNREACHABLE_STATE,
            f"no run reaches state {state.value!r}, under this policy or a permissive one",
        )
        for state in State
        if state not in reached | reference_states
    ]
    for i, row in enumerate(machine.rows):
        if i in used | reference_rows:
            continue
        label = f"row {i} ({row.source.value} --{row.outcome.value}--> {row.dest.value}"
        label += f" if {row.guard_name})" if row.guard_name else ")"
        reason = (
            f"the kernel never reports {row.outcome.value!r} in {row.source.value!r}"
            if row.outcome not in kernel_outcomes(machine, row.source)
            else "no run uses it, under this policy or a permissive one"
        )
        failures.append(Failure(FailureKind.UNUSED_ROW, f"{label}: {reason}"))
    return (
        failures,
        tuple(s for s in State if s in reference_states and s not in reached),
        tuple(i for i in sorted(reference_rows) if i not in used),
    )


def _budget_failures(
    machine: AgentMachine, env: _Env, budget: int, max_states: int
) -> list[Failure]:
    """The shortest run that makes more than ``budget`` model calls, if there is one.

    Breadth-first over (node, calls), keeping a node only when it arrives with more calls than
    any earlier, no longer, arrival: what follows a node does not depend on the calls made before
    it (the usage limit on requests only cuts runs that are over the budget already)."""
    entries: list[tuple[State, Counters, StopReason | None, int, int, Outcome | None]] = [
        (S.IDLE, _ZERO, None, 0, -1, None)
    ]
    most: dict[tuple[State, Counters, StopReason | None], int] = {}
    queue = deque([0])
    while queue:
        entry = queue.popleft()
        state, counters, stop, calls, _parent, _via = entries[entry]
        for outcome in env.outcomes(state, counters, calls, stop):
            try:
                move = machine.decide(state, outcome, counters, env.limits)
            except IllegalMoveError:
                continue  # reported as a missing row
            total = calls + env.calls(state, outcome, stop)
            if total > budget:
                moves: list[PathMove] = [(state, outcome)]
                while entry > 0:
                    _s, _c, _p, _n, parent, via = entries[entry]
                    assert via is not None
                    entry = parent
                    moves.append((entries[entry][0], via))
                return [
                    Failure(
                        FailureKind.OVER_BUDGET,
                        f"a run can make more than {budget} model calls",
                        tuple(reversed(moves)),
                    )
                ]
            key = env.node(move, stop)
            if most.get(key, -1) >= total:
                continue
            if len(entries) >= max_states:
                return [
                    Failure(
                        FailureKind.STATE_LIMIT,
                        f"the search for a run over the budget of {budget} model calls stopped "
                        f"after {max_states:,} states",
                    )
                ]
            most[key] = total
            entries.append((*key, total, entry, outcome))
            queue.append(len(entries) - 1)
    return []
