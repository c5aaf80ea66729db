"""The fuzzer's engine: seeded bytes, the shrinker, one report per seed, ``--jobs``, and no
hypothesis at run time."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fsm_agent.cli import main
from fsm_agent.fuzzing import InvariantViolation, check_case, fuzz
from fsm_agent.fuzzing.engine import Engine, example_bytes
from fsm_agent.fuzzing.shrink import shrink
from seeded_bugs import unlimited_retry_agent


def test_the_same_seed_and_index_give_the_same_bytes() -> None:
    """Example ``index`` of a seed is one byte string, 64 to 256 bytes long."""
    assert example_bytes(7, 3) == example_bytes(7, 3) != example_bytes(7, 4)
    assert all(64 <= len(example_bytes(0, i)) <= 256 for i in range(50))


def test_shrink_finds_the_smallest_failing_bytes() -> None:
    """Truncation, deletion and lowering reach the one minimal failing string."""
    planted = bytes([200, 17, 99, 250, 3, 3, 3, 180, 44])

    def fails(data: bytes) -> bool:
        return len(data) >= 3 and data[2] >= 10

    assert shrink(planted, fails) == bytes([0, 0, 10])


def test_shrink_stops_at_its_budget() -> None:
    """At most ``max_attempts`` candidates are tried; the best so far is returned."""
    tried: list[bytes] = []

    def fails(data: bytes) -> bool:
        tried.append(data)
        return bool(data)

    best = shrink(bytes(range(1, 200)), fails, max_attempts=5)
    assert len(tried) == 5
    assert fails(best)


def test_engine_shrinks_a_planted_failure_keeping_its_invariant() -> None:
    """A failing example with junk around it shrinks to bytes where deleting or lowering any
    byte no longer breaks the same invariant."""
    engine = Engine(unlimited_retry_agent, seed=0)
    try:
        found = engine.run(range(100)).found
        assert found is not None and found.invariant in (2, 9)
        shrunk = engine.shrink(found)
        assert shrunk.invariant == found.invariant
        assert len(shrunk.data) < len(found.data)
        assert len(shrunk.case.script) == 1

        def same(data: bytes) -> bool:
            try:
                check_case(engine.case(data), unlimited_retry_agent)
            except InvariantViolation as exc:
                return exc.number == found.invariant
            return False

        data = shrunk.data
        assert same(data)
        for i in range(len(data)):
            assert not same(data[:i] + data[i + 1 :])
            if data[i]:
                assert not same(data[:i] + b"\0" + data[i + 1 :])
    finally:
        engine.close()


def test_the_same_seed_gives_the_same_report() -> None:
    """Examples, paths, checks and the shrunk counterexample depend on the seed only."""
    clean = [fuzz(examples=150, seed=11) for _ in range(2)]
    assert [(r.examples, r.distinct_paths, r.invariants_checked) for r in clean] == [
        (150, clean[0].distinct_paths, clean[0].invariants_checked)
    ] * 2
    failing = [fuzz(unlimited_retry_agent, examples=300, seed=5) for _ in range(2)]
    assert failing[0].failure is not None and failing[1].failure is not None
    assert failing[0].examples == failing[1].examples
    assert failing[0].failure.test_source == failing[1].failure.test_source


def test_cli_jobs_splits_the_examples_and_reports_the_first_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--jobs 2` runs the same examples in two processes: the same shrunk counterexample as
    one process, exit code 1; a clean run adds up both processes' examples, exit code 0."""
    target = "seeded_bugs:unlimited_retry_agent"
    assert main(["fuzz", target, "--seed", "0"]) == 1
    alone = capsys.readouterr().out
    assert main(["fuzz", target, "--seed", "0", "--jobs", "2"]) == 1
    split = capsys.readouterr().out
    test = "def test_fuzz_counterexample"
    assert split[split.index(test) :] == alone[alone.index(test) :]
    assert main(["fuzz", "--examples", "120", "--seed", "3", "--jobs", "2"]) == 0
    assert "examples run:         120 in" in capsys.readouterr().out


def test_fuzz_runs_without_importing_hypothesis() -> None:
    """`fsm-agent fuzz` needs no testing extra: the engine never imports hypothesis."""
    code = (
        "import sys; from fsm_agent.fuzzing import fuzz; "
        "assert fuzz(examples=20, seed=0).ok; print('hypothesis' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_violation_counts_the_example_that_found_it() -> None:
    """A session stopped by a violation at its first example reports one example run, not
    zero: the failing example ran too."""
    from seeded_bugs import always_rejecting_verifier_agent

    report = fuzz(always_rejecting_verifier_agent, examples=300, seed=0)
    assert report.failure is not None
    assert report.examples >= 1
    assert f"examples run:         {report.examples:,} in" in report.format()
    assert "examples run:         0 in" not in report.format()
