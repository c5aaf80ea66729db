"""A finished run's objects are freed as soon as nothing refers to them, without waiting for
the garbage collector's cycle search: with many runs in a process, garbage left to that search
makes its collections longer, and the event loop waits for each of them. For the same reason a
run in flight holds few objects the collector tracks."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

from fsm_agent import Agent, ModelRequest, ModelResponse, RunHandle, tool
from fsm_agent.persistence import Checkpointer, SQLiteCheckpointer
from fsm_agent.testing import text, tool_call


@tool
def look(n: int) -> str:
    """Look something up."""
    return f"result {n}"


class Once:
    """Calls ``look`` once, then answers (it keeps no state, so one serves every run)."""

    name = "once"
    context_window = None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if any(m.tool_results for m in request.messages):
            return text("done")  # type: ignore[return-value]
        return tool_call("look", {"n": 1})  # type: ignore[return-value]


@pytest.mark.parametrize("durable", [False, True])
def test_a_finished_run_leaves_nothing_to_the_cycle_collector(
    tmp_path: Path, durable: bool
) -> None:
    """Runs that ended (with a handle of the caller's, or none) leave no cyclic garbage."""
    store: Checkpointer | None = SQLiteCheckpointer(tmp_path / "runs.db") if durable else None
    agent: Agent[None] = Agent(Once(), tools=[look], checkpointer=store)

    async def main() -> int:
        assert (await agent.run("warm up")).ok  # imports and caches, made once
        gc.collect()
        gc.disable()
        try:
            for _ in range(3):
                assert (await agent.run("go")).ok
                handle = RunHandle()
                assert (await agent.run("go", handle=handle)).ok
                del handle
            return gc.collect()
        finally:
            gc.enable()

    found = asyncio.run(main())
    if store is not None:
        store.close()
    assert found == 0


class _Gate:
    """Where the held runs' tool waits until it is opened."""

    def __init__(self) -> None:
        self.arrived = 0
        self.opened = asyncio.Event()


_GATES: list[_Gate] = []


@tool(name="look", timeout_s=30.0)
async def look_held(n: int) -> str:
    """Look something up, once the test lets the run go on."""
    gate = _GATES[0]
    gate.arrived += 1
    await gate.opened.wait()
    return f"result {n}"


@pytest.mark.parametrize(("durable", "most"), [(False, 31), (True, 38)])
def test_a_run_in_flight_holds_few_objects_for_the_collector(
    tmp_path: Path, durable: bool, most: int
) -> None:
    """A run held inside its tool call holds at most ``most`` objects the garbage collector
    tracks (its coroutines, context, run state, messages, turn, the tool's time limit and, on
    SQLite, its log of writes; no handle when the caller passed none, no tool context when
    the tool takes none): every collection walks them for every run in flight
    (``benchmarks/durable_lag.py --objects`` measures it at 1,000 runs)."""
    store: Checkpointer | None = SQLiteCheckpointer(tmp_path / "runs.db") if durable else None
    agent: Agent[None] = Agent(Once(), tools=[look_held], checkpointer=store)
    runs = 50

    async def main() -> float:
        _GATES[:] = [_Gate()]
        _GATES[0].opened.set()
        assert (await agent.run("warm up")).ok  # imports and caches, made once
        gate = _GATES[0] = _Gate()
        gc.collect()
        before = len(gc.get_objects())
        tasks = [asyncio.create_task(agent.run("go")) for _ in range(runs)]
        while gate.arrived < runs:  # noqa: ASYNC110 (the tool counts the runs it holds)
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)  # the writes made before the tool call settle
        gc.collect()
        held = (len(gc.get_objects()) - before) / runs
        gate.opened.set()
        assert all(r.ok for r in await asyncio.gather(*tasks))
        return held

    held = asyncio.run(main())
    if store is not None:
        store.close()
    assert held <= most, held
