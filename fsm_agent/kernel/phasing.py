"""The kernel's side of phases: each phase move the run makes, with its event.

The moves themselves (legality, guards, exit checks, the run state) belong to
:class:`~fsm_agent.phases.CompiledPhases`; this module calls it where the kernel meets a move
(a call in ``dispatching``, a spent budget before a model call) and queues the
``phase_changed`` event for the listener. Fitting a table to an agent is the plan's
(:func:`~fsm_agent.kernel.plan.compile_phases`, named here too).
"""

from __future__ import annotations

from typing import Literal

from ..phases import CompiledPhases
from ..run.events import PhaseChangedEvent
from ..values.messages import ToolCall, ToolResult
from .context import RunContext
from .plan import budget_stop, compile_phases, phase_stop_conditions

__all__ = [
    "budget_stop",
    "compile_phases",
    "gate_call",
    "move_by_budget",
    "move_by_code",
    "phase_stop_conditions",
]


def _moved(ctx: RunContext, source: str, by: Literal["model", "code", "budget"]) -> None:
    rs = ctx.rs
    if ctx.listening and rs.phase != source and rs.phase is not None:
        ctx.hold(
            PhaseChangedEvent(
                run_id=rs.run_id, source=source, dest=rs.phase, by=by, step=rs.counters.steps
            )
        )


def gate_call(ctx: RunContext, phases: CompiledPhases, call: ToolCall) -> ToolResult | None:
    """The phase's answer to ``call`` before it runs (see :meth:`CompiledPhases.gate`):
    concurrent calls are all checked in the phase their turn started in, as their start
    events said."""
    source = phases.settle(ctx.rs)
    result = phases.gate(ctx.rs, call, ctx.turn_phase)
    if result is not None and not result.is_error:
        _moved(ctx, source, "model")
    return result


def move_by_code(
    ctx: RunContext, phases: CompiledPhases, result: ToolResult, target: str
) -> ToolResult:
    """Make the move a tool asked for by returning ``MovePhase(target)``; the result gains
    the refusal (as an error) when the move is not legal."""
    source = phases.settle(ctx.rs)
    refusal = phases.move(ctx.rs, target, by="code")
    if refusal is None:
        _moved(ctx, source, "code")
        return result
    content = f"{result.content}\n\nError: {refusal}. The task stays in phase '{source}'."
    return result.model_copy(update={"content": content.lstrip(), "is_error": True})


def move_by_budget(ctx: RunContext, phases: CompiledPhases) -> None:
    """Before a model call: when the phase's step budget is spent and it names an
    ``on_budget`` phase, move there."""
    phases.settle(ctx.rs)
    spent = phases.phases.spent(ctx.rs)
    if spent is None or spent[1] is None:
        return
    source = spent[0].name
    phases.move(ctx.rs, spent[1], by="budget")
    _moved(ctx, source, "budget")
