"""The ``idle`` state: a new run enqueues its system prompt, earlier history and input."""

from __future__ import annotations

from ...machine.table import Outcome
from ...values.messages import Role
from ..context import RunContext

__all__ = ["handle_idle"]

_START = Outcome.START  # read once: see kernel/driver.py


async def handle_idle(ctx: RunContext) -> Outcome:
    """Enqueue the system prompt (once, first), any earlier history, and the user input."""
    system = ctx.plan.system_message
    history = ctx.history
    if system is not None:
        ctx.append(system)
        if history:
            history = [m for m in history if m.role is not Role.SYSTEM]
    for message in history:
        ctx.append(message)
    assert ctx.input is not None
    ctx.append(ctx.input)
    phases = ctx.plan.phases
    if phases is not None:
        phases.start(ctx.rs)
    return _START
