"""Parametric proof time: how long ``prove()`` takes on the built-in table (target ≤ 50 ms),
next to the exhaustive explorer on the default policy and on ``max_steps=2000``.

The proof does not depend on the limits, so one number covers every policy; the explorer's
time grows with them. Reported: the median of ``--repeat`` proofs (the machine already built,
as ``fsm-agent check`` has it), and one exploration of each policy.

    python benchmarks/proof_time.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fsm_agent import Policy
from fsm_agent.analysis.checker import check
from fsm_agent.analysis.proof import prove


def main() -> None:
    """Print the proof's median time and the explorer's, as a ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        proof = prove()
        times.append(time.perf_counter() - started)
        assert proof.terminates
    proof_s = statistics.median(times)
    print(f"parametric proof: median {proof_s * 1000:.2f} ms over {args.repeat} runs")
    for policy in (Policy(), Policy(max_steps=2000)):
        report = check(policy)
        print(
            f"explorer, max_steps={policy.max_steps}: {report.elapsed_s:.2f} s, "
            f"{report.states_explored:,} states = {report.elapsed_s / proof_s:,.0f}× the proof"
        )


if __name__ == "__main__":
    main()
