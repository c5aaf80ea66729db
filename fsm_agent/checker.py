"""The exhaustive bounded model checker: every run a policy allows, through the pure ``decide()``.

The checker plays the kernel's part with abstract outcomes: in each state it tries everything
that state's handler can report (each finish reason, retryable and fatal model errors, every
tool-turn result, verifier accept and reject, compaction within or over budget) and every
interrupt the driver can inject there (cancel; deadline, usage limit and stop condition where a
policy or agent enables them). It explores the resulting graph breadth-first from ``idle``, one
node per (state, counters, pending stop reason), and proves for one policy:

1. every path ends in ``done``, ``aborted`` or ``suspended`` (no cycle avoids ``suspended``, and
   the kernel never reports an outcome the table has no row for);
2. no path makes more model calls or tool turns than :func:`fsm_agent.bounds.bounds` allows (a
   ``calling`` handler run is one call; finalizing with stop reason ``max_steps`` is one more
   when ``summarize_on_max_steps``);
3. every state is reached and every row is used, unless the policy disables it: a state or row
   this policy leaves unused but a permissive reference policy uses is listed as disabled; one
   that no run uses under either is a failure.

Counters are clamped at their limits when the table uses only the built-in guards: those guards
compare a counter with its limit, so every value at or past the limit behaves alike and clamping
merges nodes without changing which moves exist (a bisimulation). The call count stays exact: it
is the longest path through the finite graph, whose only allowed cycles pass through
``suspended`` and make no model call. A table with other guards is explored unclamped, up to
``max_states``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeAlias

from .bounds import Bounds, bounds
from .errors import PolicyError
from .machine import AgentMachine, IllegalMoveError, Move, default_machine
from .policy import (
    HookFailureMode,
    LoopGuardAction,
    Policy,
    RetryPolicy,
    ToolFailureMode,
    UsageLimits,
    limits_of,
)
from .table import GUARDS, TERMINAL, Counters, Limits, Outcome, State, StopReason

__all__ = [
    "DEFAULT_MAX_STATES",
    "CheckReport",
    "CheckVerdict",
    "Failure",
    "FailureKind",
    "PathMove",
    "add_check_arguments",
    "check",
    "replay",
    "run_check_command",
]

DEFAULT_MAX_STATES = 1_000_000
"""Abstract states explored before the checker gives up (the default policy needs about 22,000)."""

PathMove: TypeAlias = tuple[State, Outcome]
"""One move of a path: the state and the outcome reported there."""

S, On = State, Outcome
_CALL_OUTCOMES = (
    On.TOOL_CALLS,
    On.STOP,
    On.LENGTH,
    On.CONTENT_FILTER,
    On.OTHER,
    On.RETRYABLE_ERROR,
    On.FINISH_ERROR,
    On.FATAL_ERROR,
)
_HANDLER_OUTCOMES: dict[State, tuple[Outcome, ...]] = {
    S.IDLE: (On.START,),
    S.COMPACTING: (On.PROCEED, On.COMPACTED, On.CANNOT_COMPACT),
    S.CALLING: _CALL_OUTCOMES,
    S.DISPATCHING: (
        On.TOOLS_DONE,
        On.TOOLS_REPEATED,
        On.TOOLS_FAILED,
        On.TOOL_ABORT,
        On.DONE_TOOL,
        On.NEEDS_HUMAN,
    ),
    S.VERIFYING: (On.VERIFIED, On.REJECTED),
    S.SUSPENDED: (On.RESUME,),
    S.FINALIZING: (On.FINALIZED,),
}
"""What each state's handler can report."""
_DETOURS = frozenset({On.TOOLS_REPEATED, On.TOOLS_FAILED, On.COMPACTED, On.FINISH_ERROR})
"""Outcomes the worst path avoids when it can (they change nothing about its cost)."""
_LIMIT_INTERRUPTS = (On.DEADLINE, On.USAGE_EXCEEDED, On.STOP_CONDITION)
_WORKING = frozenset({S.COMPACTING, S.CALLING, S.DISPATCHING, S.VERIFYING})
"""The states in which the driver checks the deadline, the usage limits and stop conditions."""


def _kernel_outcomes(state: State) -> tuple[Outcome, ...]:
    """Every outcome the kernel can report in ``state``: interrupts first (cancel and a failing
    hook anywhere; the limits where work happens), then the handler's."""
    if state in TERMINAL:
        return ()
    limits = _LIMIT_INTERRUPTS if state in _WORKING else ()
    return (On.CANCEL, On.HOOK_ERROR, *limits, *_HANDLER_OUTCOMES[state])


class CheckVerdict(StrEnum):
    """What the check established."""

    PROVEN = "proven"  # every claim holds for this policy
    VIOLATED = "violated"  # at least one claim fails; each failure has a counterexample
    INCONCLUSIVE = "inconclusive"  # the state limit stopped the search before a proof


class FailureKind(StrEnum):
    """Which claim a counterexample breaks."""

    NON_TERMINATION = "non_termination"  # a cycle that avoids suspended: the run never ends
    UNBOUNDED_WORK = "unbounded_work"  # a cycle through suspended that makes model calls
    MISSING_ROW = "missing_row"  # the kernel can report an outcome the table has no row for
    BOUND_EXCEEDED = "bound_exceeded"  # a path makes more calls or tool turns than the bound
    OVER_BUDGET = "over_budget"  # a path makes more model calls than the caller's budget
    UNREACHABLE_STATE = "unreachable_state"  # no run reaches it, under any policy tried
    UNUSED_ROW = "unused_row"  # no run uses it, under any policy tried
    STATE_LIMIT = "state_limit"  # the search stopped at max_states (not a proof either way)


@dataclass(frozen=True, slots=True)
class Failure:
    """One broken claim and its shortest counterexample.

    ``path`` is the moves from ``idle``; for a cycle, ``path[loop_from:]`` repeats forever.
    """

    kind: FailureKind
    message: str
    path: tuple[PathMove, ...] = ()
    loop_from: int | None = None


@dataclass(frozen=True, slots=True)
class CheckReport:
    """The result of :func:`check`: the verdict, the search's size, the bounds and the failures."""

    verdict: CheckVerdict
    policy: Policy
    limits: Limits
    bounds: Bounds
    states_explored: int
    moves_explored: int
    complete: bool  # every reachable abstract state was explored (max_states was not hit)
    longest_path: tuple[PathMove, ...]  # a path with the most model calls (empty with a cycle)
    longest_path_model_calls: int | None
    failures: tuple[Failure, ...]
    disabled_states: tuple[
        State, ...
    ]  # unreached under this policy, reached under a permissive one
    disabled_rows: tuple[int, ...]  # row indices likewise unused under this policy only
    stop_reasons: tuple[StopReason, ...]  # every stop reason some path ends with
    elapsed_s: float
    machine: AgentMachine = field(default=default_machine, repr=False, compare=False)

    @property
    def proven(self) -> bool:
        """Every claim holds."""
        return self.verdict is CheckVerdict.PROVEN

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "verdict": self.verdict.value,
            "policy": self.policy.model_dump(mode="json"),
            "verification": self.limits.verification,
            "states_explored": self.states_explored,
            "moves_explored": self.moves_explored,
            "complete": self.complete,
            "elapsed_s": round(self.elapsed_s, 3),
            "bounds": {
                "max_model_calls": self.bounds.max_model_calls,
                "model_calls_derivation": self.bounds.model_calls_derivation,
                "max_tool_turns": self.bounds.max_tool_turns,
                "tool_turns_derivation": self.bounds.tool_turns_derivation,
                "max_tool_executions": self.bounds.max_tool_executions,
                "tool_executions_derivation": self.bounds.tool_executions_derivation,
                "max_wall_clock_s": self.bounds.max_wall_clock_s,
                "wall_clock_derivation": self.bounds.wall_clock_derivation,
            },
            "longest_path": {
                "model_calls": self.longest_path_model_calls,
                "moves": [[s.value, o.value] for s, o in self.longest_path],
            },
            "failures": [
                {
                    "kind": f.kind.value,
                    "message": f.message,
                    "path": [[s.value, o.value] for s, o in f.path],
                    "loop_from": f.loop_from,
                }
                for f in self.failures
            ],
            "disabled_states": [s.value for s in self.disabled_states],
            "disabled_rows": list(self.disabled_rows),
            "stop_reasons": [r.value for r in self.stop_reasons],
        }

    def format(self) -> str:
        """The report as text: verdict, search size, bounds, longest path, counterexamples."""
        features = "verification on" if self.limits.verification else "verification off"
        out = [
            f"check: {self.verdict.value.upper()} ({features})",
            f"  abstract states explored: {self.states_explored:,} "
            f"({self.moves_explored:,} moves) in {self.elapsed_s:.2f} s",
            "  bounds:",
            *(f"    {line}" for line in self.bounds.lines()),
        ]
        if self.longest_path:
            partial = "" if self.complete else " (of the part explored)"
            out.append(
                f"  longest path{partial}: {self.longest_path_model_calls} model calls, "
                f"{len(self.longest_path)} moves:"
            )
            out.extend(f"    {line}" for line in self._path_lines(self.longest_path))
        if self.stop_reasons:
            out.append("  stop reasons reached: " + ", ".join(r.value for r in self.stop_reasons))
        if self.disabled_states or self.disabled_rows:
            out.append(
                "  disabled by this policy: states ["
                + ", ".join(s.value for s in self.disabled_states)
                + "], rows ["
                + ", ".join(map(str, self.disabled_rows))
                + "]"
            )
        for failure in self.failures:
            out.append(f"  FAILED {failure.kind.value}: {failure.message}")
            if failure.path:
                out.append(f"    counterexample ({len(failure.path)} moves):")
                out.extend(f"      {line}" for line in self._path_lines(failure.path))
                if failure.loop_from is not None:
                    out.append(f"      ...then moves {failure.loop_from + 1}.. repeat forever")
        return "\n".join(out)

    def _path_lines(self, path: Sequence[PathMove]) -> list[str]:
        tokens: list[str] = []
        counters, stop = Counters(), None
        state = S.IDLE
        for source, outcome in path:
            try:
                move = self.machine.decide(source, outcome, counters, self.limits)
            except IllegalMoveError:
                tokens.append(f"{source.value} --{outcome.value}--> (no row)")
                break
            tokens.append(f"{source.value} --{outcome.value}--> {move.dest.value}")
            counters, state, stop = move.counters, move.dest, move.stop or stop
        ending = f", stop reason {stop.value}" if stop is not None else ""
        return [
            " · ".join(_compress(tokens)),
            f"ends in {state.value}{ending}, counters {_counters_text(counters)}",
        ]


def _counters_text(counters: Counters) -> str:
    return " ".join(
        f"{name}={value}" for name, value in zip(Counters._fields, counters, strict=True)
    )


def _compress(tokens: list[str]) -> list[str]:
    """Runs of a repeated block of moves written once with ``×n`` (blocks of up to 12 moves)."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        best_period, best_count = 1, 1
        for period in range(1, min(12, (len(tokens) - i) // 2) + 1):
            block = tokens[i : i + period]
            count = 1
            while tokens[i + count * period : i + (count + 1) * period] == block:
                count += 1
            if count > 1 and period * count > best_period * best_count:
                best_period, best_count = period, count
        block = tokens[i : i + best_period]
        if best_count == 1:
            out.append(block[0])
        elif best_period == 1:
            out.append(f"{block[0]} ×{best_count}")
        else:
            out.append(f"[{' · '.join(_compress(block))}] ×{best_count}")
        i += best_period * best_count
    return out


def replay(
    path: Iterable[PathMove], limits: Limits, machine: AgentMachine = default_machine
) -> list[Move]:
    """The moves ``machine`` makes for ``path`` from fresh counters (raises
    :class:`~fsm_agent.machine.IllegalMoveError` if the path is not a legal run)."""
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


# --- the search -----------------------------------------------------------------------------

_Key: TypeAlias = tuple[State, Counters, StopReason | None, int]
"""A node: state, (clamped) counters, the stop reason pending in finalizing/terminal, calls."""
_Edge: TypeAlias = tuple[Outcome, int, int, int]
"""(outcome, row index, destination node, model calls made by the move)."""
_ZERO = Counters()


@dataclass(frozen=True, slots=True)
class _Env:
    """The kernel as the checker plays it: which outcomes happen where, what a move costs."""

    limits: Limits
    offered: frozenset[Outcome]  # the outcomes this policy and these features can produce
    summarize: bool
    max_requests: int | None  # the usage limit that alone bounds calls when max_steps is None
    caps: Counters | None  # clamp counters here (None: the table has guards we cannot read)
    memoryless: frozenset[State]  # states whose rows neither read nor change the counters

    def outcomes(self, state: State, counters: Counters, calls: int) -> list[Outcome]:
        """The outcomes the kernel can report in this node."""
        result = []
        for outcome in _kernel_outcomes(state):
            if outcome not in self.offered:
                continue
            if (
                outcome is On.COMPACTED
                and counters.compactions >= self.limits.max_compaction_attempts
            ):
                continue  # the handler reports cannot_compact once the attempts are spent
            if (
                state is S.CALLING
                and outcome in _CALL_OUTCOMES
                and self.max_requests is not None
                and calls >= self.max_requests
            ):
                continue  # the driver reports usage_exceeded before another request
            result.append(outcome)
        return result

    def calls(self, state: State, outcome: Outcome, stop: StopReason | None) -> int:
        """Model calls made by this move: one per calling handler run, one for the summary."""
        if state is S.CALLING and outcome in _CALL_OUTCOMES:
            return 1
        if (
            state is S.FINALIZING
            and outcome is On.FINALIZED
            and stop is StopReason.MAX_STEPS
            and self.summarize
        ):
            return 1
        return 0

    def node(
        self, move: Move, stop: StopReason | None
    ) -> tuple[State, Counters, StopReason | None]:
        """Where ``move`` leads, as the search keys it: counters clamped at their caps (or
        dropped where no row will read them), and the stop reason kept only in finalizing and
        the terminal states (``stop`` is the one pending before the move)."""
        dest = move.dest
        pending = move.stop or stop
        if dest in TERMINAL:
            return dest, _ZERO, pending
        if dest in self.memoryless:
            counters = _ZERO
        elif self.caps is None:
            counters = move.counters
        else:
            counters = Counters._make(map(min, move.counters, self.caps))
        return dest, counters, pending if dest is S.FINALIZING else None


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
        for outcome in env.outcomes(state, counters, calls):
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


# --- what the policy enables -----------------------------------------------------------------


def _env(machine: AgentMachine, policy: Policy, verification: bool, stop_conditions: bool) -> _Env:
    """The kernel's behaviour under ``policy`` as the search plays it."""
    limits = limits_of(policy, verification=verification)
    memoryless = frozenset(
        state
        for state in State
        if state not in TERMINAL
        and all(
            row.guard is None and not row.updates and row.dest in TERMINAL
            for row in machine.rows
            if row.source is state
        )
    )
    return _Env(
        limits,
        _offered(policy, stop_conditions),
        policy.summarize_on_max_steps,
        policy.usage_limits.max_requests if policy.max_steps is None else None,
        _caps(machine, limits),
        memoryless,
    )


def _reference_coverage(machine: AgentMachine, max_states: int) -> tuple[set[int], set[State]]:
    """The rows and states that runs under two permissive reference policies use (verification
    off and on; every interrupt enabled; small limits that do not mask each other). A row or
    state that a checked policy leaves unused but these use is disabled by that policy."""
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
        env = _env(machine, reference, verification, stop_conditions=True)
        graph = _explore(machine, env, track_calls=False, max_states=max_states)
        rows |= _used_rows(graph)
        states |= {key[0] for key in graph.keys}
    return rows, states


def _used_rows(graph: _Graph) -> set[int]:
    return {row for out in graph.edges for _o, row, _t, _c in out}


def _offered(policy: Policy, stop_conditions: bool) -> frozenset[Outcome]:
    """The outcomes this policy and these features can produce at all."""
    usage = policy.usage_limits
    disabled = {
        On.COMPACTED: policy.max_compaction_attempts == 0,
        On.TOOLS_REPEATED: policy.max_repeated_tool_calls is None,
        On.TOOL_ABORT: policy.tool_failure_mode is not ToolFailureMode.FAIL,
        On.HOOK_ERROR: policy.hook_failure_mode is not HookFailureMode.FAIL,
        On.DEADLINE: policy.max_wall_clock_s is None,
        On.USAGE_EXCEEDED: all(
            value is None
            for value in (
                usage.max_requests,
                usage.max_input_tokens,
                usage.max_output_tokens,
                usage.max_total_tokens,
                usage.max_cost_usd,
            )
        ),
        On.STOP_CONDITION: not stop_conditions,
    }
    return frozenset(o for o in Outcome if not disabled.get(o, False))


_THRESHOLD_GUARDS = frozenset(
    {
        "steps_left",
        "can_retry",
        "error_turns_spent",
        "needs_verification",
        "compactions_and_steps_left",
        "verifications_and_steps_left",
        "verifications_left",
        "loop_guard_finalizes",
    }
)
"""Built-in guards that only compare a counter (plus at most 2) with its limit, so every value
at or past the limit reads alike: under these the counters can be clamped at their limits."""
_CAPPED_BY = {
    "steps": "max_steps",
    "retries": "max_retries",
    "total_errors": "max_total_errors",
    "consecutive_error_turns": "max_consecutive_errors",
    "compactions": "max_compaction_attempts",
    "verifications": "max_verifications",
    "repeated_turns": "max_repeated_tool_calls",
}
"""The limit each counter is compared with (a limit of ``None`` means no guard reads it)."""


def _caps(machine: AgentMachine, limits: Limits) -> Counters | None:
    """Where each counter can be clamped, or ``None`` if a guard is not a known threshold."""
    for row in machine.rows:
        name = row.guard_name
        if name is not None and (
            name not in _THRESHOLD_GUARDS or GUARDS.get(name) is not row.guard
        ):
            return None
    return Counters._make(
        getattr(limits, _CAPPED_BY[name]) or 0 if name in _CAPPED_BY else sys.maxsize
        for name in Counters._fields
    )


# --- the check ------------------------------------------------------------------------------


def check(
    policy: Policy | None = None,
    *,
    machine: AgentMachine = default_machine,
    verification: bool = False,
    stop_conditions: bool = True,
    model_timeout_s: float | None = None,
    model_call_budget: int | None = None,
    max_states: int = DEFAULT_MAX_STATES,
) -> CheckReport:
    """Prove termination, the bounds and full coverage of ``machine`` under ``policy``.

    ``verification`` turns the verifier on (as ``require_done_tool`` does); ``stop_conditions``
    says whether the agent has stop conditions (code a policy cannot show, so assumed by
    default); ``model_call_budget`` adds a claim: no run makes more model calls than that;
    ``model_timeout_s`` only feeds the wall-clock bound.
    """
    started = time.perf_counter()
    policy = policy if policy is not None else Policy()
    env = _env(machine, policy, verification, stop_conditions)
    limits = env.limits
    computed = bounds(policy, verification=verification, model_timeout_s=model_timeout_s)
    graph = _explore(machine, env, track_calls=env.max_requests is not None, max_states=max_states)
    failures = _missing_row_failures(graph)
    if not graph.complete:
        failures.append(
            Failure(
                FailureKind.STATE_LIMIT,
                f"stopped after {max_states:,} abstract states; the path reaches the search "
                "frontier (raise max_states, or look for a counter that grows without limit)",
                tuple(graph.path_to(len(graph.keys) - 1)),
            )
        )
    full = _sccs(_targets(graph, within_run=False))
    cycle = _cycle(graph, full, computed)
    longest: tuple[PathMove, ...] = ()
    longest_calls: int | None = None
    if cycle is not None:
        failures.append(cycle)
    else:
        component, components = full
        # most calls; among those, most tool turns, then fewest detours: a readable worst run
        path = _longest(
            graph,
            component,
            components,
            lambda e: (e[3] << 40) + ((e[0] is On.TOOL_CALLS) << 20) - (e[0] in _DETOURS),
        )
        calls = _totals(path, env, machine, tool_turns=False)
        longest, longest_calls = tuple(path), calls[-1] if calls else 0
        turns_path = _longest(graph, component, components, lambda e: e[0] is On.TOOL_CALLS)
        turns = _totals(turns_path, env, machine, tool_turns=True)
        for name, totals, bound, worst_path in (
            ("model calls", calls, computed.max_model_calls, path),
            ("tool turns", turns, computed.max_tool_turns, turns_path),
        ):
            if bound is not None and totals and totals[-1] > bound:
                first = next(i for i, total in enumerate(totals) if total > bound)
                failures.append(
                    Failure(
                        FailureKind.BOUND_EXCEEDED,
                        f"a run makes {totals[-1]} {name}; the bound is {bound}",
                        tuple(worst_path[: first + 1]),
                    )
                )
    disabled_states: tuple[State, ...] = ()
    disabled_rows: tuple[int, ...] = ()
    if graph.complete:
        coverage, disabled_states, disabled_rows = _coverage(graph, machine, max_states)
        failures.extend(coverage)
    if model_call_budget is not None and (
        longest_calls is None or longest_calls > model_call_budget
    ):
        failures.extend(_budget_failures(machine, env, model_call_budget, max_states))
    if any(f.kind is not FailureKind.STATE_LIMIT for f in failures):
        verdict = CheckVerdict.VIOLATED
    else:
        verdict = CheckVerdict.INCONCLUSIVE if failures else CheckVerdict.PROVEN
    return CheckReport(
        verdict=verdict,
        policy=policy,
        limits=limits,
        bounds=computed,
        states_explored=len(graph.keys),
        moves_explored=sum(map(len, graph.edges)),
        complete=graph.complete,
        longest_path=longest,
        longest_path_model_calls=longest_calls,
        failures=tuple(failures),
        disabled_states=disabled_states,
        disabled_rows=disabled_rows,
        stop_reasons=tuple(
            r for r in StopReason if any(k[2] is r for k in graph.keys if k[0] in TERMINAL)
        ),
        elapsed_s=time.perf_counter() - started,
        machine=machine,
    )


def _targets(graph: _Graph, *, within_run: bool) -> list[list[int]]:
    """Successor lists; ``within_run`` drops the moves out of ``suspended`` (a resume starts a
    new invocation of the run)."""
    return [
        [] if within_run and graph.keys[node][0] is S.SUSPENDED else [e[2] for e in out]
        for node, out in enumerate(graph.edges)
    ]


def _missing_row_failures(graph: _Graph) -> list[Failure]:
    """The outcomes the kernel can report where the table has no row: one failure each."""
    failures: list[Failure] = []
    seen: set[tuple[State, Outcome]] = set()
    for node, outcome in graph.missing:
        state = graph.keys[node][0]
        if (state, outcome) not in seen:  # the first found is the shortest (breadth-first)
            seen.add((state, outcome))
            failures.append(
                Failure(
                    FailureKind.MISSING_ROW,
                    f"the kernel can report {outcome.value!r} in {state.value!r} and no row "
                    "takes it",
                    (*graph.path_to(node), (state, outcome)),
                )
            )
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
            if row.outcome not in _kernel_outcomes(row.source)
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
        for outcome in env.outcomes(state, counters, calls):
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


# --- the command line -----------------------------------------------------------------------


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``fsm-agent check`` to ``parser``."""
    parser.add_argument(
        "--policy", metavar="FILE", type=Path, help="a Policy as JSON (default: the default policy)"
    )
    parser.add_argument(
        "--verifier", action="store_true", help="check with a verifier (or require_done_tool)"
    )
    parser.add_argument(
        "--no-stop-conditions",
        action="store_true",
        help="the agent has no stop conditions (their rows are then reported as disabled)",
    )
    parser.add_argument(
        "--model-call-budget",
        metavar="N",
        type=_positive_int,
        help="also prove that no run makes more than N model calls",
    )
    parser.add_argument(
        "--model-timeout",
        metavar="SECONDS",
        type=float,
        help="the longest one model call can take (for the wall-clock bound)",
    )
    parser.add_argument(
        "--max-states",
        metavar="N",
        type=_positive_int,
        default=DEFAULT_MAX_STATES,
        help=f"give up after N abstract states (default {DEFAULT_MAX_STATES:,})",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def run_check_command(args: argparse.Namespace) -> int:
    """Run ``fsm-agent check``: 0 when proven, 1 on a violation or an inconclusive search,
    2 when the policy file cannot be read."""
    try:
        policy = (
            Policy.model_validate(json.loads(args.policy.read_text(encoding="utf-8")))
            if args.policy is not None
            else Policy()
        )
    except (OSError, ValueError, PolicyError) as exc:
        print(f"fsm-agent check: cannot use the policy: {exc}", file=sys.stderr)
        return 2
    report = check(
        policy,
        verification=args.verifier,
        stop_conditions=not args.no_stop_conditions,
        model_timeout_s=args.model_timeout,
        model_call_budget=args.model_call_budget,
        max_states=args.max_states,
    )
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
    return 0 if report.proven else 1
