"""The ``suspended`` state: a run that waits for a human. It is left only by a resume, whose
decisions :func:`~fsm_agent.run.approval.apply_decisions` has already recorded for dispatching."""

from __future__ import annotations

from ...machine.table import Outcome
from ..context import RunContext

__all__ = ["handle_suspended"]


async def handle_suspended(ctx: RunContext) -> Outcome:
    """A resumed run: the human's decisions are applied by dispatching."""
    return Outcome.RESUME
