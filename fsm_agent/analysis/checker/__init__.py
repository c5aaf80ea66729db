"""The exhaustive bounded model checker: every run a policy allows, through the pure ``decide()``.

The checker plays the kernel's part with abstract outcomes: in each state it tries every outcome
and every interrupt that state declares (:data:`~fsm_agent.machine.table.DECLARATIONS`), except
those the policy makes impossible (no wall-clock limit: no ``deadline``; and so on). It explores
the resulting graph breadth-first from ``idle``, one node per (state, counters, pending stop
reason), and proves for one policy:

1. every path ends in ``done``, ``aborted`` or ``suspended`` (no cycle avoids ``suspended``, and
   the kernel never reports an outcome the table has no row for);
2. no path makes more model calls or tool turns than :func:`fsm_agent.analysis.bounds.bounds`
   allows (a ``calling`` handler run is one call; finalizing with stop reason ``max_steps`` is
   one more when ``summarize_on_max_steps`` and the usage limit on requests is not reached);
3. every state is reached and every row is used, unless the policy disables it: a state or row
   this policy leaves unused but a permissive reference policy uses is listed as disabled; one
   that no run uses under either is a failure.

Counters are clamped at their limits when the table uses only registered guards
(:mod:`fsm_agent.machine.guards`): those compare a counter with its limit, so every value at or
past the limit behaves alike and clamping merges nodes without changing which moves exist (a
bisimulation). The call count stays exact: it is the longest path through the finite graph,
whose only allowed cycles pass through ``suspended`` and make no model call. A table with other
guards is explored unclamped, up to ``max_states``.

The modules, in reading order: :mod:`.environment` (the kernel as the search plays it),
:mod:`.graph` (components and paths), :mod:`.explore` (the search and the failures it finds) and
:mod:`.report` (verdicts, counterexamples, text and JSON). The command is in
:mod:`fsm_agent.cli.check`.
"""

from __future__ import annotations

import time

from ...machine.agent_machine import AgentMachine, default_machine
from ...machine.table import TERMINAL, Outcome, StopReason
from ...policy import Policy
from ..bounds import Bounds, bounds
from .environment import DETOURS, _Env, _env
from .explore import (
    _budget_failures,
    _coverage,
    _cycle,
    _explore,
    _missing_row_failures,
    _totals,
    _unchecked_answer_failures,
    replay,
)
from .graph import _Graph, _longest, _sccs, _targets
from .report import CheckReport, CheckVerdict, Failure, FailureKind, PathMove

__all__ = [
    "DEFAULT_MAX_STATES",
    "CheckReport",
    "CheckVerdict",
    "Failure",
    "FailureKind",
    "PathMove",
    "check",
    "replay",
]

DEFAULT_MAX_STATES = 1_000_000
"""Abstract states explored before the checker gives up (the default policy needs about 34,000)."""

On = Outcome


def check(
    policy: Policy | None = None,
    *,
    machine: AgentMachine = default_machine,
    verification: bool = False,
    stop_conditions: bool = True,
    models: int = 1,
    model_timeout_s: float | None = None,
    model_call_budget: int | None = None,
    max_states: int = DEFAULT_MAX_STATES,
    output_validation: bool = False,
) -> CheckReport:
    """Prove termination, the bounds and full coverage of ``machine`` under ``policy``.

    ``verification`` turns the verifier on (as ``require_done_tool`` does); ``stop_conditions``
    says whether the agent has stop conditions (code a policy cannot show, so assumed by
    default); ``models`` is the length of the agent's fallback chain (1: a single model);
    ``output_validation`` says the agent has an output type (answers that do not validate are
    rejected, and may end a run with ``output_invalid``);
    ``model_call_budget`` adds a claim: no run makes more model calls than that;
    ``model_timeout_s`` only feeds the wall-clock bound.
    """
    started = time.perf_counter()
    policy = policy if policy is not None else Policy()
    env = _env(machine, policy, verification, stop_conditions, models, output_validation)
    computed = bounds(
        policy,
        verification=verification or output_validation,
        model_timeout_s=model_timeout_s,
        models=models,
    )
    graph = _explore(machine, env, track_calls=env.max_requests is not None, max_states=max_states)
    failures = [*_missing_row_failures(graph), *_unchecked_answer_failures(graph, env.limits)]
    if not graph.complete:
        failures.append(_frontier_failure(graph, max_states))
    longest, longest_calls, found = _ends_within_bounds(graph, env, machine, computed)
    failures.extend(found)
    coverage, disabled_states, disabled_rows = (
        _coverage(graph, machine, max_states) if graph.complete else ([], (), ())
    )
    failures.extend(coverage)
    if model_call_budget is not None and not _within(longest_calls, model_call_budget):
        failures.extend(_budget_failures(machine, env, model_call_budget, max_states))
    return CheckReport(
        verdict=_verdict(failures),
        policy=policy,
        limits=env.limits,
        bounds=computed,
        states_explored=len(graph.keys),
        moves_explored=sum(map(len, graph.edges)),
        complete=graph.complete,
        longest_path=longest,
        longest_path_model_calls=longest_calls,
        failures=tuple(failures),
        disabled_states=disabled_states,
        disabled_rows=disabled_rows,
        stop_reasons=_stop_reasons(graph),
        elapsed_s=time.perf_counter() - started,
        machine=machine,
    )


def _frontier_failure(graph: _Graph, max_states: int) -> Failure:
    """The failure of a search stopped at ``max_states``: the path to its frontier."""
    return Failure(
        FailureKind.STATE_LIMIT,
        f"stopped after {max_states:,} abstract states; the path reaches the search "
        "frontier (raise max_states, or look for a counter that grows without limit)",
        tuple(graph.path_to(len(graph.keys) - 1)),
    )


def _ends_within_bounds(
    graph: _Graph, env: _Env, machine: AgentMachine, computed: Bounds
) -> tuple[tuple[PathMove, ...], int | None, list[Failure]]:
    """Claims 1 and 2: the run with the most model calls, its call count, and the failures
    found: a cycle that avoids ``suspended`` (then no longest run), else each bound (model
    calls, tool turns) that the worst run for it exceeds."""
    full = _sccs(_targets(graph, within_run=False))
    cycle = _cycle(graph, full, computed)
    if cycle is not None:
        return (), None, [cycle]
    component, components = full
    # most calls; among those, most tool turns, then fewest detours: a readable worst run
    path = _longest(
        graph,
        component,
        components,
        lambda e: (e[3] << 40) + ((e[0] is On.TOOL_CALLS) << 20) - (e[0] in DETOURS),
    )
    calls = _totals(path, env, machine, tool_turns=False)
    turns_path = _longest(graph, component, components, lambda e: e[0] is On.TOOL_CALLS)
    turns = _totals(turns_path, env, machine, tool_turns=True)
    failures: list[Failure] = []
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
    return tuple(path), calls[-1] if calls else 0, failures


def _within(longest_calls: int | None, budget: int) -> bool:
    """The budget claim: the run with the most model calls makes at most ``budget`` (unknown
    when a cycle left no longest run)."""
    return longest_calls is not None and longest_calls <= budget


def _stop_reasons(graph: _Graph) -> tuple[StopReason, ...]:
    """The stop reasons some run ends with."""
    ended = {k[2] for k in graph.keys if k[0] in TERMINAL}
    return tuple(r for r in StopReason if r in ended)


def _verdict(failures: list[Failure]) -> CheckVerdict:
    """Violated by any failure but the search's limit; inconclusive by that one alone."""
    if any(f.kind is not FailureKind.STATE_LIMIT for f in failures):
        return CheckVerdict.VIOLATED
    return CheckVerdict.INCONCLUSIVE if failures else CheckVerdict.PROVEN
