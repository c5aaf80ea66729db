"""The benchmark instrument still works: the workload plays on fsm_agent and on both floors.

Nothing here is timed; peers are not needed (they are installed only for benchmarking).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from workload import ANSWER, FloorAdapter, FsmAgentAdapter, PlainFloorAdapter, add_calls


def test_workload_runs_on_fsm_agent_and_the_floor() -> None:
    """At N = 2 every adapter calls ``add`` once, then answers."""
    for adapter in (FsmAgentAdapter(), FloorAdapter(), PlainFloorAdapter()):
        add_calls.value = 0
        assert asyncio.run(adapter.prepare(2)()) == ANSWER, adapter.name
        assert add_calls.value == 1, adapter.name
