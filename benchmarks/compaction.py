"""Per-step cost of the kernel with 100 vs 10,000 messages of history (target: within 1.5×).

A run starts from a history of N messages and makes ``--steps`` tool-calling steps on a model
that answers instantly (a looping script), so the time measured is the kernel's: the budget
check, the model request, dispatching, and compaction. The clock runs from the first model call
to the last: enqueueing the history and the first compaction are paid once per run, not per
step. Two scenarios per N:

- ``tokens``: a context window sized so that the N-message history fills the budget;
- ``messages``: a message window of N (``max_messages``).

Each step checks the budget (O(1)); every so often a compaction shortens the history,
its O(N) cost amortised over the steps before the next one.

Reported: microseconds per step (best of ``--rounds``) for each N, and the ratio 10,000 / 100.

    python benchmarks/compaction.py [--steps 4000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fsm_agent import Agent, CompactionSettings, Message, ModelRequest, ModelResponse, Policy, tool
from fsm_agent.compaction import estimate_tokens
from fsm_agent.testing import text, tool_call


@tool
def look(n: int) -> str:
    """Look something up."""
    return f"result {n}: " + "lorem ipsum " * 8


class LoopModel:
    """Calls ``look`` for ``steps`` turns, then answers; keeps no log of its requests, only
    the times of its first and last call."""

    name = "loop"

    def __init__(self, steps: int, context_window: int | None) -> None:
        self.left = steps
        self.context_window = context_window
        self.call = tool_call("look", {"n": 1}, id="call_1")
        self.answer = text("done")
        self.first = self.last = 0.0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The next turn."""
        self.last = time.perf_counter()
        if not self.first:
            self.first = self.last
        self.left -= 1
        turn = self.call if self.left >= 0 else self.answer
        assert isinstance(turn, ModelResponse)
        return turn


def history(size: int) -> list[Message]:
    """``size`` messages of earlier conversation: user questions and assistant answers."""
    return [
        Message.user(f"question {i}") if i % 2 == 0 else Message.assistant(f"answer {i}")
        for i in range(size)
    ]


def step_cost(size: int, steps: int, scenario: str) -> float:
    """Microseconds per step of one run from a ``size``-message history."""
    past = history(size)
    if scenario == "messages":
        compaction = CompactionSettings(max_messages=size)
        window = None
    else:
        compaction = CompactionSettings()
        window = int(sum(estimate_tokens(m) for m in past) / compaction.threshold)
    policy = Policy(max_steps=steps + 1, max_compaction_attempts=10**6, compaction=compaction)
    model = LoopModel(steps, window)
    agent = Agent(model, tools=[look], system_prompt="Be brief.", policy=policy)

    async def timed() -> bool:
        # Returns a bool, not the RunResult: on exit asyncio.run reprs the main task's
        # result (Python 3.11, restoring the SIGINT handler), which costs O(history).
        return (await agent.run("go", history=past)).ok

    assert asyncio.run(timed())
    return (model.last - model.first) / steps * 1e6


def main() -> None:
    """Run both scenarios and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'scenario':<8} {'100 msgs':>10} {'10,000 msgs':>12} {'ratio':>7}")
    for scenario in ("tokens", "messages"):
        costs = {
            size: min(step_cost(size, args.steps, scenario) for _ in range(args.rounds))
            for size in (100, 10_000)
        }
        ratio = costs[10_000] / costs[100]
        print(f"{scenario:<8} {costs[100]:>8.1f}µs {costs[10_000]:>10.1f}µs {ratio:>6.2f}×")


if __name__ == "__main__":
    main()
