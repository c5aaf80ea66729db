"""Abandoning a composed run over a real SQLite store reaches every descendant: after a crash
(``fsm-agent runs abandon``) each child ends abandoned with what its journal knows, and while
the run is still going no child starts a tool call after the abandon."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Literal

import pytest

from fsm_agent import Agent, CheckpointConflictError, Policy, Runtime, State, StopReason, tool
from fsm_agent.cli import main
from fsm_agent.kernel.durable_child import child_run_id
from fsm_agent.messages import ToolResult, validate_history
from fsm_agent.persistence import Checkpointer, SQLiteCheckpointer
from fsm_agent.run_state import RunState
from fsm_agent.testing import CrashingCheckpointer, ScriptedModel, SimulatedCrash, text, tool_call

PARENT_ID = "run_parent"


class Charges:
    """The outside world the children's tool changes (a crash or an abandon does not reset
    it), and the composition: a manager whose agent tool ``pay`` is a clerk whose agent tool
    ``bill`` is a cashier that charges three times, one call a turn."""

    def __init__(self, store: Checkpointer) -> None:
        self.made: list[int] = []
        self.first = asyncio.Event()
        self.release = asyncio.Event()
        self.hold = False

        @tool
        async def charge(amount: int) -> str:
            """Charge the customer (not idempotent)."""
            self.made.append(amount)
            if self.hold and len(self.made) == 1:
                self.first.set()
                await self.release.wait()
            return f"charged {amount}"

        cashier = Agent(
            ScriptedModel(
                [tool_call("charge", {"amount": n}, id=f"k{n}") for n in (1, 2, 3)]
                + [text("charged 1, 2 and 3")]
            ),
            tools=[charge],
            runtime=Runtime(),
        )
        clerk = Agent(
            ScriptedModel(
                [tool_call("bill", {"task": "Charge 1, 2, 3."}, id="b1"), text("billed")]
            ),
            tools=[cashier.as_tool(name="bill", description="Bill the customer.")],
            runtime=Runtime(),
        )
        self.manager = Agent(
            ScriptedModel([tool_call("pay", {"task": "Take the payment."}, id="p1"), text("paid")]),
            tools=[clerk.as_tool(name="pay", description="Take a payment.")],
            checkpointer=store,
            policy=Policy(parallel_tool_calls=False),
            runtime=Runtime(new_id=lambda: PARENT_ID),
        )


def _descendants(store: Checkpointer) -> list[RunState]:
    """The manager's run, its child's and its grandchild's, from the store."""
    found = [store.load(PARENT_ID).state]
    for call_id in ("p1", "b1"):
        parent = found[-1]
        child_id = parent.child_runs.get(call_id) or child_run_id(parent.run_id, 1, call_id)
        found.append(store.load(child_id).state)
    return found


def _results(rs: RunState) -> dict[str, ToolResult]:
    return {r.call_id: r for m in rs.messages for r in m.tool_results}


class _CrashInTheCashier(CrashingCheckpointer):
    """Stops the process as a crash would right after the cashier journals the intent of its
    second charge, or its result."""

    def __init__(self, inner: Checkpointer, at: Literal["intent", "result"]) -> None:
        super().__init__(inner, 0)
        self.where = at

    def record_intent(self, run_id: str, key: str, kind: Any, *, version: int) -> None:
        """Record, then crash when this is the second charge's intent."""
        self.inner.record_intent(run_id, key, kind, version=version)
        if self.where == "intent" and key.endswith("/tool/k2"):
            raise SimulatedCrash("after the second charge started")

    def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
        """Record, then crash when this is the second charge's result."""
        self.inner.record_result(run_id, key, result, version=version)
        if self.where == "result" and key.endswith("/tool/k2"):
            raise SimulatedCrash("after the second charge's result")


@pytest.mark.parametrize("crash", ["intent", "result"])
def test_runs_abandon_after_a_crash_ends_every_descendant(
    tmp_path: Path, crash: Literal["intent", "result"]
) -> None:
    """A crash inside the grandchild, then ``fsm-agent runs abandon`` on the top run: the
    child and the grandchild end aborted (cancelled) too, the grandchild's cut charge keeps
    what its journal knows (outcome unknown, or its recorded result), every call of every run
    has one result, and nothing runs again."""
    path = tmp_path / "runs.db"
    store = SQLiteCheckpointer(path)
    world = Charges(_CrashInTheCashier(store, crash))
    with pytest.raises(SimulatedCrash):
        world.manager.run_sync("Take the payment.")
    store.close()
    made = [1] if crash == "intent" else [1, 2]
    assert world.made == made

    assert main(["runs", "abandon", PARENT_ID, "--db", str(path), "--reason", "refunded"]) == 0
    store = SQLiteCheckpointer(path)
    manager, clerk, cashier = _descendants(store)
    for rs in (manager, clerk, cashier):
        assert (rs.state, rs.stop_reason) == (State.ABORTED, StopReason.CANCELLED), rs.run_id
        assert rs.pending_tool_calls == [] and rs.resume_token is None
        validate_history(rs.messages)
    assert manager.error == "the run was abandoned: refunded"
    assert clerk.error is not None and f"parent run {PARENT_ID} was abandoned" in clerk.error
    second = _results(cashier)["k2"]
    if crash == "intent":
        assert second.is_error and second.content.startswith("Error: outcome unknown")
    else:
        assert second.content == "charged 2" and not second.is_error
    (paid,) = _results(manager).values()
    assert paid.is_error and clerk.run_id in paid.content and "abandoned" in paid.content
    (billed,) = _results(clerk).values()
    assert billed.is_error and cashier.run_id in billed.content
    assert world.made == made
    store.close()


def test_abandon_while_the_run_goes_on_stops_its_descendants(tmp_path: Path) -> None:
    """The run is abandoned from another agent while its grandchild's first charge runs: when
    that charge returns, no child starts another call (the worker's next write is refused),
    and every run of the composition is stored abandoned."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    world = Charges(store)
    world.hold = True
    operator = Agent(ScriptedModel([]), checkpointer=store, runtime=Runtime())

    async def main_() -> None:
        running = asyncio.create_task(world.manager.run("Take the payment."))
        await world.first.wait()
        await operator.abandon(PARENT_ID, reason="stop")
        world.release.set()
        with pytest.raises(CheckpointConflictError):
            await running

    asyncio.run(main_())
    assert world.made == [1]
    for rs in _descendants(store):
        assert (rs.state, rs.stop_reason) == (State.ABORTED, StopReason.CANCELLED), rs.run_id
        validate_history(rs.messages)
    store.close()


def test_runs_list_lists_children_under_their_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fsm-agent runs list`` lists the child run under its parent's and the grandchild
    under the child's, each saying whose call it ran for; a fork is listed under its
    original, saying from which move."""
    path = tmp_path / "runs.db"
    store = SQLiteCheckpointer(path)
    world = Charges(store)
    assert world.manager.run_sync("Take the payment.").ok
    _, clerk, cashier = _descendants(store)
    forker = Agent(
        ScriptedModel([text("paid again")]),
        tools=[world.manager.tools["pay"]],
        checkpointer=store,
        policy=world.manager.policy,
        runtime=Runtime(),
    )
    fork = asyncio.run(forker.fork(PARENT_ID, at=3))
    store.close()
    assert main(["runs", "list", "--db", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    ids = [line.replace("└", " ").split()[0] for line in lines]
    assert ids.index(PARENT_ID) < ids.index(clerk.run_id) < ids.index(cashier.run_id)
    assert ids.index(PARENT_ID) < ids.index(fork.run_id)
    by_id = dict(zip(ids, lines, strict=True))
    assert by_id[PARENT_ID].startswith(PARENT_ID)
    assert by_id[clerk.run_id].startswith(f"└ {clerk.run_id}")
    assert by_id[clerk.run_id].endswith(f"child of {PARENT_ID} (call p1)")
    assert by_id[cashier.run_id].startswith(f"  └ {cashier.run_id}")
    assert by_id[cashier.run_id].endswith(f"child of {clerk.run_id} (call b1)")
    assert by_id[fork.run_id].endswith(f"fork of {PARENT_ID} at move 3")


class _CrashWhenTheCashierEnds(CrashingCheckpointer):
    """Stops the process as a crash would right after the cashier's run is saved ended, before
    the clerk journals the result of its call."""

    def save(self, state: RunState, *, version: int) -> None:
        """Store, then crash when this is the cashier's last checkpoint."""
        self.inner.save(state, version=version)
        if state.state is State.DONE and state.output == "charged 1, 2 and 3":
            raise SimulatedCrash("after the cashier ended")


def test_abandon_gives_a_call_the_answer_its_child_had_given(tmp_path: Path) -> None:
    """A crash right after the grandchild ended with its answer: abandoning the top run gives
    the child's call of the grandchild that answer (not "outcome unknown"), and leaves the
    grandchild's finished run as it was."""
    path = tmp_path / "runs.db"
    store = SQLiteCheckpointer(path)
    world = Charges(_CrashWhenTheCashierEnds(store, 0))
    with pytest.raises(SimulatedCrash):
        world.manager.run_sync("Take the payment.")
    ended = store.load(_descendants(store)[2].run_id)
    result = asyncio.run(
        Agent(ScriptedModel([]), checkpointer=store, runtime=Runtime()).abandon(PARENT_ID)
    )
    assert result.state is State.ABORTED
    _, clerk, cashier = _descendants(store)
    (billed,) = _results(clerk).values()
    assert billed.content == "charged 1, 2 and 3" and not billed.is_error
    assert (clerk.state, clerk.stop_reason) == (State.ABORTED, StopReason.CANCELLED)
    assert store.load(cashier.run_id) == ended and cashier.state is State.DONE
    assert world.made == [1, 2, 3]
    store.close()
