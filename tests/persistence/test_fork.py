"""Forking a stored run: a new run from the state saved after one of its moves, optionally
edited, that leaves the original as it was and is itself durable."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import (
    Agent,
    DefinitionChangedError,
    InvalidInputError,
    Policy,
    Runtime,
    SQLiteCheckpointer,
    State,
    tool,
)
from fsm_agent.messages import Message, Role, ToolResult
from fsm_agent.persistence import Checkpointer
from fsm_agent.run_state import RunState
from fsm_agent.testing import (
    CrashingCheckpointer,
    ScriptedModel,
    SimulatedCrash,
    Turn,
    text,
    tool_call,
)

ROOT = Path(__file__).resolve().parents[2]


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def durable(turns: list[Turn], store: Checkpointer) -> tuple[Agent[Any, Any], ScriptedModel]:
    model = ScriptedModel(turns)
    return Agent(model, tools=[lookup], checkpointer=store, runtime=Runtime()), model


def original_run(store: Checkpointer) -> Any:
    """A stored run: one lookup, then an answer from its result."""
    agent, _ = durable([tool_call("lookup", {"query": "a"}), text("answer: found a")], store)
    return asyncio.run(agent.run("Look up a."))


def move_after_results(result: Any) -> int:
    """The move after which the lookup's result is in the history (the run is about to call
    the model again)."""
    return next(
        index + 1
        for index, move in enumerate(result.trace)
        if move.source is State.DISPATCHING and move.dest is not State.DISPATCHING
    )


def change_result(content: str) -> Any:
    def edit(state: RunState) -> None:
        last = state.messages[-1]
        (result,) = last.parts
        assert isinstance(result, ToolResult)
        state.messages[-1] = Message(
            role=Role.TOOL, parts=(result.model_copy(update={"content": content}),)
        )

    return edit


def test_fork_continues_from_the_edited_state_and_leaves_the_original(
    any_store: Checkpointer,
) -> None:
    """The fork's model sees the edited tool result and answers from it; the original's
    checkpoints are unchanged; the fork records where it came from."""
    original = original_run(any_store)
    before = [c.state.model_dump() for c in any_store.checkpoints(original.run_id)]  # type: ignore[attr-defined]
    at = move_after_results(original)
    forker, model = durable([text("answer: found b")], any_store)
    fork = asyncio.run(forker.fork(original.run_id, at=at, edit=change_result("found b")))
    assert fork.ok and fork.output == "answer: found b"
    assert fork.run_id != original.run_id
    assert model.requests[0].messages[-1].parts[0].content == "found b"  # type: ignore[union-attr]
    after = [c.state.model_dump() for c in any_store.checkpoints(original.run_id)]  # type: ignore[attr-defined]
    assert after == before
    assert any_store.load(original.run_id).state.output == "answer: found a"
    assert fork.run_state is not None
    assert (fork.run_state.forked_from, fork.run_state.forked_at) == (original.run_id, at)
    assert fork.trace[:at] == original.trace[:at]


def test_fork_of_a_durable_run_is_durable(any_store: Checkpointer) -> None:
    """The fork is checkpointed as a run of its own: cut short by a crash, it resumes by its
    id from its own checkpoints and finishes, its model called once per turn."""
    original = original_run(any_store)
    at = move_after_results(original)
    crashing = CrashingCheckpointer(any_store, crash_after=3)
    model = ScriptedModel([text("answer: found b")])
    forker = Agent(model, tools=[lookup], checkpointer=crashing, runtime=Runtime())
    with pytest.raises(SimulatedCrash):
        asyncio.run(forker.fork(original.run_id, at=at, edit=change_result("found b")))
    (fork_id,) = {r.run_id for r in any_store.runs()} - {original.run_id}
    assert any_store.load(fork_id).version >= 2
    resumer = Agent(model, tools=[lookup], checkpointer=any_store, runtime=Runtime())
    result = asyncio.run(resumer.resume(fork_id))
    assert result.ok and result.output == "answer: found b"
    assert model.calls == 1
    assert any_store.load(fork_id).state.forked_from == original.run_id


def test_fork_of_an_unsaved_move_is_refused(any_store: Checkpointer) -> None:
    """A move the store holds no checkpoint of is refused, naming the moves it holds."""
    original = original_run(any_store)
    forker, _ = durable([], any_store)
    with pytest.raises(InvalidInputError, match="no checkpoint after move 99"):
        asyncio.run(forker.fork(original.run_id, at=99))
    assert {r.run_id for r in any_store.runs()} == {original.run_id}


def test_fork_of_the_move_that_ended_the_run_is_refused(any_store: Checkpointer) -> None:
    """The last move of a finished run leaves nothing to do: refused, nothing stored."""
    original = original_run(any_store)
    forker, _ = durable([], any_store)
    with pytest.raises(InvalidInputError, match="had ended"):
        asyncio.run(forker.fork(original.run_id))
    assert {r.run_id for r in any_store.runs()} == {original.run_id}


def test_an_edit_that_breaks_the_history_is_refused(any_store: Checkpointer) -> None:
    """An edit that drops a tool call's result leaves an invalid history: refused with the
    problem named, nothing stored, the original intact."""
    original = original_run(any_store)
    at = move_after_results(original)

    def drop_result(state: RunState) -> None:
        state.messages.pop()

    forker, _ = durable([], any_store)
    with pytest.raises(InvalidInputError, match="no result"):
        asyncio.run(forker.fork(original.run_id, at=at, edit=drop_result))
    assert {r.run_id for r in any_store.runs()} == {original.run_id}


def test_an_edit_that_writes_garbage_is_refused(any_store: Checkpointer) -> None:
    """An edit that sets a field to a value of the wrong type is refused before anything is
    stored."""
    original = original_run(any_store)

    def garbage(state: RunState) -> None:
        state.model_calls = "many"  # type: ignore[assignment]

    forker, _ = durable([], any_store)
    with pytest.raises(InvalidInputError, match="not a valid run state"):
        asyncio.run(forker.fork(original.run_id, at=move_after_results(original), edit=garbage))
    assert {r.run_id for r in any_store.runs()} == {original.run_id}


def test_a_fork_by_a_changed_agent_is_refused_before_anything_is_stored(
    any_store: Checkpointer,
) -> None:
    """A fork run by an agent with another definition (here another system prompt) is refused
    with DefinitionChangedError and nothing is stored: no run is left waiting that nothing
    will run; allow_changed_definition=True forks and runs it."""
    original = original_run(any_store)
    at = move_after_results(original)
    model = ScriptedModel([text("answer: found a")])
    other = Agent(
        model, tools=[lookup], checkpointer=any_store, runtime=Runtime(), system_prompt="Be terse."
    )
    with pytest.raises(DefinitionChangedError, match="nothing was stored"):
        asyncio.run(other.fork(original.run_id, at=at))
    assert {r.run_id for r in any_store.runs()} == {original.run_id}
    assert model.calls == 0
    result = asyncio.run(other.fork(original.run_id, at=at, allow_changed_definition=True))
    assert result.ok and result.output == "answer: found a"


def test_fork_needs_a_checkpointer() -> None:
    """An agent without a store has no saved moves to fork from."""
    agent = Agent(ScriptedModel([]), policy=Policy())
    with pytest.raises(Exception, match="checkpointer"):
        asyncio.run(agent.fork("run_x", at=1))


def test_checkpoints_end_with_the_latest(any_store: Checkpointer) -> None:
    """A store's checkpoints, oldest first, end with the one ``load`` gives."""
    original = original_run(any_store)
    saved = any_store.checkpoints(original.run_id)  # type: ignore[attr-defined]
    assert [c.version for c in saved] == list(range(1, len(saved) + 1))
    assert saved[-1].state == any_store.load(original.run_id).state
    assert [len(c.state.trace) for c in saved] == list(range(1, len(original.trace) + 1))


def test_runs_fork_on_the_command_line(tmp_path: Path) -> None:
    """``fsm-agent runs fork`` stores the fork and says how to continue it."""
    path = tmp_path / "runs.db"
    original = original_run(SQLiteCheckpointer(str(path)))
    at = move_after_results(original)
    command = [sys.executable, "-m", "fsm_agent", "runs", "fork", original.run_id]
    completed = subprocess.run(
        [*command, "--at", str(at), "--db", str(path)],
        env={"PYTHONPATH": str(ROOT), "PATH": "", "PYTHONIOENCODING": "utf-8"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert f"forked from {original.run_id} at move {at}" in completed.stdout
    store = SQLiteCheckpointer(str(path))
    (fork_id,) = {r.run_id for r in store.runs()} - {original.run_id}
    assert store.load(fork_id).state.forked_at == at


def test_fork_of_a_suspended_move_waits_for_its_own_decisions(any_store: Checkpointer) -> None:
    """Forked at a move that waits for a human, the fork comes back suspended with a resume
    handle of its own; resumed with the decisions, it runs the approved call."""

    @tool(needs_approval=True)
    def refund(amount: int) -> str:
        """Refund an amount."""
        return f"refunded {amount}"

    def agent(turns: list[Turn]) -> Agent[Any, Any]:
        return Agent(
            ScriptedModel(turns), tools=[refund], checkpointer=any_store, runtime=Runtime()
        )

    original = asyncio.run(agent([tool_call("refund", {"amount": 5})]).run("Refund 5."))
    assert original.state is State.SUSPENDED
    forker = agent([text("Refunded.")])
    fork = asyncio.run(forker.fork(original.run_id))
    assert fork.state is State.SUSPENDED and fork.resume_handle is not None
    assert fork.resume_handle.run_id == fork.run_id != original.run_id
    assert fork.resume_handle.token != original.resume_handle.token  # type: ignore[union-attr]
    (call,) = fork.pending
    done = asyncio.run(forker.resume(fork.resume_handle, {call.id: True}))
    assert done.ok and done.output == "Refunded."
    assert any_store.load(original.run_id).state.state is State.SUSPENDED
