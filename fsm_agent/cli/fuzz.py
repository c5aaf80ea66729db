"""``fsm-agent fuzz``: the command line of :mod:`fsm_agent.fuzzing`.

Neither this module nor the fuzzer imports hypothesis (the ``[testing]`` extra, needed only by
the strategies for your own property tests): ``fsm-agent fuzz`` works without it.

Exit codes: 0 no violation; 1 a violation (the shrunk case is printed as a pytest test), or no
example finished within ``--max-seconds``; 2 a usage error (a bad target, an unknown profile, a
factory that does not build an agent).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from ..fuzzing.targets import load_factory
from .args import UsageError, finite_positive_float, load_phases, positive_int

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..fuzzing import FuzzProfile, FuzzProgress

__all__ = ["add_fuzz_arguments", "load_factory", "run_fuzz_command"]

PROFILE_NAMES = ("dev", "ci", "fuzz")
ATTACK_NAMES = (
    "deadline",
    "cancel",
    "timeout",
    "listener",
    "hooks",
    "gates",
    "verifier",
    "stop",
    "store",
)


def add_fuzz_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``fsm-agent fuzz`` to ``parser``."""
    parser.add_argument(
        "target",
        nargs="?",
        metavar="TARGET",
        help="your agent factory as module:function, called with a model, returning an Agent "
        "(default: the built-in agent with generated policies, hooks and verifiers)",
    )
    parser.add_argument(
        "--examples", metavar="N", type=positive_int, help="examples to run (default: profile's)"
    )
    parser.add_argument("--seed", metavar="N", type=int, help="random seed (default: profile's)")
    parser.add_argument(
        "--profile",
        choices=PROFILE_NAMES,
        default="dev",
        help="dev: 300 examples; ci: 3,000 with seed 0; fuzz: up to 10 minutes (default: dev)",
    )
    parser.add_argument(
        "--max-seconds",
        metavar="S",
        type=finite_positive_float,
        help="a time budget: at S seconds the example in progress is cut and reported as cut; "
        "without --examples the session runs until then (default: profile's)",
    )
    parser.add_argument(
        "--mode",
        choices=("runs", "seams"),
        default="runs",
        help="runs: model scripts, limits and hooks on a virtual clock; seams: the real clock, "
        "outside cancels and timeouts, stalled listeners, user code that raises, hangs or "
        "returns garbage, failing stores (default: runs)",
    )
    parser.add_argument(
        "--attack",
        action="append",
        choices=ATTACK_NAMES,
        metavar="NAME",
        help=f"with --mode seams, draw only these attack families (repeat the option; "
        f"default: all of {', '.join(ATTACK_NAMES)})",
    )
    parser.add_argument(
        "--phases",
        metavar="MODULE:ATTR",
        help="fuzz a phase table (a fsm_agent.Phases) instead: models that try illegal moves "
        "and out-of-phase tools against stubs of its tools (invariants P1-P4)",
    )
    parser.add_argument(
        "--jobs",
        metavar="N",
        type=positive_int,
        default=1,
        help="run in N processes, the examples split between them (default: 1)",
    )


def _fuzz_phases(args: argparse.Namespace, default_seed: int) -> int:
    """``--phases``: the phase fuzzer on the table; 1 when an invariant is broken."""
    from ..fuzzing.phases import fuzz_phases

    phases = load_phases(args.phases)
    seed = args.seed if args.seed is not None else default_seed
    report = fuzz_phases(args.examples or 300, seed=seed, phases=phases)
    print(
        f"phases: {report.cases:,} cases, {report.moves:,} phase moves, {report.refused:,} "
        f"calls refused, {len(report.violations)} violation(s)"
    )
    for case_seed, invariant, detail in report.violations[:20]:
        print(f"  seed {case_seed}: {invariant} {detail}")
    return 1 if report.violations else 0


def session_examples(examples: int | None, max_seconds: float | None, profile: FuzzProfile) -> int:
    """How many examples a session may run: ``--examples`` when given; with ``--max-seconds``
    alone, as many as the time allows (the long profile's count); else the profile's."""
    from ..fuzzing import PROFILES

    if examples is not None:
        return examples
    if max_seconds is not None:
        return max(profile.examples, PROFILES["fuzz"].examples)
    return profile.examples


def run_fuzz_command(args: argparse.Namespace) -> int:
    """Run ``fsm-agent fuzz``: progress on stderr while it runs, the summary on stdout."""
    from .. import fuzzing
    from ..fuzzing.jobs import fuzz_in_processes
    from ..kernel.driver import CHECK_ENV

    # The kernel asserts every handler outcome against its state's declaration while fuzzed
    # (worker processes inherit the setting).
    os.environ.setdefault(CHECK_ENV, "1")
    profile = fuzzing.PROFILES[args.profile]
    if args.phases is not None:
        return _fuzz_phases(args, profile.seed or 0)
    factory = None
    if args.target is not None:
        try:
            factory = load_factory(args.target)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    progress = _progress_printer()
    examples = session_examples(args.examples, args.max_seconds, profile)
    attacks = tuple(args.attack or ATTACK_NAMES)
    seed = args.seed if args.seed is not None else profile.seed
    max_seconds = args.max_seconds if args.max_seconds is not None else profile.max_seconds
    try:
        if args.jobs > 1:
            report = fuzz_in_processes(
                args.target,
                jobs=args.jobs,
                examples=examples,
                seed=seed,
                max_seconds=max_seconds,
                progress=progress,
                mode=args.mode,
                attacks=attacks,
            )
        else:
            report = fuzzing.fuzz(
                factory,
                examples=examples,
                seed=seed,
                max_seconds=max_seconds,
                target=args.target,
                progress=progress,
                mode=args.mode,
                attacks=attacks,
            )
    except Exception as exc:  # the factory could not build an agent, or a process failed
        raise UsageError(f"cannot fuzz the target: {type(exc).__name__}: {exc}") from None
    print(report.format())
    return 0 if report.ok else 1


def _progress_printer() -> Callable[[FuzzProgress], None]:
    """A progress callback that prints the session's counts on stderr, at most once a
    second."""
    last = [0.0]

    def progress(p: FuzzProgress) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0:
            last[0] = now
            rate = p.examples / p.elapsed_s if p.elapsed_s else 0.0
            print(
                f"fuzz: {p.examples:,} examples ({rate:,.0f}/s), {p.distinct_paths:,} paths, "
                f"{p.invariants_checked:,} invariants checked, slowest "
                f"{p.slowest_s * 1000:.1f} ms",
                file=sys.stderr,
                flush=True,
            )

    return progress
