"""The counters, the limits, and the guard registry: each guard's function and what it means.

A guard is a small pure function of the run's :class:`Counters` and the policy's :class:`Limits`
(it sees the counters as they were *before* the move). Beside its function, each guard registers
what it reads as data: a conjunction (or disjunction) of comparisons ``counter + k < limit`` /
``counter + k ≥ limit`` and switches. The machine, the checker, the bounds, the proof and the
diagrams read that data (labels, the counters a guard reads, the limit each counter is compared
with, where counters can be clamped); none keeps its own copy. A test proves every registered
formula equals its function.

Adding a counter or a guard touches this module (and the rows that use it). A limit of ``None``
means "no limit": a ``<`` comparison with it always holds, a ``≥`` comparison never does.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import NamedTuple

from ..values.define import record

__all__ = [
    "GUARDS",
    "GUARD_SPECS",
    "Bound",
    "Compare",
    "Counter",
    "Counters",
    "Guard",
    "GuardSpec",
    "Limits",
    "Switch",
    "can_retry",
    "can_switch_model",
    "clamp_caps",
    "compactions_and_steps_left",
    "continuations_left",
    "error_turns_spent",
    "guard_label",
    "guard_value_combinations",
    "limit_of",
    "loop_guard_finalizes",
    "needs_verification",
    "repeats_spent",
    "steps_left",
    "verifications_and_steps_left",
    "verifications_left",
]


class Counters(NamedTuple):
    """The run's counters: everything a guard may read besides the limits. (A named tuple:
    built once per move on the kernel's hot path, where a frozen dataclass costs 3× more.)"""

    steps: int = 0  # successful model turns
    retries: int = 0  # failed model calls since the last successful one (or model switch)
    model_switches: int = 0  # moves to the next model of a fallback chain, whole run
    total_errors: int = 0  # model errors plus failed tool turns, whole run
    consecutive_error_turns: int = 0  # failed tool turns in a row
    compactions: int = 0  # compaction attempts, whole run
    verifications: int = 0  # verifier rejections and invalid typed answers, whole run
    repeated_turns: int = 0  # tool turns in a row that repeat the turn before (or two before)
    continuations: int = 0  # answers cut by the output cap and continued, whole run


class Counter(StrEnum):
    """A counter a row can update or a guard can read (the names of the :class:`Counters`
    fields)."""

    STEPS = "steps"
    RETRIES = "retries"
    MODEL_SWITCHES = "model_switches"
    TOTAL_ERRORS = "total_errors"
    CONSECUTIVE_ERROR_TURNS = "consecutive_error_turns"
    COMPACTIONS = "compactions"
    VERIFICATIONS = "verifications"
    REPEATED_TURNS = "repeated_turns"
    CONTINUATIONS = "continuations"

    @property
    def position(self) -> int:
        """The counter's index in :class:`Counters`."""
        return Counters._fields.index(self.value)


@record(kw_only=False)
class Limits:
    """The numbers the guards compare against: the policy's limits plus the agent's features."""

    max_steps: int | None = 200
    max_retries: int = 5
    max_consecutive_errors: int = 3
    max_total_errors: int | None = None
    max_compaction_attempts: int = 3
    max_verifications: int = 3
    verification: bool = False  # a verifier is set or the done tool is required
    output_validation: bool = False  # the agent has an output type: answers are validated
    max_repeated_tool_calls: int | None = None  # the loop guard: same calls N times in a row
    finalize_repeated_tool_calls: bool = False  # the loop guard finalizes instead of warning
    max_continuations: int = 1  # continuation turns after answers cut by the output cap
    max_model_switches: int = 0  # a fallback chain's length less one (0: a single model)


class Bound(StrEnum):
    """A numeric :class:`Limits` field a guard compares a counter with."""

    MAX_STEPS = "max_steps"
    MAX_RETRIES = "max_retries"
    MAX_CONSECUTIVE_ERRORS = "max_consecutive_errors"
    MAX_TOTAL_ERRORS = "max_total_errors"
    MAX_COMPACTION_ATTEMPTS = "max_compaction_attempts"
    MAX_VERIFICATIONS = "max_verifications"
    MAX_REPEATED_TOOL_CALLS = "max_repeated_tool_calls"
    MAX_CONTINUATIONS = "max_continuations"
    MAX_MODEL_SWITCHES = "max_model_switches"


class Switch(StrEnum):
    """A boolean :class:`Limits` field a guard reads."""

    VERIFICATION = "verification"
    OUTPUT_VALIDATION = "output_validation"
    FINALIZE_REPEATED_TOOL_CALLS = "finalize_repeated_tool_calls"


_SWITCH_LABELS = {
    Switch.VERIFICATION: "verification",
    Switch.OUTPUT_VALIDATION: "output type",
    Switch.FINALIZE_REPEATED_TOOL_CALLS: ("finalize on repeat"),
}
_COUNTER_LABELS = {Counter.CONSECUTIVE_ERROR_TURNS: "error_turns"}  # the rest read as named


class Compare(NamedTuple):
    """``counter + offset < limit`` (or ``≥ limit`` when ``reached``); a ``None`` limit makes
    ``<`` hold and ``≥`` fail."""

    counter: Counter
    limit: Bound
    offset: int = 0
    reached: bool = False

    def holds(self, counters: Counters, limits: Limits) -> bool:
        """The comparison's value for these counters and limits."""
        bound: int | None = getattr(limits, self.limit.value)
        if bound is None:
            return not self.reached
        value = counters[self.counter.position] + self.offset
        return value >= bound if self.reached else value < bound

    def label(self) -> str:
        """The comparison as a ``str.format`` template over the limits."""
        name = _COUNTER_LABELS.get(self.counter, self.counter.value)
        left = f"{name} + {self.offset}" if self.offset else name
        return f"{left} {'≥' if self.reached else '<'} {{{self.limit.value}}}"


Atom = Compare | Switch
Guard = Callable[[Counters, Limits], bool]


@record(kw_only=False)
class GuardSpec:
    """One guard: its function, and what it reads as data (``atoms`` joined by *and*, or by
    *or* when ``any_of``)."""

    function: Guard
    atoms: tuple[Atom, ...]
    any_of: bool = False

    @property
    def name(self) -> str:
        """The guard's name (its function's)."""
        return self.function.__name__

    @property
    def comparisons(self) -> tuple[Compare, ...]:
        """The guard's counter comparisons."""
        return tuple(a for a in self.atoms if isinstance(a, Compare))

    @property
    def reads(self) -> frozenset[Counter]:
        """The counters the guard reads."""
        return frozenset(c.counter for c in self.comparisons)

    def holds(self, counters: Counters, limits: Limits) -> bool:
        """The guard's value computed from its formula (equal to :attr:`function`'s)."""
        values = (
            a.holds(counters, limits) if isinstance(a, Compare) else bool(getattr(limits, a.value))
            for a in self.atoms
        )
        return any(values) if self.any_of else all(values)

    def implied(self, holds: bool) -> tuple[Compare, ...]:
        """The ``<`` comparisons that hold whenever the guard has the value ``holds`` (a guard
        that holds implies each of its ``<`` conjuncts; one that fails implies the negation of
        each ``≥`` disjunct). The termination proof reads these as the bounds on a cycle."""
        if holds and not self.any_of:
            return tuple(c for c in self.comparisons if not c.reached)
        if not holds and (self.any_of or len(self.atoms) == 1):
            return tuple(c._replace(reached=False) for c in self.comparisons if c.reached)
        return ()


# --- the guards ----------------------------------------------------------------------------


def steps_left(c: Counters, lim: Limits) -> bool:
    """Another model turn is allowed."""
    return lim.max_steps is None or c.steps < lim.max_steps


def _error_budget_spent(c: Counters, lim: Limits) -> bool:
    return lim.max_total_errors is not None and c.total_errors + 1 >= lim.max_total_errors


def can_retry(c: Counters, lim: Limits) -> bool:
    """Retries are left and this error does not spend the whole-run error budget."""
    return c.retries < lim.max_retries and not _error_budget_spent(c, lim)


def can_switch_model(c: Counters, lim: Limits) -> bool:
    """A fallback chain has a next model and this error does not spend the whole-run error
    budget."""
    return c.model_switches < lim.max_model_switches and not _error_budget_spent(c, lim)


def error_turns_spent(c: Counters, lim: Limits) -> bool:
    """This failed tool turn reaches max_consecutive_errors or the whole-run error budget."""
    return c.consecutive_error_turns + 1 >= lim.max_consecutive_errors or _error_budget_spent(
        c, lim
    )


def needs_verification(c: Counters, lim: Limits) -> bool:
    """A verifier, the done-tool requirement or the output type must accept a no-tool
    answer."""
    return lim.verification or lim.output_validation


def compactions_and_steps_left(c: Counters, lim: Limits) -> bool:
    """A forced compaction is allowed and another model turn too. (This move spends the
    ``length`` turn's own step, so another turn needs one more step than ``c.steps + 1``.)"""
    return c.compactions < lim.max_compaction_attempts and (
        lim.max_steps is None or c.steps + 1 < lim.max_steps
    )


def continuations_left(c: Counters, lim: Limits) -> bool:
    """An answer cut by the output cap may be continued, and another model turn is allowed
    (this move spends the cut turn's own step, as a forced compaction does)."""
    return c.continuations < lim.max_continuations and (
        lim.max_steps is None or c.steps + 1 < lim.max_steps
    )


def verifications_and_steps_left(c: Counters, lim: Limits) -> bool:
    """A rejection may go back to the model, and another model turn is allowed."""
    return c.verifications < lim.max_verifications and steps_left(c, lim)


def verifications_left(c: Counters, lim: Limits) -> bool:
    """A rejection may go back to the model (but, after the row above, no step is left)."""
    return c.verifications < lim.max_verifications


def repeats_spent(c: Counters, lim: Limits) -> bool:
    """This repeating turn makes the same calls ``max_repeated_tool_calls`` times in a row
    (or keeps an A,B,A,B cycle going that long): the loop guard trips."""
    return lim.max_repeated_tool_calls is not None and (
        c.repeated_turns + 2 >= lim.max_repeated_tool_calls
    )


def loop_guard_finalizes(c: Counters, lim: Limits) -> bool:
    """The loop guard trips and the policy says finalize (otherwise the model is warned)."""
    return lim.finalize_repeated_tool_calls and repeats_spent(c, lim)


C, B = Counter, Bound
_STEP_LEFT = Compare(C.STEPS, B.MAX_STEPS)
_NEXT_STEP_LEFT = Compare(C.STEPS, B.MAX_STEPS, offset=1)
_BUDGET_LEFT = Compare(C.TOTAL_ERRORS, B.MAX_TOTAL_ERRORS, offset=1)

GUARD_SPECS: dict[str, GuardSpec] = {
    spec.name: spec
    for spec in (
        GuardSpec(steps_left, (_STEP_LEFT,)),
        GuardSpec(can_retry, (Compare(C.RETRIES, B.MAX_RETRIES), _BUDGET_LEFT)),
        GuardSpec(
            can_switch_model, (Compare(C.MODEL_SWITCHES, B.MAX_MODEL_SWITCHES), _BUDGET_LEFT)
        ),
        GuardSpec(
            error_turns_spent,
            (
                Compare(C.CONSECUTIVE_ERROR_TURNS, B.MAX_CONSECUTIVE_ERRORS, 1, reached=True),
                _BUDGET_LEFT._replace(reached=True),
            ),
            any_of=True,
        ),
        GuardSpec(needs_verification, (Switch.VERIFICATION, Switch.OUTPUT_VALIDATION), any_of=True),
        GuardSpec(
            compactions_and_steps_left,
            (Compare(C.COMPACTIONS, B.MAX_COMPACTION_ATTEMPTS), _NEXT_STEP_LEFT),
        ),
        GuardSpec(
            continuations_left,
            (Compare(C.CONTINUATIONS, B.MAX_CONTINUATIONS), _NEXT_STEP_LEFT),
        ),
        GuardSpec(
            verifications_and_steps_left,
            (Compare(C.VERIFICATIONS, B.MAX_VERIFICATIONS), _STEP_LEFT),
        ),
        GuardSpec(verifications_left, (Compare(C.VERIFICATIONS, B.MAX_VERIFICATIONS),)),
        GuardSpec(
            loop_guard_finalizes,
            (
                Compare(C.REPEATED_TURNS, B.MAX_REPEATED_TOOL_CALLS, 2, reached=True),
                Switch.FINALIZE_REPEATED_TOOL_CALLS,
            ),
        ),
    )
}
"""Every guard of the table, by name."""

GUARDS: dict[str, Guard] = {name: spec.function for name, spec in GUARD_SPECS.items()}
"""Every guard's function by name; diagrams and the checker label rows with these names."""


def _limit_of() -> dict[Counter, Bound]:
    found: dict[Counter, Bound] = {}
    for spec in GUARD_SPECS.values():
        for comparison in spec.comparisons:
            known = found.setdefault(comparison.counter, comparison.limit)
            if known is not comparison.limit:  # pragma: no cover - a registry mistake
                raise AssertionError(f"{comparison.counter} is compared with two limits")
    return found


_LIMIT_OF: Mapping[Counter, Bound] = _limit_of()


def limit_of(counter: Counter) -> Bound | None:
    """The limit the guards compare ``counter`` with (``None``: no guard reads it)."""
    return _LIMIT_OF.get(counter)


def guard_label(name: str, limits: Limits) -> str:
    """How the guard ``name`` reads on an edge with these limits, e.g. ``retries < 5``.

    A comparison with a ``None`` limit drops out (in an *and* it always holds, in an *or* it
    never does); a guard that is not registered, or whose comparisons all drop out, reads as its
    name."""
    spec = GUARD_SPECS.get(name)
    if spec is None:
        return name
    kept = []
    for atom in spec.atoms:
        if isinstance(atom, Switch):
            kept.append(_SWITCH_LABELS[atom])
            continue
        bound = getattr(limits, atom.limit.value)
        if bound is not None:
            kept.append(atom.label().format(**{atom.limit.value: bound}))
    return (" or " if spec.any_of else " and ").join(kept) if kept else name


def clamp_caps(guards: Iterable[Guard | None], limits: Limits) -> Counters | None:
    """Where each counter can be clamped without changing any of ``guards``' values, or
    ``None`` when one is not registered (its reading of the counters is unknown).

    A registered guard compares ``counter + k`` (``k ≥ 0``) with the counter's limit, so every
    value at or past the limit reads alike; a counter no guard reads is never clamped."""
    for guard in guards:
        if guard is not None and GUARDS.get(guard.__name__) is not guard:
            return None
    caps = []
    for counter in Counter:
        bound = limit_of(counter)
        caps.append(sys.maxsize if bound is None else getattr(limits, bound.value) or 0)
    return Counters._make(caps)


def guard_value_combinations(limits: Limits) -> Iterable[Counters]:
    """Counters that, with ``limits``, drive every registered guard both ways (for tests and
    the diagrams' scope).

    For each comparison ``counter + k`` with a limit ``L``, the values ``L - k - 1`` and
    ``L - k`` (and zero) put it on both sides; a counter no guard reads takes 0, 1 and 2, and one
    whose limit is ``None`` takes 0 and 7."""
    values: dict[Counter, set[int]] = {c: {0} for c in Counter}
    for spec in GUARD_SPECS.values():
        for comparison in spec.comparisons:
            bound = getattr(limits, comparison.limit.value)
            if bound is None:
                values[comparison.counter].add(7)
            else:
                edge = bound - comparison.offset
                values[comparison.counter] |= {max(0, edge - 1), max(0, edge)}
    for counter in Counter:
        if limit_of(counter) is None:
            values[counter] |= {1, 2}
    for combo in itertools.product(*(sorted(values[c]) for c in Counter)):
        yield Counters._make(combo)
