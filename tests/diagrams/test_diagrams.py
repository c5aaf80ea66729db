"""Diagrams: the DOT and Mermaid text generators, policy scopes, run overlays and rendering."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from fsm_agent import diagrams
from fsm_agent.cli.demo import DEMO_POLICY, demo_events
from fsm_agent.cli.diagram import REGENERATE, check_gallery
from fsm_agent.diagrams import (
    RenderingUnavailableError,
    RunPath,
    Scope,
    TraceError,
    plan,
    to_dot,
    to_mermaid,
)
from fsm_agent.errors import ConfigurationError
from fsm_agent.events import Event, FinalEvent, StateChangedEvent, event_adapter
from fsm_agent.machine.table import GUARDS, TABLE, Limits, Outcome, State, StopReason
from fsm_agent.policy import Policy, RetryPolicy, ToolFailureMode, UsageLimits

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = Path(__file__).resolve().parents[1] / "support" / "snapshots"
UPDATE = os.environ.get("FSM_AGENT_UPDATE_SNAPSHOTS") == "1"


def _snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8") if path.exists() else None
    assert text == expected, (
        f"snapshot {name} differs; if the change is intended, rerun with "
        "FSM_AGENT_UPDATE_SNAPSHOTS=1 and review the diff"
    )


def _demo_run() -> list[Event]:
    async def collect() -> list[Event]:
        return [event async for event in demo_events()]

    return asyncio.run(collect())


def _edge(drawing: diagrams.Plan, row: int) -> diagrams.Edge:
    return next(edge for edge in drawing.edges if edge.row == row)


def _node(drawing: diagrams.Plan, state: State) -> diagrams.Node:
    return next(node for node in drawing.nodes if node.state is state)


def _rows(outcome: Outcome) -> list[int]:
    return [i for i, row in enumerate(TABLE) if row.outcome is outcome]


# --- text generators -------------------------------------------------------------------------


def test_dot_matches_snapshot() -> None:
    """The DOT text of the table is stable (snapshot)."""
    _snapshot("agent.dot", to_dot())


def test_mermaid_matches_snapshot() -> None:
    """The Mermaid text of the table is stable (snapshot)."""
    _snapshot("agent.mmd", to_mermaid())


def test_policy_mermaid_matches_snapshot() -> None:
    """A policy-scoped Mermaid diagram is stable (snapshot)."""
    scope = Scope.of(Policy(max_steps=10, retry=RetryPolicy(max_retries=0)))
    _snapshot("policy.mmd", to_mermaid(plan(scope=scope, title="max_steps=10, no retries")))


def test_run_overlay_dot_matches_snapshot() -> None:
    """The demo run drawn on the machine is stable (snapshot)."""
    drawing = plan(scope=Scope.of(DEMO_POLICY, verifier=True), run=RunPath.from_events(_demo_run()))
    _snapshot("demo-run.dot", to_dot(drawing))


def test_text_is_deterministic() -> None:
    """Generating the same diagram twice gives the same text."""
    assert to_dot() == to_dot()
    assert to_mermaid() == to_mermaid()


def test_every_row_and_state_is_drawn() -> None:
    """Every row appears in the DOT edge ids and as a Mermaid transition; every state as a node."""
    dot, mermaid = to_dot(), to_mermaid()
    drawn_rows = set()
    for line in dot.splitlines():
        if 'id="row' in line:
            ids = line.split('id="row', 1)[1].split('"', 1)[0]
            drawn_rows.update(int(part) for part in ids.split("_"))
    assert drawn_rows == set(range(len(TABLE)))
    transitions = [line for line in mermaid.splitlines() if " --> " in line and "[*]" not in line]
    assert len(transitions) == len(TABLE)
    for state in State:
        assert re.search(rf"^\s*{state.value} \[", dot, re.MULTILINE), state
    assert mermaid.startswith("stateDiagram-v2\n")


def test_labels_read_outcome_guard_and_stop_in_row_order() -> None:
    """A retried error reads ``1. retryable_error [retries < 5]`` then ``2. … [else] / …``."""
    drawing = plan()
    first, second, third = _rows(Outcome.RETRYABLE_ERROR)
    assert _edge(drawing, first).label == "1. retryable_error [retries < 5]"
    assert _edge(drawing, second).label == "2. retryable_error [model_switches < 1]"
    assert _edge(drawing, third).label == "3. retryable_error [else] / max_errors"
    (start,) = _rows(Outcome.START)
    assert _edge(drawing, start).label == "start"


def test_every_guard_has_a_label() -> None:
    """Every guard of the table reads as a condition, not as its function name."""
    for name in GUARDS:
        assert diagrams.guard_label(name, Limits()) != name


def test_unlimited_clauses_drop_out_of_labels() -> None:
    """A limit that is not set leaves its clause out; a set one shows its number."""
    assert diagrams.guard_label("can_retry", Limits(max_total_errors=None)) == "retries < 5"
    assert (
        diagrams.guard_label("can_retry", Limits(max_retries=2, max_total_errors=9))
        == "retries < 2 and total_errors + 1 < 9"
    )
    assert diagrams.guard_label("steps_left", Limits(max_steps=None)) == "steps_left"


def test_terminal_states_are_styled() -> None:
    """``done`` and ``aborted`` are drawn as terminal states in both formats."""
    dot = to_dot()
    for state in ("done", "aborted"):
        line = next(x for x in dot.splitlines() if x.strip().startswith(f"{state} ["))
        assert 'peripheries="2"' in line
    assert "class done,aborted terminal" in to_mermaid()


# --- policy scopes ---------------------------------------------------------------------------


def test_policy_numbers_fill_the_guards() -> None:
    """With a policy, guards show its numbers."""
    scope = Scope.of(Policy(max_steps=12, retry=RetryPolicy(max_retries=7)))
    drawing = plan(scope=scope)
    assert _edge(drawing, _rows(Outcome.RETRYABLE_ERROR)[0]).label.endswith("[retries < 7]")
    assert _edge(drawing, _rows(Outcome.TOOLS_DONE)[0]).label.endswith("[steps < 12]")


def test_no_verifier_greys_verifying() -> None:
    """Without a verifier, ``verifying`` and every row into or out of it are unreachable."""
    drawing = plan(scope=Scope.of(Policy()))
    assert not _node(drawing, State.VERIFYING).reachable
    for edge in drawing.edges:
        if State.VERIFYING in (edge.source, edge.dest):
            assert not edge.reachable, edge
    assert "verifying" in to_mermaid(drawing).split("classDef unreachable", 1)[1]
    with_verifier = plan(scope=Scope.of(Policy(), verifier=True))
    assert _node(with_verifier, State.VERIFYING).reachable
    assert Scope.of(Policy(require_done_tool=True)).limits.verification


def test_no_scope_greys_nothing() -> None:
    """The plain diagram shows every row and state as reachable."""
    drawing = plan()
    assert all(edge.reachable for edge in drawing.edges)
    assert all(node.reachable for node in drawing.nodes)


def test_zero_retries_greys_the_retry_rows() -> None:
    """``max_retries=0`` makes the retry rows unreachable but keeps the abort rows."""
    drawing = plan(scope=Scope.of(Policy(retry=RetryPolicy(max_retries=0))))
    retry, _switch, give_up = _rows(Outcome.RETRYABLE_ERROR)
    assert not _edge(drawing, retry).reachable
    assert _edge(drawing, give_up).reachable


def test_limits_grey_the_interrupts_they_cannot_raise() -> None:
    """Deadline, usage and tool-abort rows are reachable only when the policy can raise them."""
    plain = plan(scope=Scope.of(Policy()))
    for outcome in (Outcome.DEADLINE, Outcome.USAGE_EXCEEDED, Outcome.TOOL_ABORT):
        assert not any(_edge(plain, i).reachable for i in _rows(outcome)), outcome
    strict = plan(
        scope=Scope.of(
            Policy(
                max_wall_clock_s=60,
                usage_limits=UsageLimits(max_total_tokens=1000),
                tool_failure_mode=ToolFailureMode.FAIL,
            ),
            verifier=True,
            stop_conditions=True,
        )
    )
    for outcome in (
        Outcome.DEADLINE,
        Outcome.USAGE_EXCEEDED,
        Outcome.TOOL_ABORT,
        Outcome.STOP_CONDITION,
    ):
        assert all(_edge(strict, i).reachable for i in _rows(outcome)), outcome


def test_unlimited_steps_grey_the_step_limit_rows() -> None:
    """Without a step limit (bounded by time instead), no row stops for ``max_steps``."""
    drawing = plan(scope=Scope.of(Policy(max_steps=None, max_wall_clock_s=60), verifier=True))
    for edge in drawing.edges:
        if TABLE[edge.row].stop is StopReason.MAX_STEPS:
            assert not edge.reachable, edge


# --- run overlays ----------------------------------------------------------------------------


def test_run_path_counts_visits_and_marks_the_end() -> None:
    """The demo run's path counts each state and row it took and ends in ``done``."""
    events = _demo_run()
    run = RunPath.from_events(events)
    moves = [e for e in events if isinstance(e, StateChangedEvent)]
    assert sum(run.row_visits.values()) == len(moves)
    assert run.state_visits[State.IDLE] == 1
    assert run.state_visits[State.CALLING] == sum(1 for m in moves if m.dest is State.CALLING)
    assert run.final is State.DONE
    assert run.stop_reason is StopReason.COMPLETED
    retried = _rows(Outcome.RETRYABLE_ERROR)[0]
    assert run.row_visits[retried] == 1


def test_overlay_highlights_path_and_final_state() -> None:
    """Visited states and edges carry their counts and the path style; the final state is
    marked."""
    run = RunPath.from_events(_demo_run())
    drawing = plan(run=run)
    dot = to_dot(drawing)
    calling = next(x for x in dot.splitlines() if x.strip().startswith("calling ["))
    assert f"×{run.state_visits[State.CALLING]}" in calling
    assert diagrams.DOT_STYLES["visited_node"]["fillcolor"] in calling
    done = next(x for x in dot.splitlines() if x.strip().startswith("done ["))
    assert "final: completed" in done
    assert diagrams.DOT_STYLES["final"]["color"] in done
    retry = _rows(Outcome.RETRYABLE_ERROR)[0]
    retry_line = next(x for x in dot.splitlines() if 'id="row' in x and f"_{retry}_" in x)
    assert "×1" in retry_line
    assert diagrams.DOT_STYLES["visited_edge"]["color"] in retry_line
    unvisited = _rows(Outcome.FATAL_ERROR)[0]
    assert "×" not in next(x for x in dot.splitlines() if f'id="row{unvisited}"' in x)
    mermaid = to_mermaid(drawing)
    assert "calling --> calling : 1. retryable_error [retries < 5] ×1" in mermaid
    assert "class done final" in mermaid


def test_read_trace_reads_recorded_jsonl(tmp_path: Path) -> None:
    """A recorded JSONL run reads back into the same path."""
    events = _demo_run()
    path = tmp_path / "run.jsonl"
    path.write_text("".join(event_adapter.dump_json(e).decode() + "\n" for e in events))
    assert diagrams.read_trace(path) == RunPath.from_events(events)


def test_read_trace_rejects_a_line_that_is_not_an_event(tmp_path: Path) -> None:
    """A line that is not an event is a TraceError naming the file and line."""
    path = tmp_path / "bad.jsonl"
    path.write_text('\n{"type": "nonsense", "run_id": "r"}\n')
    with pytest.raises(TraceError, match=r"bad\.jsonl:2: not an fsm_agent event"):
        diagrams.read_trace(path)
    assert issubclass(TraceError, ConfigurationError)


def _move(source: State, outcome: Outcome, dest: State, row: int, run_id: str = "r") -> Event:
    return StateChangedEvent(run_id=run_id, source=source, outcome=outcome, dest=dest, row=row)


def test_trace_must_fit_the_table() -> None:
    """Moves that are not the table's rows, that do not connect, or of two runs are refused."""
    start = _rows(Outcome.START)[0]
    proceed = _rows(Outcome.PROCEED)[0]
    with pytest.raises(TraceError, match="another table"):
        RunPath.from_events([_move(State.IDLE, Outcome.START, State.CALLING, start)])
    with pytest.raises(TraceError, match="does not exist"):
        RunPath.from_events([_move(State.IDLE, Outcome.START, State.COMPACTING, 999)])
    with pytest.raises(TraceError, match="events are missing"):
        RunPath.from_events(
            [
                _move(State.IDLE, Outcome.START, State.COMPACTING, start),
                _move(State.COMPACTING, Outcome.PROCEED, State.CALLING, proceed),
                _move(State.COMPACTING, Outcome.PROCEED, State.CALLING, proceed),
            ]
        )
    with pytest.raises(TraceError, match="more than one run"):
        RunPath.from_events(
            [
                _move(State.IDLE, Outcome.START, State.COMPACTING, start),
                _move(State.COMPACTING, Outcome.PROCEED, State.CALLING, proceed, run_id="other"),
            ]
        )
    with pytest.raises(TraceError, match="no state_changed"):
        RunPath.from_events([FinalEvent(run_id="r", output="", stop_reason=StopReason.COMPLETED)])


# --- rendering -------------------------------------------------------------------------------


def test_render_svg_parses_and_shows_every_state() -> None:
    """A real SVG is valid XML with a node titled by every state."""
    svg = diagrams.render(to_dot(), "svg")
    root = ElementTree.fromstring(svg)
    ns = {"svg": "http://www.w3.org/2000/svg"}
    titles = {
        g.find("svg:title", ns).text  # type: ignore[union-attr]
        for g in root.iterfind(".//svg:g[@class='node']", ns)
    }
    assert {state.value for state in State} <= titles


def test_render_png_is_a_png() -> None:
    """PNG rendering gives PNG bytes."""
    assert diagrams.render(to_dot(), "png").startswith(b"\x89PNG\r\n\x1a\n")


def test_rendering_unavailable_is_a_typed_error_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without pygraphviz and without a system ``dot``, text still works and rendering raises
    RenderingUnavailableError saying what to install."""
    monkeypatch.setitem(sys.modules, "pygraphviz", None)  # import pygraphviz → ImportError
    monkeypatch.setenv("PATH", "")  # the graphviz package finds no ``dot``
    assert to_dot().startswith("//")
    assert to_mermaid().startswith("stateDiagram-v2")
    with pytest.raises(RenderingUnavailableError, match=r"pip install -e '\.\[diagrams\]'"):
        diagrams.render(to_dot(), "svg")
    monkeypatch.setitem(sys.modules, "graphviz", None)
    with pytest.raises(RenderingUnavailableError) as caught:
        diagrams.render(to_dot(), "png")
    assert isinstance(caught.value, ConfigurationError)
    assert "PNG" in str(caught.value)


def test_svg_stamp_round_trips() -> None:
    """A stamped SVG records the digest of its DOT and stays valid XML."""
    dot = to_dot()
    svg = diagrams.stamp_svg(diagrams.render(dot), dot)
    assert diagrams.svg_digest(svg) == diagrams.dot_digest(dot)
    ElementTree.fromstring(svg)
    assert diagrams.svg_digest(b"<svg/>") is None


def test_checked_in_diagrams_are_fresh() -> None:
    """Every file in diagrams/ matches the table (and the demo run) as they are now."""
    stale = check_gallery(ROOT / "diagrams")
    assert not stale, f"stale diagrams: {', '.join(stale)}; regenerate with: {REGENERATE}"
