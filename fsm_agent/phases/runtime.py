"""Phases at run time: what the model is offered in each phase, and every phase move.

:class:`CompiledPhases` is built once per agent (and policy): each phase's tool definitions
(its own tools and the generated ``move_to_phase`` tool whose ``phase`` argument is an enum of
the phase's next phases), its allowed names and its system message are computed then, so a
step under phases costs a few dictionary reads. Every move goes through :meth:`move`: the
target must be a declared next phase, a transition's guard must hold, and the phase's exit
check must pass; otherwise the move is refused with a message listing the legal targets and
the phase is unchanged.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Literal

from ..log import logger
from ..values.messages import Message, Role, ToolCall, ToolDefinition, ToolResult
from .table import MOVE_TOOL, PhaseChange, Phases, PhaseView

if TYPE_CHECKING:
    from ..run.state import RunState

__all__ = ["CompiledPhases", "move_tool_definition"]


def move_tool_definition(phase: str, targets: tuple[str, ...]) -> ToolDefinition:
    """The ``move_to_phase`` tool as the model sees it in ``phase``: ``phase`` is an enum of
    ``targets``, the phase's next phases."""
    return ToolDefinition(
        name=MOVE_TOOL,
        description=(
            f"Move the task from phase '{phase}' to its next phase when this phase's work is "
            f"done. Next phases: {', '.join(targets)}."
        ),
        parameters={
            "type": "object",
            "properties": {
                "phase": {"type": "string", "enum": list(targets)},
                "reason": {"type": "string", "description": "why the phase's work is done"},
            },
            "required": ["phase"],
            "additionalProperties": False,
        },
    )


def _error(call: ToolCall, content: str) -> ToolResult:
    return ToolResult(call_id=call.id, name=call.name, content=content, is_error=True)


class CompiledPhases:
    """A :class:`Phases` table fitted to one agent's tools and system prompt."""

    def __init__(
        self,
        phases: Phases,
        definitions: tuple[ToolDefinition, ...],
        system_prompt: str | None,
        *,
        always: frozenset[str] = frozenset(),
        goal_tools: tuple[ToolDefinition, ...] = (),
    ) -> None:
        phases.check_tools(d.name for d in definitions)
        self.phases = phases
        by_name = {d.name: d for d in definitions}
        self.tools_of: dict[str, tuple[ToolDefinition, ...]] = {}
        self.allowed: dict[str, frozenset[str]] = {}
        self.system_of: dict[str, Message | None] = {}
        base = None if system_prompt is None else Message.system(system_prompt)
        for p in phases.phases:
            targets = phases.next_phases.get(p.name, ())
            offered = tuple(by_name[name] for name in p.tools)
            finishing = goal_tools if p.name in phases.goals else ()
            offered = (*offered, *(d for d in finishing if d.name not in p.tools))
            if targets:
                offered = (*offered, move_tool_definition(p.name, targets))
            self.tools_of[p.name] = offered
            self.allowed[p.name] = frozenset(p.tools) | always | {d.name for d in finishing}
            if p.instructions:
                text = (
                    p.instructions
                    if system_prompt is None
                    else (f"{system_prompt}\n\n{p.instructions}")
                )
                self.system_of[p.name] = Message.system(text)
            else:
                self.system_of[p.name] = base
        self.base_system = base

    # -- reading the run state ------------------------------------------------------------
    def view(self, rs: RunState) -> PhaseView:
        """The guards' view of ``rs``."""
        visits = Counter(change.dest for change in rs.phase_trace)
        return PhaseView(
            steps=rs.counters.steps,
            phase_steps=rs.counters.steps - rs.phase_since,
            visits=visits,
        )

    def messages(self, rs: RunState) -> tuple[Message, ...]:
        """The history as the model gets it: the system message carries the current phase's
        instructions."""
        phase = self.settle(rs)
        system = self.system_of[phase]
        messages = rs.messages
        if system is None or system is self.base_system:
            return tuple(messages)
        if not messages or messages[0].role is not Role.SYSTEM:
            return (system, *messages)
        if self.base_system is None:  # the system message came with the history: keep it
            instructions = self.phases.by_name[phase].instructions
            system = Message.system(f"{messages[0].text}\n\n{instructions}")
        return (system, *messages[1:])

    def legal_now(self, rs: RunState) -> list[str]:
        """The next phases whose guard holds now (exit checks not asked)."""
        view = self.view(rs)
        legal: list[str] = []
        for t in self.phases.transitions_from(self.settle(rs)):
            if t.dest not in legal and _holds(t.guard, view):
                legal.append(t.dest)
        return legal

    # -- moving ---------------------------------------------------------------------------
    def settle(self, rs: RunState) -> str:
        """The run's phase, after putting a run that has none in this table (one started by
        an agent without phases, or under another table, resumed with
        ``allow_changed_definition``) in the initial phase."""
        phase = rs.phase
        if phase is not None and phase in self.allowed:
            return phase
        initial = self.phases.initial
        change = PhaseChange(
            source=phase, dest=initial, by="start", step=rs.counters.steps, move=len(rs.trace)
        )
        rs.phase_trace = (*rs.phase_trace, change)
        rs.phase = initial
        rs.phase_since = rs.counters.steps
        return initial

    def start(self, rs: RunState) -> None:
        """Put a new run in the initial phase."""
        rs.phase = self.phases.initial
        rs.phase_since = rs.counters.steps
        rs.phase_trace = (
            PhaseChange(source=None, dest=rs.phase, by="start", step=rs.counters.steps, move=0),
        )

    def move(
        self, rs: RunState, target: str, *, by: Literal["model", "code", "budget"]
    ) -> str | None:
        """Move ``rs`` to ``target``; the refusal (the phase unchanged) or ``None``."""
        source = self.settle(rs)
        declared = self.phases.next_phases.get(source, ())
        if by == "budget":
            if target not in self.phases.by_name:
                return f"unknown phase {target!r}"
        elif target not in declared:
            if not declared:
                return f"phase '{source}' has no next phase: finish the task here"
            return (
                f"cannot move from phase '{source}' to {target!r}: the legal next phases are "
                f"{', '.join(declared)}"
            )
        else:
            view = self.view(rs)
            allowed = [t for t in self.phases.transitions_from(source) if t.dest == target]
            if not any(_holds(t.guard, view) for t in allowed):
                labels = ", ".join(t.label or _name(t.guard) for t in allowed)
                now = self.legal_now(rs)
                return (
                    f"the move from phase '{source}' to '{target}' is not allowed yet "
                    f"({labels} does not hold); legal now: {', '.join(now) or 'none'}"
                )
            check = self.phases.by_name[source].exit_check
            if check is not None:
                refusal = _exit_refusal(check, rs, source)
                if refusal is not None:
                    return refusal
        rs.phase_trace = (
            *rs.phase_trace,
            PhaseChange(
                source=source, dest=target, by=by, step=rs.counters.steps, move=len(rs.trace)
            ),
        )
        rs.phase = target
        rs.phase_since = rs.counters.steps
        return None

    def gate(self, rs: RunState, call: ToolCall, in_phase: str | None = None) -> ToolResult | None:
        """Before ``call`` runs: the move tool's result (the move made or refused), or the
        refusal of a tool outside the current phase, or ``None`` when the call may run. With
        ``in_phase``, the phase a turn of concurrent calls started in, every call is judged
        there: a move once the task has left it is refused."""
        phase = self.settle(rs)
        if call.name == MOVE_TOOL:
            # Judged where the turn started: a turn already out of that phase makes no move.
            if in_phase is not None and phase != in_phase:
                return _error(
                    call,
                    f"Error: this call was made in a turn that started in phase '{in_phase}', "
                    f"and the task has moved to phase '{phase}' since; calls made together are "
                    f"judged in the phase their turn started in. You are in phase '{phase}': "
                    f"call {MOVE_TOOL} in your next turn to move on.",
                )
            args = call.arguments
            target = args.get("phase") if isinstance(args, dict) else None
            if not isinstance(target, str):
                legal = self.phases.next_phases.get(phase, ())
                return _error(
                    call,
                    'Error: move_to_phase needs {"phase": <next phase>}; the legal next '
                    f"phases are {', '.join(legal) or 'none'}",
                )
            refusal = self.move(rs, target, by="model")
            if refusal is not None:
                return _error(call, f"Error: {refusal}. You are still in phase '{phase}'.")
            tools = ", ".join(self.phases.by_name[target].tools) or "none"
            return ToolResult(
                call_id=call.id,
                name=call.name,
                content=f"Moved to phase '{target}'. Its tools: {tools}.",
            )
        if in_phase is not None:
            phase = in_phase
        if call.name in self.allowed[phase]:
            return None
        tools = ", ".join(self.phases.by_name[phase].tools) or "none"
        return _error(
            call,
            f"Error: tool '{call.name}' is not available in phase '{phase}' and was not run. "
            f"Its tools: {tools}; call {MOVE_TOOL} to move on first.",
        )


def _holds(guard: object, view: PhaseView) -> bool:
    if guard is None:
        return True
    try:
        return bool(guard(view))  # type: ignore[operator]
    except Exception:
        logger.warning("a phase guard raised; it counts as false", exc_info=True)
        return False


def _name(guard: object) -> str:
    return "a guard" if guard is None else f"guard {getattr(guard, '__name__', 'guard')}"


def _exit_refusal(check: object, rs: RunState, source: str) -> str | None:
    try:
        verdict = check(rs)  # type: ignore[operator]
    except Exception as exc:
        logger.warning("the exit check of phase %r raised; the move is refused", source)
        return f"the exit check of phase '{source}' failed ({type(exc).__name__}: {exc})"
    if isinstance(verdict, str):
        return f"phase '{source}' is not finished: {verdict}"
    if verdict is True:
        return None
    return f"phase '{source}' is not finished (its exit check did not pass)"
