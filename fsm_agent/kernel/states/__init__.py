"""The states' handlers, one module per state: the only place where effects happen.

Read in the order a run meets them: :mod:`.idle` (the input is enqueued), :mod:`.compacting`
(the context budget), :mod:`.calling` (one model call, made by :mod:`.model_call`, which the
step-limit summary of :mod:`.finalizing` shares), :mod:`.dispatching` (the tool calls;
a turn's calls and their results are a :mod:`.turn`), :mod:`.verifying` (the verifier),
:mod:`.suspended` (a run waiting for a human) and :mod:`.finalizing` (the output). This module
maps each state to its handler.

A handler is a coroutine that returns its :class:`~fsm_agent.machine.table.Outcome`, one of
those :data:`~fsm_agent.machine.table.DECLARATIONS` lists for its state; it hands the events its
work produces to the listener with ``await ctx.emit(event)`` (see
:class:`~fsm_agent.kernel.context.Emitted`), building them only when someone listens. It never
chooses the next state; the driver (:mod:`fsm_agent.kernel.driver`) asks the table.

Interruptions (the caller's cancel, the wall-clock deadline) reach a handler in two ways: the
driver checks them before every handler, and while a handler awaits an effect (``ctx.effect``)
the interrupt cancels that await, which the handler turns into the interrupt's outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine

from ...machine.table import Outcome, State
from ..context import RunContext
from .calling import handle_calling
from .compacting import compacting_needs_nothing, handle_compacting
from .dispatching import handle_dispatching
from .finalizing import (
    SUMMARY_FALLBACK,
    SUMMARY_PROMPT,
    finalizing_needs_no_call,
    handle_finalizing,
)
from .idle import handle_idle
from .suspended import handle_suspended
from .verifying import DONE_REMINDER, Verdict, handle_verifying

__all__ = [
    "DONE_REMINDER",
    "FAST_PATHS",
    "HANDLERS",
    "SUMMARY_FALLBACK",
    "SUMMARY_PROMPT",
    "Handler",
    "RunContext",
    "Verdict",
]

Handler = Callable[[RunContext], Coroutine[object, object, Outcome]]
"""A state's handler: does the state's work and reports its outcome."""

HANDLERS: dict[State, Handler] = {
    State.IDLE: handle_idle,
    State.COMPACTING: handle_compacting,
    State.CALLING: handle_calling,
    State.DISPATCHING: handle_dispatching,
    State.VERIFYING: handle_verifying,
    State.SUSPENDED: handle_suspended,
    State.FINALIZING: handle_finalizing,
}
"""The handler of every non-terminal state."""

FAST_PATHS: dict[State, Callable[[RunContext], Outcome | None]] = {
    State.COMPACTING: compacting_needs_nothing,
    State.FINALIZING: finalizing_needs_no_call,
}
"""Synchronous versions of a state's handler for when it needs no effect and emits no event:
they do its work and give its outcome, or ``None`` (having done nothing): run the handler.
Most moves take them."""
