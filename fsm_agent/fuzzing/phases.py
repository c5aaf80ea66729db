"""Phases under attack: generated models that try illegal phase moves and out-of-phase tools.

Each case is a seeded script for an agent with a phase table (plan -> act -> check by default,
or yours, with a stub for each tool it names, or your own tools): turns of one or several calls
to any tool of any phase, unknown tools, ``move_to_phase`` toward legal, illegal and unknown
phases or with broken arguments, and tools that move the task by code. The real kernel plays
each case, and every run must keep the phase invariants:

- P1 a tool outside the phase current when its call starts never runs;
- P2 every phase move is a declared transition (or a budget move) from the phase it left, so
  an illegal move never changes the phase;
- P3 every tool call keeps exactly one result;
- P4 the phase the events report equals the run state's.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kernel.agent import Agent
from ..kernel.plan import plan_of
from ..kernel.run import RunHandle
from ..models.scripted import ScriptedModel, Turn, text, tool_calls
from ..phases.table import MOVE_TOOL, MovePhase, Phase, Phases
from ..policy import Policy
from ..run.events import PhaseChangedEvent, StateChangedEvent, StepStartEvent
from ..tools import Tool, ToolContext
from ..values.messages import Role

__all__ = ["PhaseFuzzReport", "default_phases", "fuzz_phases", "stub_tools"]


def default_phases() -> Phases:
    """The phase table the fuzzer attacks by default: plan -> act -> check, check -> act,
    a budget on check."""
    return Phases(
        [
            Phase("plan", ("read",), "Plan."),
            Phase("act", ("read", "write"), "Act."),
            Phase("check", ("test",), "Check.", max_steps=2, on_budget="act"),
        ],
        [("plan", "act"), ("act", "check"), ("check", "act")],
        goals=["check"],
    )


@dataclass
class PhaseFuzzReport:
    """What :func:`fuzz_phases` ran and every violation it found (seed, invariant, detail)."""

    cases: int = 0
    moves: int = 0
    refused: int = 0
    violations: list[tuple[int, str, str]] = field(default_factory=list)


def stub_tools(phases: Phases, ran: list[tuple[str, str]], seed: int) -> list[Tool]:
    """A stub for every tool the phases name: each appends ``(call_id, name)`` to ``ran`` when
    it runs, and one call in four returns a :class:`MovePhase` toward a phase drawn at random
    (an unknown one too), so moves by code are attacked as well."""
    chooser = random.Random(seed)
    targets = [*(p.name for p in phases.phases), "nowhere"]
    names = sorted({name for p in phases.phases for name in p.tools})

    def stub(name: str) -> Tool:
        def run(ctx: ToolContext[Any]) -> str | MovePhase:
            ran.append((ctx.call_id, name))
            if chooser.random() < 0.25:
                return MovePhase(chooser.choice(targets), f"{name} asks for a move")
            return f"{name} ran"

        return Tool(run, name=name, description=f"The {name} stub.")

    return [stub(name) for name in names]


def _script(rng: random.Random, phases: Phases, tool_names: Sequence[str]) -> list[Turn]:
    names = [p.name for p in phases.phases]
    turns: list[Turn] = []
    for _ in range(rng.randint(1, 14)):
        calls: list[tuple[str, Any]] = []
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            kind = rng.random()
            if kind < 0.45:
                target = rng.choice([*names, "nowhere", ""])
                args: Any = {"phase": target} if rng.random() < 0.9 else {"target": target}
                calls.append((MOVE_TOOL, args))
            elif kind < 0.95:
                calls.append((rng.choice(tool_names), {}))
            else:
                calls.append(("unknown_tool", {}))
        turns.append(tool_calls(*calls))
    turns.append(text("finished"))
    return turns


def fuzz_phases(
    cases: int = 200,
    *,
    seed: int = 0,
    phases: Phases | None = None,
    make_tools: Callable[[list[tuple[str, str]], int], list[Tool]] | None = None,
    parallel: bool = False,
) -> PhaseFuzzReport:
    """Run ``cases`` generated cases on the real kernel and check P1-P4 after each.
    ``make_tools(ran, seed)`` builds tools that append ``(call_id, name)`` to ``ran`` when
    they run (default: :func:`stub_tools` of the table)."""
    table = phases or default_phases()

    def build(ran: list[tuple[str, str]], case_seed: int) -> list[Tool]:
        if make_tools is not None:
            return make_tools(ran, case_seed)
        return stub_tools(table, ran, case_seed)

    report = PhaseFuzzReport()
    for index in range(cases):
        case_seed = seed + index
        rng = random.Random(case_seed)
        ran: list[tuple[str, str]] = []
        tools = build(ran, case_seed)
        script = _script(rng, table, [t.name for t in tools])
        agent = Agent(
            ScriptedModel(script),
            tools=tools,
            phases=table,
            policy=Policy(max_steps=20, parallel_tool_calls=parallel),
        )
        report.cases += 1
        for name, detail in asyncio.run(_play(agent, table, ran, report)):
            report.violations.append((case_seed, name, detail))
    return report


async def _play(
    agent: Agent[None], table: Phases, ran: list[tuple[str, str]], report: PhaseFuzzReport
) -> list[tuple[str, str]]:
    handle = RunHandle()
    events = [e async for e in agent.run_stream("go", handle=handle)]
    compiled = plan_of(agent).phases
    assert compiled is not None
    assert handle.result is not None
    rs = handle.result.run_state
    assert rs is not None
    found: list[tuple[str, str]] = []
    # P1: each tool that ran was allowed in the phase its call started in.
    started = {e.call_id: e.phase for e in events if isinstance(e, StepStartEvent)}
    for call_id, name in ran:
        phase = started.get(call_id)
        if phase is None or name not in compiled.allowed[phase]:
            found.append(("P1", f"{name} ran in phase {phase}"))
    # P2: every move is legal from the phase it left; the events and the phase trace agree.
    changes = [e for e in events if isinstance(e, PhaseChangedEvent)]
    current = table.initial
    for change in changes:
        report.moves += 1
        legal = change.dest in table.next_phases.get(change.source, ()) or (
            change.by == "budget" and table.by_name[change.source].on_budget == change.dest
        )
        if change.source != current or not legal:
            found.append(("P2", f"{change.source} -> {change.dest} by {change.by} from {current}"))
        current = change.dest
    traced = [(c.source, c.dest, c.by) for c in rs.phase_trace[1:]]
    if traced != [(c.source, c.dest, c.by) for c in changes]:
        found.append(("P2", f"phase trace {traced} differs from the events"))
    # P3: every tool call has exactly one result.
    calls = [c.id for m in rs.messages if m.role is Role.ASSISTANT for c in m.tool_calls]
    results = [r.call_id for m in rs.messages for r in m.tool_results]
    if sorted(calls) != sorted(results):
        found.append(("P3", f"calls {calls} but results {results}"))
    report.refused += sum(
        1 for m in rs.messages for r in m.tool_results if r.is_error and "phase" in r.content
    )
    # P4: the phase the events report is the run state's.
    final = [e for e in events if isinstance(e, StateChangedEvent)][-1]
    if not (final.phase == current == rs.phase):
        found.append(("P4", f"events {final.phase}/{current}, run state {rs.phase}"))
    return found
