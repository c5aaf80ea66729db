"""Checks of DESIGN §8 invariants on a finished run: the package's own, from
:mod:`fsm_agent.fuzzing`, re-exported for the property tests."""

from __future__ import annotations

from fsm_agent.fuzzing import (
    ABORT_REASONS as _ABORT_REASONS,
)
from fsm_agent.fuzzing import (
    DONE_REASONS as _DONE_REASONS,
)
from fsm_agent.fuzzing import (
    RunRecord,
    check_history,
    check_invariants,
)

__all__ = ["ABORT_REASONS", "DONE_REASONS", "RunRecord", "check_history", "check_invariants"]

# Mutable copies for tests that extend them; the package's sets already hold every reason.
DONE_REASONS = set(_DONE_REASONS)
ABORT_REASONS = set(_ABORT_REASONS)
