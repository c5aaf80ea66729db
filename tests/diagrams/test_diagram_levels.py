"""The levels of a diagram: the overview (one edge per pair of states), the detail of one state
(its rows in order) and a run drawn on the overview, as DOT and as Mermaid."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from fsm_agent import diagrams
from fsm_agent.cli import main
from fsm_agent.cli.demo import DEMO_POLICY, demo_events
from fsm_agent.cli.diagram import gallery
from fsm_agent.errors import ConfigurationError
from fsm_agent.events import Event
from fsm_agent.machine.table import DECLARATIONS, NON_TERMINAL, TABLE, Outcome, State, StopReason
from fsm_agent.policy import Policy, RetryPolicy

ROOT = Path(__file__).resolve().parents[2]
EDGE = re.compile(r"^\s*(\w+) -> (\w+) \[(.*)\];$", re.MULTILINE)


def _demo_run() -> list[Event]:
    async def collect() -> list[Event]:
        return [event async for event in demo_events()]

    return asyncio.run(collect())


def _edges(dot: str) -> dict[tuple[str, str], str]:
    """The drawn edges of a DOT text (not the invisible ones), by (tail, head): their
    attributes."""
    return {
        (tail, head): attrs
        for tail, head, attrs in EDGE.findall(dot)
        if "invis" not in attrs and not tail.startswith("rows")
    }


def _label(attrs: str) -> str:
    found = re.search(r'label="((?:[^"\\]|\\.)*)"', attrs)
    return "" if found is None else found.group(1).replace("\\n", " ")


# --- the overview ----------------------------------------------------------------------------


def test_overview_draws_one_edge_per_pair_of_states() -> None:
    """Every (source, dest) pair of rows is one edge, labelled with each of its outcomes once;
    the interrupts that leave several states for one destination are left to the note."""
    sources: dict[tuple[Outcome, State], set[State]] = {}
    for row in TABLE:
        if row.outcome in DECLARATIONS[row.source].interrupts:
            sources.setdefault((row.outcome, row.dest), set()).add(row.source)
    pairs: dict[tuple[str, str], set[str]] = {}
    for row in TABLE:
        if len(sources.get((row.outcome, row.dest), ())) < 2:
            pairs.setdefault((row.source.value, row.dest.value), set()).add(row.outcome.value)
    edges = _edges(diagrams.overview_dot())
    assert {pair for pair in edges if not pair[0].startswith("__")} == set(pairs)
    for pair, outcomes in pairs.items():
        words = _label(edges[pair]).replace(",", " ").split()
        assert sorted(words) == sorted(outcomes), pair


def test_overview_writes_the_shared_interrupts_once_in_a_note() -> None:
    """``cancel`` and ``hook_error`` (from every state) and the limits (from the working
    states) are written once in the note, not drawn as an edge from every state."""
    dot = diagrams.overview_dot()
    note = next(x for x in dot.splitlines() if x.strip().startswith("__interrupts ["))
    text = note.replace("\\l", " ")
    assert "cancel, hook_error    from every state to aborted" in text
    assert "from compacting, calling,    dispatching, verifying to    finalizing" in text
    edges = _edges(dot)
    assert not [pair for pair, attrs in edges.items() if "cancel" in _label(attrs)]
    mermaid = diagrams.overview_mermaid()
    assert "interrupts --> aborted : cancel, hook_error (from every state)" in mermaid
    assert mermaid.count(" --> aborted :") == 3  # from calling, dispatching and the note


def test_a_cancelled_run_draws_its_cancel_from_the_state_it_left() -> None:
    """On a run cancelled in ``calling``, the cancel is an edge from ``calling`` to
    ``aborted``, blue and counted, beside the state's other error exits."""
    first = {(r.source, r.outcome): i for i, r in reversed(list(enumerate(TABLE)))}
    walk = [
        (State.IDLE, Outcome.START),
        (State.COMPACTING, Outcome.PROCEED),
        (State.CALLING, Outcome.CANCEL),
    ]
    visits = {State.IDLE: 1, State.COMPACTING: 1, State.CALLING: 1, State.ABORTED: 1}
    run = diagrams.RunPath(
        visits, {first[move]: 1 for move in walk}, State.ABORTED, StopReason.CANCELLED
    )
    edges = _edges(diagrams.overview_dot(diagrams.plan(run=run)))
    assert _label(edges["calling", "aborted"]) == "cancel / cancelled ×1"
    assert diagrams.DOT_STYLES["visited_edge"]["color"] in edges["calling", "aborted"]
    assert ("idle", "aborted") not in edges


def test_overview_lays_the_main_flow_top_to_bottom() -> None:
    """The overview is drawn top to bottom with the main flow as its spine."""
    dot = diagrams.overview_dot()
    assert 'rankdir="TB"' in dot
    assert "idle -> compacting -> calling -> dispatching -> finalizing -> done" in dot
    assert "direction TB" in diagrams.overview_mermaid()


def test_overview_links_each_state() -> None:
    """``link`` gives every state's node a URL; the ids are stable."""
    dot = diagrams.overview_dot(link=lambda state: f"#detail-{state.value}")
    for state in State:
        line = next(x for x in dot.splitlines() if x.strip().startswith(f"{state.value} ["))
        assert f'URL="#detail-{state.value}"' in line
        assert f'id="state-{state.value}"' in line


def test_overview_of_a_scope_keeps_the_outcomes_it_allows() -> None:
    """With a policy without retries, the calling self-loop keeps only the outcomes that can
    still take it; a pair nothing can take is greyed."""
    scope = diagrams.Scope.of(Policy(retry=RetryPolicy(max_retries=0)))
    edges = _edges(diagrams.overview_dot(diagrams.plan(scope=scope)))
    assert diagrams.DOT_STYLES["unreachable"]["style"] in edges["calling", "calling"]
    assert "unreachable" not in edges["calling", "dispatching"]
    verifying = _edges(diagrams.overview_dot(diagrams.plan(scope=scope)))["calling", "verifying"]
    assert 'style="dotted"' in verifying  # no verifier: the move is greyed


# --- a run on the overview -------------------------------------------------------------------


def test_run_on_the_overview_names_the_rows_it_took() -> None:
    """On the demo run, the taken edges are blue and name the rows taken with their counts;
    the others are faded; the end says why."""
    run = diagrams.RunPath.from_events(_demo_run())
    scope = diagrams.Scope.of(DEMO_POLICY, verifier=True)
    dot = diagrams.overview_dot(diagrams.plan(scope=scope, run=run))
    edges = _edges(dot)
    blue = diagrams.DOT_STYLES["visited_edge"]["color"]
    assert _label(edges["calling", "calling"]) == "retryable_error ×1"
    assert _label(edges["verifying", "finalizing"]) == "verified / completed ×1"
    assert _label(edges["calling", "dispatching"]) == "tool_calls ×2"
    assert blue in edges["calling", "dispatching"]
    faded = diagrams.OVERVIEW_STYLES["faded"]["color"]
    assert faded in edges["calling", "aborted"] and blue not in edges["calling", "aborted"]
    done = next(x for x in dot.splitlines() if x.strip().startswith("done ["))
    assert "ended: completed" in done
    mermaid = diagrams.overview_mermaid(diagrams.plan(scope=scope, run=run))
    assert "calling --> dispatching : tool_calls ×2" in mermaid
    assert "class done final" in mermaid


def test_a_run_waiting_for_a_human_says_so() -> None:
    """A run that stopped in ``suspended`` reads ``waiting for a human``, not an ending."""
    rows = {(r.source, r.outcome): i for i, r in reversed(list(enumerate(TABLE)))}
    walk = [
        (State.IDLE, Outcome.START),
        (State.COMPACTING, Outcome.PROCEED),
        (State.CALLING, Outcome.TOOL_CALLS),
        (State.DISPATCHING, Outcome.NEEDS_HUMAN),
    ]
    taken = {rows[move]: 1 for move in walk}
    visits = {State.IDLE: 1, State.COMPACTING: 1, State.CALLING: 1}
    run = diagrams.RunPath(
        visits | {State.DISPATCHING: 1, State.SUSPENDED: 1}, taken, State.SUSPENDED
    )
    dot = diagrams.overview_dot(diagrams.plan(run=run))
    suspended = next(x for x in dot.splitlines() if x.strip().startswith("suspended ["))
    assert "waiting for a human" in suspended and "ended:" not in suspended


# --- the detail of one state -----------------------------------------------------------------


@pytest.mark.parametrize("state", NON_TERMINAL, ids=str)
def test_detail_lists_the_state_rows_in_order(state: State) -> None:
    """A state's detail shows each of its rows, in table order, with its guard, stop reason,
    counter updates and destination."""
    dot = diagrams.state_dot(state)
    drawing = diagrams.plan()
    mine = [edge for edge in drawing.edges if edge.source is state]
    lines = re.findall(r'<TR><TD ALIGN="LEFT" BALIGN="LEFT">(\d+)</TD>(.*)</TR>', dot)
    assert [int(n) for n, _ in lines] == [edge.row for edge in mine]
    for edge, (_, cells) in zip(mine, lines, strict=True):
        assert cells.endswith(f'<TD ALIGN="LEFT" BALIGN="LEFT">{edge.dest.value}</TD>')
        if edge.guard:
            assert f"[{edge.guard}]".replace("<", "&lt;").replace(">", "&gt;") in dot
        if edge.stop:
            assert edge.stop in dot
        for update in edge.updates:
            assert update in dot


@pytest.mark.parametrize("state", NON_TERMINAL, ids=str)
def test_detail_draws_one_arrow_per_destination(state: State) -> None:
    """Beside its table, a state's detail draws one arrow to each state its rows move to (for
    ``calling``: 24 rows, six arrows), not one per row repeating the table's last column."""
    dot = diagrams.state_dot(state)
    dests = [edge.dest.value for edge in diagrams.plan().edges if edge.source is state]
    arrows = re.findall(r"^  rows\S* -> to_(\w+)", dot, flags=re.MULTILINE)
    assert arrows == list(dict.fromkeys(dests))
    if state is State.CALLING:
        assert (len(dests), len(arrows)) == (24, 6)


def test_detail_of_calling_reads_guards_with_the_policy_numbers() -> None:
    """The detail of ``calling`` reads its retry guard with the default numbers, a policy's
    numbers with a scope, and Mermaid lists every row with its updates."""
    assert "[retries &lt; 5]" in diagrams.state_dot(State.CALLING)
    scope = diagrams.Scope.of(Policy(retry=RetryPolicy(max_retries=7)))
    assert "[retries &lt; 7]" in diagrams.state_dot(State.CALLING, diagrams.plan(scope=scope))
    mermaid = diagrams.state_mermaid(State.CALLING)
    rows = [i for i, row in enumerate(TABLE) if row.source is State.CALLING]
    assert [int(n) for n in re.findall(r": row (\d+) ", mermaid)] == rows
    assert (
        "calling --> calling : row 16 retryable_error [retries < 5], then retries += 1" in mermaid
    )


def test_detail_of_a_run_marks_the_rows_it_took() -> None:
    """With the demo run, the detail of ``calling`` counts the rows it took."""
    run = diagrams.RunPath.from_events(_demo_run())
    dot = diagrams.state_dot(State.CALLING, diagrams.plan(run=run))
    assert "<B>taken</B>" in dot
    retry = next(i for i, r in enumerate(TABLE) if r.outcome is Outcome.RETRYABLE_ERROR)
    line = next(x for x in dot.splitlines() if "-> to_calling" in x)
    assert TABLE[retry].dest is State.CALLING
    assert diagrams.DOT_STYLES["visited_edge"]["color"] in line
    taken = {TABLE[row].dest for row in run.row_visits if TABLE[row].source is State.CALLING}
    for line in dot.splitlines():
        if line.startswith("  rows:e -> "):
            dest = State(line.split("-> to_")[1].split(":")[0])
            assert (diagrams.DOT_STYLES["visited_edge"]["color"] in line) is (dest in taken)


def test_a_terminal_state_has_no_detail() -> None:
    """Asking for the detail of ``done`` is a ConfigurationError that names the states that
    have one."""
    with pytest.raises(ConfigurationError, match="draw one of: idle, compacting"):
        diagrams.state_dot(State.DONE)
    with pytest.raises(ConfigurationError):
        diagrams.state_mermaid(State.ABORTED)


def test_the_gallery_holds_every_level() -> None:
    """The checked-in diagrams are the overview, the demo run and each state's detail."""
    names = set(gallery())
    assert {"agent.svg", "agent.dot", "agent.mmd", "demo-run.svg"} <= names
    assert {f"state-{state.value}.svg" for state in NON_TERMINAL} <= names
    assert gallery()["agent.dot"] == diagrams.overview_dot()


# --- the command -----------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_diagram_state_draws_the_detail(capsys: pytest.CaptureFixture[str]) -> None:
    """``fsm-agent diagram --state calling`` prints its detail as DOT or Mermaid; a terminal
    state, or --state with --level, is a usage error."""
    assert _cli(capsys, "diagram", "--state", "calling") == (
        0,
        diagrams.state_dot(State.CALLING),
        "",
    )
    code, out, _ = _cli(capsys, "diagram", "--state", "calling", "--format", "mermaid")
    assert (code, out) == (0, diagrams.state_mermaid(State.CALLING))
    code, _, err = _cli(capsys, "diagram", "--state", "done")
    assert code == 2 and "invalid choice: 'done'" in err
    code, _, err = _cli(capsys, "diagram", "--state", "calling", "--level", "full")
    assert code == 2 and "drop --level" in err
