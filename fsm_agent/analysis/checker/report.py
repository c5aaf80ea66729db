"""The checker's verdicts and reports: what a check established, each broken claim with its
shortest counterexample, and the report as text or JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeAlias

from ...machine.agent_machine import AgentMachine, IllegalMoveError, default_machine
from ...machine.table import Counters, Limits, Outcome, State, StopReason
from ...policy import Policy
from ..bounds import Bounds

__all__ = ["CheckReport", "CheckVerdict", "Failure", "FailureKind", "PathMove"]

PathMove: TypeAlias = tuple[State, Outcome]
"""One move of a path: the state and the outcome reported there."""

S = State


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
    UNCHECKED_ANSWER = "unchecked_answer"  # a run completes past the answer's check
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
            "output_validation": self.limits.output_validation,
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
        if self.limits.output_validation:
            features += ", output type validated"
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
