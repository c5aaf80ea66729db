"""A finished run's objects are freed as soon as nothing refers to them, without waiting for
the garbage collector's cycle search: with many runs in a process, garbage left to that search
makes its collections longer, and the event loop waits for each of them."""

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
