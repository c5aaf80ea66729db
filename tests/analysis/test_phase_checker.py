"""The phase checker, the phase diagrams and their commands: the task machine explored, drawn
and checked with the loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fsm_agent.cli import main
from fsm_agent.diagrams.phases import phases_dot, phases_mermaid
from fsm_agent.machine.checker.phases import check_phases
from fsm_agent.phases import Phase, Phases, PhaseView, Transition

ROOT = Path(__file__).resolve().parents[2]


def plan_act_check() -> Phases:
    return Phases(
        [
            Phase("plan", ("read",), max_steps=3, on_budget="act"),
            Phase("act", ("write",)),
            Phase("check", ("test",), max_steps=2, on_budget="act"),
        ],
        [("plan", "act"), ("act", "check"), ("check", "act")],
        goals=["check"],
    )


def planted_cycle() -> Phases:
    """plan <-> act forever: the exit to check opens only after 50 visits of act."""

    def act_visited_50(view: PhaseView) -> bool:
        return view.visited("act") > 50

    return Phases(
        [Phase("plan"), Phase("act"), Phase("check")],
        [("plan", "act"), ("act", "plan"), Transition("act", "check", act_visited_50)],
        goals=["check"],
    )


PLANTED = planted_cycle()


def test_a_sound_table_passes_with_a_bound_per_phase() -> None:
    """Every goal is reachable, nothing is cut off, and each phase's bound is its budget or
    the loop's step bound."""
    report = check_phases(plan_act_check(), 20)
    assert report.ok
    assert report.per_phase == {"plan": 3, "act": 19, "check": 2}
    assert report.goals_reachable == {"check": True}


def test_the_checker_finds_a_planted_phase_cycle_with_no_exit() -> None:
    """A guard that never opens inside the step bound leaves plan <-> act with no way to the
    goal: the report names the goal unreachable and prints the lasso."""
    report = check_phases(PLANTED, 20)
    assert not report.ok
    assert report.goals_reachable == {"check": False}
    assert report.stuck_path == ("plan",)
    assert report.lasso == ("plan", "act", "plan", "...")
    assert "  phase cycle with no exit: plan -> act -> plan -> ..." in report.lines()


def test_a_guard_that_opens_in_time_is_not_a_defect() -> None:
    """The same cycle with an exit that opens after two visits passes."""
    phases = Phases(
        [Phase("plan"), Phase("act"), Phase("check")],
        [
            ("plan", "act"),
            ("act", "plan"),
            Transition("act", "check", lambda view: view.visited("act") >= 2, "act twice"),
        ],
        goals=["check"],
    )
    assert check_phases(phases, 20).ok


def test_checking_is_fast_under_the_default_step_bound() -> None:
    """Guards that read neither the turns of a visit nor the visits leave them out of the
    search: the default policy's 200 turns are checked over a few hundred states, about four
    per turn (counted, not timed: the count does not depend on the machine's load)."""
    report = check_phases(plan_act_check(), 200)
    assert report.complete
    assert report.ok
    assert report.states < 2_000


def test_a_guard_reading_the_visits_is_searched_with_them() -> None:
    """The search keeps what the guards read, so a guard over the visits still decides."""
    report = check_phases(PLANTED, 60)
    assert report.complete
    assert report.lasso == ("plan", "act", "plan", "...")
    opens = check_phases(PLANTED, 120)  # 51 visits of act fit in 120 turns
    assert opens.ok


def test_the_mermaid_diagram_draws_phases_beside_the_loop_and_a_path() -> None:
    """Phases, their budgets and goals, the loop's states, and the moves a run made."""
    from fsm_agent.phases import PhaseChange

    path = [
        PhaseChange(source=None, dest="plan", by="start", step=0, move=0),
        PhaseChange(source="plan", dest="act", by="model", step=1, move=3),
    ]
    text = phases_mermaid(plan_act_check(), path)
    assert "plan --> act : x1" in text
    assert "check --> act : budget 2 spent" in text
    assert "check --> [*]" in text
    assert "calling --> dispatching" in text
    assert "class act visited" in text and "class check visited" not in text
    dot = phases_dot(plan_act_check(), path)
    assert "subgraph cluster_loop" in dot and 'plan -> act [label="×1"' in dot


def test_the_checked_in_phase_diagram_is_up_to_date() -> None:
    """diagrams/phases.mmd and phases.dot are the example's table as drawn now (regenerate
    with fsm-agent diagram --phases examples.plan_act_check:PHASES -o diagrams/phases.mmd)."""
    import runpy

    example = runpy.run_path(str(ROOT / "examples" / "plan_act_check.py"))
    assert (ROOT / "diagrams" / "phases.mmd").read_text(encoding="utf-8") == phases_mermaid(
        example["PHASES"]
    )
    assert (ROOT / "diagrams" / "phases.dot").read_text(encoding="utf-8") == phases_dot(
        example["PHASES"]
    )


def test_check_phases_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsm-agent check --phases exits 1 on the planted cycle, 0 on a sound table."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert main(["check", "--phases", "test_phase_checker:PLANTED", "--phase-turns", "12"]) == 1
    out = capsys.readouterr().out
    assert "phase cycle with no exit: plan -> act -> plan" in out and "FAILED" in out
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    assert main(["check", "--phases", "plan_act_check:PHASES", "--phase-turns", "12"]) == 0
    assert "PASSED" in capsys.readouterr().out


def test_diagram_phases_command_draws_a_recorded_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsm-agent diagram --phases --trace colours the phases a recorded run entered."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    import plan_act_check as example  # type: ignore[import-not-found]

    monkeypatch.setitem(example.FILES, "greet.py", "def greet(name):\n    return name\n")

    from fsm_agent.events import event_adapter
    from fsm_agent.testing import ScriptedModel

    async def events() -> list[str]:
        agent = example.build(ScriptedModel(example.SCRIPT))
        return [event_adapter.dump_json(e).decode() async for e in agent.run_stream("go")]

    trace = tmp_path / "run.jsonl"
    trace.write_text("\n".join(asyncio.run(events())) + "\n", encoding="utf-8")
    code = main(
        [
            "diagram",
            "--phases",
            "plan_act_check:PHASES",
            "--trace",
            str(trace),
            "--format",
            "mermaid",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "act --> check : x2" in out and "check --> act : x1" in out
    assert "dispatching --> compacting : x9" in out  # the loop's path: nine tool turns
    assert "class dispatching visited" in out


def test_the_docs_page_shows_the_checked_in_diagram() -> None:
    """docs/phases.md shows diagrams/phases.mmd as it is."""
    page = (ROOT / "docs" / "phases.md").read_text(encoding="utf-8")
    drawn = (ROOT / "diagrams" / "phases.mmd").read_text(encoding="utf-8")
    assert f"```mermaid\n{drawn}```" in page


def test_diagram_phases_command_draws_a_stored_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stored run (STORE#RUN_ID) is drawn from its checkpoint: its phase trace and its loop
    trace."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    import plan_act_check as example

    monkeypatch.setitem(example.FILES, "greet.py", "def greet(name):\n    return name\n")

    from fsm_agent import Agent
    from fsm_agent.persistence import SQLiteCheckpointer
    from fsm_agent.testing import ScriptedModel

    db = tmp_path / "runs.db"
    store = SQLiteCheckpointer(str(db))
    built = example.build(ScriptedModel(example.SCRIPT))
    agent = Agent(
        ScriptedModel(example.SCRIPT),
        tools=list(built.tools.values()),
        policy=built.policy,
        phases=example.PHASES,
        checkpointer=store,
    )
    result = asyncio.run(agent.run("go"))
    store.close()
    target = f"sqlite:///{db}#{result.run_id}"
    assert main(["diagram", "--phases", "plan_act_check:PHASES", "--trace", target]) == 0
    out = capsys.readouterr().out
    assert 'act -> check [label="×2"' in out
    assert 'loop_dispatching -> loop_compacting [label="×9"' in out
