"""The guard registry: one owner for each guard's function, formula, label and limits."""

from __future__ import annotations

import pytest

from fsm_agent.machine.guards import (
    GUARD_SPECS,
    GUARDS,
    Bound,
    Counter,
    Counters,
    Limits,
    clamp_caps,
    guard_label,
    guard_value_combinations,
    limit_of,
)
from fsm_agent.machine.table import TABLE

LIMIT_SETS = [
    Limits(),
    Limits(max_steps=None, max_total_errors=4, verification=True),
    Limits(
        max_steps=3,
        max_retries=1,
        max_consecutive_errors=2,
        max_total_errors=2,
        max_compaction_attempts=1,
        max_verifications=1,
        verification=True,
        max_repeated_tool_calls=3,
        finalize_repeated_tool_calls=True,
        max_model_switches=2,
    ),
    Limits(max_retries=0, max_compaction_attempts=0, max_repeated_tool_calls=2),
]


@pytest.mark.parametrize("limits", LIMIT_SETS)
def test_each_registered_formula_equals_its_guard_function(limits: Limits) -> None:
    """A guard's registered comparisons compute the same value as its function, both ways."""
    for spec in GUARD_SPECS.values():
        seen = set()
        for counters in guard_value_combinations(limits):
            value = spec.function(counters, limits)
            assert spec.holds(counters, limits) is value, (spec.name, counters)
            seen.add(value)
        if spec.name not in {"needs_verification"} and limits == LIMIT_SETS[2]:
            assert seen == {True, False}, spec.name  # the combinations drive it both ways


def test_every_guard_of_the_table_is_registered() -> None:
    """No row uses a guard the registry does not describe."""
    for row in TABLE:
        if row.guard is not None:
            assert GUARDS[row.guard.__name__] is row.guard


def test_each_counter_is_compared_with_one_limit() -> None:
    """The counter → limit map comes from the comparisons (repeated turns → the loop guard)."""
    assert limit_of(Counter.STEPS) is Bound.MAX_STEPS
    assert limit_of(Counter.REPEATED_TURNS) is Bound.MAX_REPEATED_TOOL_CALLS
    assert limit_of(Counter.TOTAL_ERRORS) is Bound.MAX_TOTAL_ERRORS


def test_labels_come_from_the_comparisons() -> None:
    """A label prints each comparison with its offset and drops those whose limit is None."""
    assert guard_label("compactions_and_steps_left", Limits()) == (
        "compactions < 3 and steps + 1 < 200"
    )
    assert guard_label("error_turns_spent", Limits(max_total_errors=4)) == (
        "error_turns + 1 ≥ 3 or total_errors + 1 ≥ 4"
    )
    assert guard_label("error_turns_spent", Limits()) == "error_turns + 1 ≥ 3"
    assert guard_label("not_a_guard", Limits()) == "not_a_guard"


def test_clamping_needs_registered_guards() -> None:
    """Counters clamp at their limits under registered guards; an unknown guard disables it."""
    caps = clamp_caps((row.guard for row in TABLE), Limits())
    assert caps is not None
    assert caps.steps == 200 and caps.retries == 5 and caps.total_errors == 0

    def custom(c: Counters, lim: Limits) -> bool:
        """Not registered."""
        return c.steps < 3

    assert clamp_caps([custom], Limits()) is None
