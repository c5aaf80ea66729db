"""The kernel as the checker plays it: which outcomes each state can report under a policy, what
a move costs in model calls, and how the search keys a node.

Nothing here is a model of its own: a state's outcomes and interrupts are the table's
:data:`~fsm_agent.machine.table.DECLARATIONS` (through the machine being checked), the counters'
caps come from the guard registry, and a policy only switches off what it can never produce
(:func:`impossible_outcomes`, which the diagrams' scope reads too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from ...machine.agent_machine import AgentMachine, Move
from ...machine.guards import clamp_caps
from ...machine.table import TERMINAL, Counters, Limits, Outcome, State, StopReason
from ...policy import HookFailureMode, Policy, ToolFailureMode, limits_of

__all__ = ["DETOURS", "impossible_outcomes", "kernel_outcomes"]

S, On = State, Outcome

_Key: TypeAlias = tuple[State, Counters, StopReason | None, int]
"""A node: state, (clamped) counters, the stop reason pending in finalizing/terminal, calls."""
_ZERO = Counters()
_SUMMARY_LIMITS = frozenset({On.DEADLINE, On.USAGE_EXCEEDED})
"""The interrupts finalizing reports: the summary call not made, or cut short, by a limit."""


def kernel_outcomes(machine: AgentMachine, state: State) -> tuple[Outcome, ...]:
    """Every outcome the kernel can report in ``state``, as ``machine``'s declarations say:
    interrupts first, then the handler's, each in :class:`Outcome` order with the detours last
    (so the breadth-first search finds the plainest counterexample first)."""
    declaration = machine.declarations.get(state)
    if declaration is None:
        return ()
    return (
        *sorted(declaration.interrupts, key=_ORDER.__getitem__),
        *sorted(declaration.outcomes, key=_ORDER.__getitem__),
    )


DETOURS = frozenset({On.TOOLS_REPEATED, On.TOOLS_FAILED, On.COMPACTED, On.FINISH_ERROR})
"""Outcomes a counterexample or a worst path avoids when it can (they change nothing about its
cost)."""
_ORDER = {outcome: (outcome in DETOURS, i) for i, outcome in enumerate(Outcome)}


def impossible_outcomes(
    policy: Policy, *, stop_conditions: bool, models: int = 1, output_validation: bool = False
) -> frozenset[Outcome]:
    """The outcomes an agent with ``policy`` can never report (``stop_conditions``: whether it
    has stop conditions, which are code and so not part of the policy; ``models``: how many
    models its fallback chain holds, 1 for a single model; ``output_validation``: whether it
    has an output type)."""
    usage = policy.usage_limits
    disabled = {
        On.COMPACTED: policy.max_compaction_attempts == 0,
        On.TOOLS_REPEATED: policy.max_repeated_tool_calls is None,
        On.TOOL_ABORT: policy.tool_failure_mode is not ToolFailureMode.FAIL,
        On.HOOK_ERROR: policy.hook_failure_mode is not HookFailureMode.FAIL,
        On.DEADLINE: policy.max_wall_clock_s is None,
        On.USAGE_EXCEEDED: all(value is None for value in usage.model_dump().values()),
        On.STOP_CONDITION: not stop_conditions,
        On.FALLBACK: models < 2,
        On.OUTPUT_INVALID: not output_validation,
    }
    return frozenset(o for o, off in disabled.items() if off)


@dataclass(frozen=True, slots=True)
class _Env:
    """The kernel as the checker plays it: which outcomes happen where, what a move costs."""

    limits: Limits
    offered: frozenset[Outcome]  # the outcomes this policy and these features can produce
    summarize: bool
    max_requests: int | None  # usage_limits.max_requests: the driver stops calling at it
    caps: Counters | None  # clamp counters here (None: the table has guards we cannot read)
    memoryless: frozenset[State]  # states whose rows neither read nor change the counters
    reported: dict[State, tuple[Outcome, ...]]  # each state's declared outcomes and interrupts
    reported_by_calling: frozenset[Outcome]  # a calling handler's outcomes: one model call each

    def outcomes(
        self, state: State, counters: Counters, calls: int, stop: StopReason | None = None
    ) -> list[Outcome]:
        """The outcomes the kernel can report in this node (``stop``: the stop reason pending
        in finalizing)."""
        result = []
        summary = state is S.FINALIZING and stop is StopReason.MAX_STEPS and self.summarize
        for outcome in self.reported[state]:
            if outcome not in self.offered:
                continue
            if state is S.FINALIZING and outcome in _SUMMARY_LIMITS:
                if not summary:
                    continue  # only the summary call's limits end finalizing early
            elif (
                summary
                and self.max_requests is not None
                and calls >= self.max_requests
                and outcome is On.FINALIZED
            ):
                continue  # the handler reports usage_exceeded instead of the summary call
            if (
                outcome is On.COMPACTED
                and counters.compactions >= self.limits.max_compaction_attempts
            ):
                continue  # the handler reports cannot_compact once the attempts are spent
            if (
                state is S.CALLING
                and outcome in self.reported_by_calling
                and self.max_requests is not None
                and calls >= self.max_requests
            ):
                continue  # the driver reports usage_exceeded before another request
            result.append(outcome)
        return result

    def calls(self, state: State, outcome: Outcome, stop: StopReason | None) -> int:
        """Model calls made by this move: one per calling handler run, one for the step-limit
        summary (made only within the usage limits)."""
        if state is S.CALLING and outcome in self.reported_by_calling:
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


def _env(
    machine: AgentMachine,
    policy: Policy,
    verification: bool,
    stop_conditions: bool,
    models: int = 1,
    output_validation: bool = False,
) -> _Env:
    """The kernel's behaviour under ``policy`` (with a chain of ``models`` models, and answers
    validated as an output type when ``output_validation``) as the search plays it."""
    limits = limits_of(
        policy, verification=verification, models=models, output_validation=output_validation
    )
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
        frozenset(Outcome)
        - impossible_outcomes(
            policy,
            stop_conditions=stop_conditions,
            models=models,
            output_validation=output_validation,
        ),
        policy.summarize_on_max_steps,
        policy.usage_limits.max_requests,
        clamp_caps((row.guard for row in machine.rows), limits),
        memoryless,
        {state: kernel_outcomes(machine, state) for state in State},
        machine.declarations[S.CALLING].outcomes,
    )
