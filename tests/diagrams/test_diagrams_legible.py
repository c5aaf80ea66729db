"""The pictures read at a page's width: measured on the layout Graphviz computes, every label is
at least 9 px at 900 px wide, no two labels overlap, and no edge runs through a label."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from diagram_layout import layout, problems
from fsm_agent import diagrams
from fsm_agent.cli.demo import DEMO_POLICY, demo_drawing, demo_events
from fsm_agent.events import Event
from fsm_agent.machine.table import NON_TERMINAL, TABLE, Outcome, Row, State

pytest.importorskip("pygraphviz", reason="measuring a layout needs the [diagrams] extra")


def _demo_run() -> list[Event]:
    async def collect() -> list[Event]:
        return [event async for event in demo_events()]

    return asyncio.run(collect())


_RUN = diagrams.RunPath.from_events(_demo_run())


def test_the_overview_is_legible() -> None:
    """The README's picture (the overview of the table) passes every measure."""
    assert problems(diagrams.overview_dot()) == []


@pytest.mark.parametrize("state", NON_TERMINAL, ids=str)
def test_each_state_detail_is_legible(state: State) -> None:
    """The detail of every state with rows passes every measure, and draws a line per row."""
    dot = diagrams.state_dot(state)
    assert problems(dot) == []
    assert len(layout(dot).texts) > sum(1 for row in TABLE if row.source is state)


@pytest.mark.parametrize("state", NON_TERMINAL, ids=str)
def test_each_state_detail_of_the_demo_run_is_legible(state: State) -> None:
    """The detail of every state with the demo run on it, under the demo's policy (rows it
    cannot take greyed, the rows it took counted), passes every measure and draws every row."""
    drawing = diagrams.plan(scope=diagrams.Scope.of(DEMO_POLICY, verifier=True), run=_RUN)
    dot = diagrams.state_dot(state, drawing)
    assert problems(dot) == []
    assert len(layout(dot).texts) > sum(1 for row in TABLE if row.source is state)


def test_the_demo_run_is_legible() -> None:
    """The demo's run drawn on the overview (``fsm-agent-demo.svg``) passes every measure."""
    assert problems(diagrams.overview_dot(demo_drawing(_demo_run()))) == []


def test_the_full_drawing_of_every_row_is_not() -> None:
    """The drawing of all the rows at once, the README's picture before the overview, fails
    the measure: its labels are under 9 px at 900 px wide."""
    found = problems(diagrams.to_dot())
    assert any("px at 900 px wide" in problem for problem in found)


def test_a_table_with_many_more_moves_fails_the_measure() -> None:
    """The measure follows the table: a copy where every working state may also move to every
    other state gives an overview that no longer reads at 900 px."""
    extra = tuple(
        Row(source, Outcome.OTHER, dest)
        for source in NON_TERMINAL
        for dest in State
        if dest not in (source, State.IDLE)
    )
    assert problems(diagrams.overview_dot(diagrams.plan((*TABLE, *extra)))) != []


def test_a_composition_is_legible() -> None:
    """The writer example's drawing (its overview with the researcher's box) and the
    researcher's own pass every measure."""
    import runpy
    from pathlib import Path

    from fsm_agent.cli.diagram_agent import agent_drawings

    example = Path(__file__).resolve().parents[2] / "examples" / "writer_researcher.py"
    writer = runpy.run_path(str(example))["writer"]
    drawn = agent_drawings(writer, "composition.dot", "dot", "writer")
    assert len(drawn) == 2
    for source in drawn.values():
        assert problems(source) == []


@pytest.mark.parametrize("children", [1, 2, 3, 4, 6])
def test_a_composition_with_several_children_is_legible(children: int) -> None:
    """An orchestrator with 1 to 6 agents as tools, each a box inside its dispatching, passes
    every measure."""
    from fsm_agent import Agent
    from fsm_agent.cli.diagram_agent import agent_drawings
    from fsm_agent.testing import ScriptedModel

    specialist = Agent(ScriptedModel([]))
    orchestrator = Agent(
        ScriptedModel([]),
        tools=[
            specialist.as_tool(name=f"specialist_{n}", description="A specialist.")
            for n in range(children)
        ],
    )
    (source,) = agent_drawings(orchestrator, None, "dot", "orchestrator").values()
    assert source.count('ID="agent-tool-') == children
    assert problems(source) == []


def test_a_composed_run_is_legible(tmp_path: Path) -> None:
    """A stored writer run drawn with each research call's child run inside its dispatching,
    and each child's run drawn on its own, pass every measure."""
    from test_composition_diagrams import stored_writer_run

    from fsm_agent.cli.diagram_run import child_runs_of, run_drawings
    from fsm_agent.persistence import SQLiteCheckpointer

    db = tmp_path / "runs.db"
    run_id = stored_writer_run(db)
    store = SQLiteCheckpointer(db)
    runs = child_runs_of(store, store.load(run_id).state)
    store.close()
    drawn = run_drawings(runs, run_id, "run.dot", "dot", "fsm_agent: run")
    assert len(drawn) == 3 and drawn["run.dot"].count('ID="agent-call-') == 2
    for source in drawn.values():
        assert problems(source) == []
