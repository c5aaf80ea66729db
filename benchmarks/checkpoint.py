"""Checkpointing overhead per step: a run with a SQLite checkpointer against the same run with
none, as a ratio (and the microseconds each costs).

A run makes ``--steps`` tool-calling steps on a model that answers instantly, so the time
measured is the kernel's plus the checkpointer's. A step is three moves (compacting → calling →
dispatching → compacting), so with ``durability="sync"`` it writes three checkpoint rows and
four journal records (model call intent and result, tool call intent and result) in SQLite's
WAL mode (``synchronous=NORMAL``: durable against a crash of the process; ``--fsync`` makes
every commit survive an OS crash too); the run waits for five of them (the model call's two
records are not awaited), and the writes queued together are committed together. ``async``
waits for the tool's intent only; ``exit`` writes once.

Reported: microseconds per step (best of ``--rounds``) per setting, and the ratio to no
checkpointer.

    python benchmarks/checkpoint.py [--steps 300] [--rounds 3] [--fsync]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fsm_agent import Agent, ModelRequest, ModelResponse, Policy, tool
from fsm_agent.persistence import SQLiteCheckpointer
from fsm_agent.testing import text, tool_call


@tool
def look(n: int) -> str:
    """Look something up."""
    return f"result {n}: " + "lorem ipsum " * 8


class Looping:
    """Calls ``look`` ``steps`` times, then answers."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.calls = 0

    @property
    def name(self) -> str:
        return "looping"

    @property
    def context_window(self) -> int | None:
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls > self.steps:
            return text("done")  # type: ignore[return-value]
        return tool_call("look", {"n": self.calls}, id=f"c{self.calls}")  # type: ignore[return-value]


def _per_step(steps: int, mode: str | None, directory: Path, fsync: bool) -> float:
    store = None
    if mode is not None:
        store = SQLiteCheckpointer(directory / f"{mode}-{time.perf_counter_ns()}.db", fsync=fsync)
    agent: Agent[None] = Agent(
        Looping(steps),
        tools=[look],
        policy=Policy(max_steps=steps + 5),
        checkpointer=store,
        durability=mode or "sync",
    )
    started = time.perf_counter()
    result = asyncio.run(agent.run("go"))
    elapsed = time.perf_counter() - started
    assert result.ok, result.stop_reason
    if store is not None:
        store.close()
    return elapsed / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fsync", action="store_true", help="synchronous=FULL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        best: dict[str, float] = {}
        for name in ("none", "sync", "async", "exit"):
            mode = None if name == "none" else name
            best[name] = min(
                _per_step(args.steps, mode, directory, args.fsync) for _ in range(args.rounds)
            )
    base = best["none"]
    print(f"{args.steps} steps, best of {args.rounds}, fsync={'on' if args.fsync else 'off'}")
    for name, micros in best.items():
        print(f"  {name:<6} {micros:9.1f} µs/step   {micros / base:5.2f}× no checkpointer")


if __name__ == "__main__":
    main()
