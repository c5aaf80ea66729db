"""The run state: a slotted dataclass built without validation, validated and stored through its
adapter, in the checkpoint shape older versions wrote."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from dataclasses import fields
from pathlib import Path

import pytest
from pydantic import ValidationError

from fsm_agent import Agent, HumanRequest, RunState, State, StopReason, tool
from fsm_agent.machine.agent_machine import Move
from fsm_agent.machine.table import Counters
from fsm_agent.persistence import SQLiteCheckpointer
from fsm_agent.phases import Phase, Phases
from fsm_agent.run_state import PhaseChange, explained
from fsm_agent.testing import ScriptedModel, text

SNAPSHOTS = Path(__file__).resolve().parents[1] / "support" / "snapshots"
OLD_STATE = SNAPSHOTS / "checkpoint_before_records.json"
"""A suspended run's checkpoint as fsm_agent wrote it while the run state was a pydantic model
(an in-memory store's JSON): phases, a human request, a trace, usage."""
OLD_ROWS = SNAPSHOTS / "checkpoint_rows_before_records.json"
"""The same run as that version's SQLite store wrote it: the runs, checkpoints and effects rows."""


def test_the_constructor_equals_a_validated_fresh_state() -> None:
    """RunState(run_id=...) without validation equals the state validation builds from the
    same input, field by field, and dumps to the same JSON."""
    fast = RunState(run_id="run_1")
    validated = RunState.model_validate({"run_id": "run_1"})
    assert fast == validated
    assert fast.model_dump_json() == validated.model_dump_json()
    assert RunState.model_validate_json(fast.model_dump_json()) == validated


def test_started_states_share_no_mutable_value() -> None:
    """Two runs' states hold their own lists and dicts."""
    first, second = RunState(run_id="a"), RunState(run_id="b")
    first.messages.append(None)  # type: ignore[arg-type]
    first.tool_outputs["c"] = "x"
    assert second.messages == []
    assert second.tool_outputs == {}
    names = [f.name for f in fields(RunState)]
    mutable = [n for n in names if isinstance(getattr(first, n), list | dict)]
    assert mutable and all(getattr(first, n) is not getattr(second, n) for n in mutable)


def test_a_misspelt_write_fails_where_it_is_made_and_is_explained() -> None:
    """A slotted run state has no room for a name that is not a field: the write raises, and
    the report names the field list."""
    state = RunState(run_id="r")
    with pytest.raises(AttributeError) as caught:
        state.outptu = "typo"  # type: ignore[attr-defined]
    report = str(explained(caught.value))
    assert "'outptu'" in report and "output" in report and "stop_reason" in report
    assert explained(caught.value).__cause__ is caught.value
    unrelated = AttributeError("'Other' object has no attribute 'outptu'")
    assert explained(unrelated) is unrelated
    assert explained(ValueError("x")).args == ("x",)


def test_validation_refuses_a_field_this_version_does_not_know() -> None:
    with pytest.raises(ValidationError, match="typo"):
        RunState.model_validate({"run_id": "r", "typo": 1})
    with pytest.raises(ValidationError):
        PhaseChange.model_validate(
            {"source": None, "dest": "a", "by": "start", "step": 0, "move": 0, "x": 1}
        )


def test_a_checkpoint_written_before_the_change_loads_and_keeps_its_shape() -> None:
    """The JSON of a pydantic-model run state loads into the typed values, and writing it back
    gives the same JSON: field names, order and discriminators are unchanged."""
    old = OLD_STATE.read_text()
    state = RunState.model_validate_json(old)
    assert state.state is State.SUSPENDED and state.stop_reason is StopReason.SUSPENDED
    assert state.counters == Counters(steps=3)
    assert all(isinstance(move, Move) for move in state.trace) and len(state.trace) == 10
    assert state.trace[-1].counters.steps == 3
    assert [type(r) for r in state.human_requests] == [HumanRequest]
    assert state.human_requests[0].call.name == "deploy"
    # The turn's fields, lists then, load as tuples (written back as the same JSON arrays).
    turn = (state.tool_results, state.approved_calls, state.human_requests, state.recent_turns)
    assert all(type(value) is tuple for value in turn)
    assert state.phase_trace[1] == PhaseChange(
        source="plan", dest="act", by="model", step=2, move=6
    )
    assert state.usage.requests == 3
    dumped = json.loads(state.model_dump_json())
    assert dumped.pop("children") == {}  # added since: a composed run's accounts, empty here
    assert dumped == json.loads(old)


@tool
def read(path: str) -> str:
    """Read a file."""
    return "contents of " + path


@tool(needs_approval=True)
def deploy() -> str:
    """Deploy."""
    return "deployed"


def test_a_sqlite_store_written_before_the_change_resumes(tmp_path: Path) -> None:
    """Rows the SQLite store wrote while the run state was a pydantic model load, and the
    suspended run they hold resumes to its end on the same agent."""
    rows = json.loads(OLD_ROWS.read_text())
    path = tmp_path / "old.db"
    SQLiteCheckpointer(path).close()  # the schema
    with sqlite3.connect(path) as db:
        for table, values in rows.items():
            marks = ", ".join("?" * len(values[0]))
            db.executemany(f"INSERT INTO {table} VALUES ({marks})", values)
    store = SQLiteCheckpointer(path)
    (run_id,) = {row[0] for row in rows["runs"]}
    loaded = store.load(run_id)
    assert loaded.version == 10 and loaded.state.state is State.SUSPENDED
    as_stored, as_kept = (
        json.loads(loaded.state.model_dump_json()),
        json.loads(OLD_STATE.read_text()),
    )
    for name in ("run_id", "resume_token"):  # the two fixtures are two runs of one script
        del as_stored[name], as_kept[name]
    assert as_stored.pop("children") == {}  # added since: a composed run's accounts
    assert as_stored == as_kept
    phases = Phases(
        [Phase("plan", ("read",), "Plan."), Phase("act", ("read", "deploy"), "Act.")],
        [("plan", "act")],
        goals=["act"],
    )
    agent = Agent(
        ScriptedModel([text("shipped")]),
        tools=[read, deploy],
        phases=phases,
        checkpointer=store,
        system_prompt="Be careful.",
    )
    result = asyncio.run(agent.resume(run_id, {loaded.state.human_requests[0].call.id: True}))
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "shipped")
    assert [m for m in result.messages if m.tool_results][-1].tool_results[0].content == "deployed"
    store.close()
