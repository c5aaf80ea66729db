"""Fuzzing: hypothesis generates runs, the real kernel plays them, DESIGN §8 judges each one.

A generated :class:`FuzzCase` is a model script (text, tool calls with malformed arguments,
unknown tools and repeated ids, every finish reason, retryable and fatal errors with
Retry-After, streamed in fragments or not) plus, for the built-in agent, a policy, verifier
answers, hook behaviours, a stop condition, human decisions and a cancel or pause point. The
built-in agent's tools cover every tool behaviour: ok, raise, hang (a 1 ms timeout), slow
(virtual time), huge output, done, ask a human, needs approval, cancel from inside.

:func:`fuzz` runs cases on the real kernel with a virtual clock (retry backoff takes no time),
resumes suspended runs, and checks every invariant of DESIGN §8 after every run (invariant 2
against :func:`fsm_agent.bounds.bounds`). A run that does not end by itself is stopped and
reported. On a violation hypothesis shrinks the case, and the report carries it as a
ready-to-paste pytest test. To fuzz your own agent, pass a factory ``make_agent(model) ->
Agent`` (your tools, hooks, verifier, policy); the fuzzer gives it the scripted model and
replaces the agent's runtime with its virtual clock.

This module needs hypothesis (``pip install 'fsm_agent[testing]'``); ``import fsm_agent``
does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

try:
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.strategies import SearchStrategy
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "fsm_agent.fuzzing needs hypothesis; install it with: pip install 'fsm_agent[testing]'"
    ) from exc

from ._fuzz_case import (
    DEFAULT_TOOLS,
    RUNAWAY_MOVES,
    AgentFactory,
    FuzzCase,
    FuzzDeps,
    FuzzModel,
    HookPlan,
    StreamingFuzzModel,
    run_case,
    turn_source,
)
from ._fuzz_invariants import (
    ABORT_REASONS,
    DONE_REASONS,
    INVARIANTS,
    InvariantViolation,
    RunRecord,
    check_history,
    check_invariants,
)
from ._fuzz_strategies import (
    Choices,
    cases,
    hook_plans,
    policies,
    read_case,
    read_hook_plan,
    read_policy,
    read_script,
    scripts,
    verifiers,
)

__all__ = [
    "ABORT_REASONS",
    "DEFAULT_TOOLS",
    "DONE_REASONS",
    "INVARIANTS",
    "PROFILES",
    "RUNAWAY_MOVES",
    "AgentFactory",
    "Choices",
    "FuzzCase",
    "FuzzDeps",
    "FuzzFailure",
    "FuzzModel",
    "FuzzProfile",
    "FuzzProgress",
    "FuzzReport",
    "HookPlan",
    "InvariantViolation",
    "RunRecord",
    "StreamingFuzzModel",
    "cases",
    "check_case",
    "check_history",
    "check_invariants",
    "fuzz",
    "hook_plans",
    "policies",
    "read_case",
    "read_hook_plan",
    "read_policy",
    "read_script",
    "regression_test",
    "run_case",
    "scripts",
    "turn_source",
    "verifiers",
]

BATCH = 250
"""Examples per hypothesis run; progress is reported and the time limit checked between."""


@dataclass(frozen=True, slots=True)
class FuzzProfile:
    """A named fuzzing effort for ``fsm-agent fuzz --profile``."""

    examples: int
    seed: int | None = None  # None: a fresh random seed per session
    max_seconds: float | None = None


PROFILES: dict[str, FuzzProfile] = {
    "dev": FuzzProfile(examples=300),
    "ci": FuzzProfile(examples=3_000, seed=0),  # derandomized: the same cases on every push
    "fuzz": FuzzProfile(examples=1_000_000, max_seconds=600),
}
"""The built-in profiles: ``dev`` (quick), ``ci`` (thorough, fixed seed), ``fuzz`` (long)."""


@dataclass(frozen=True, slots=True)
class FuzzFailure:
    """A violation: the shrunk case, what broke, and a pytest test that reproduces it."""

    case: FuzzCase
    error: str
    invariant: int | None  # None: the run raised instead of ending
    test_source: str


@dataclass(frozen=True, slots=True)
class FuzzProgress:
    """Where a fuzzing session is, as reported after every batch."""

    examples: int
    distinct_paths: int
    invariants_checked: int
    elapsed_s: float
    slowest_s: float


@dataclass(frozen=True, slots=True)
class FuzzReport:
    """What a fuzzing session did and found."""

    examples: int
    distinct_paths: int  # different move sequences (rows fired, in order) seen
    invariants_checked: int  # invariant checks that passed, over every run
    elapsed_s: float
    seed: int
    slowest_s: float
    slowest_case: FuzzCase | None
    failure: FuzzFailure | None

    @property
    def ok(self) -> bool:
        """No violation was found."""
        return self.failure is None

    @property
    def examples_per_s(self) -> float:
        """Throughput of the session."""
        return self.examples / self.elapsed_s if self.elapsed_s else 0.0

    def format(self) -> str:
        """The summary as text; on a violation, the error and the reproducing test."""
        verdict = "OK" if self.failure is None else "VIOLATION"
        lines = [
            f"fuzz: {verdict} (seed {self.seed})",
            f"  examples run:         {self.examples:,} in {self.elapsed_s:.1f} s "
            f"({self.examples_per_s:,.0f}/s)",
            f"  distinct paths:       {self.distinct_paths:,}",
            f"  invariants checked:   {self.invariants_checked:,}",
            f"  slowest example:      {self.slowest_s * 1000:.1f} ms",
        ]
        if self.failure is not None:
            lines += [
                f"  FAILED: {self.failure.error}",
                "  shrunk counterexample, as a pytest test:",
                "",
                self.failure.test_source,
            ]
        return "\n".join(lines)


@dataclass
class _Stats:
    examples: int = 0
    invariants: int = 0
    paths: set[int] = field(default_factory=set)
    slowest_s: float = 0.0
    slowest_case: FuzzCase | None = None
    last_failed: FuzzCase | None = None


def check_case(case: FuzzCase, make_agent: AgentFactory | None = None) -> RunRecord:
    """Run ``case`` (on the built-in agent, or ``make_agent``'s) and check every invariant;
    raises :class:`InvariantViolation` at the first broken one."""
    record = run_case(case, make_agent)
    check_invariants(record)
    return record


def fuzz(
    make_agent: AgentFactory | None = None,
    *,
    examples: int = 1_000,
    seed: int | None = None,
    max_seconds: float | None = None,
    target: str | None = None,
    progress: Callable[[FuzzProgress], None] | None = None,
) -> FuzzReport:
    """Run up to ``examples`` generated cases (fewer if ``max_seconds`` runs out first) and
    stop at the first violation, shrunk. ``target`` (``"module:factory"``) names
    ``make_agent`` in the reproducing test; by default it is taken from the factory."""
    started = time.perf_counter()
    base = seed if seed is not None else random.randrange(2**32)
    definitions = None
    if make_agent is not None:
        probe = make_agent(FuzzModel(()))
        definitions = probe.tool_definitions
    strategy = cases(definitions)
    stats = _Stats()
    failure: FuzzFailure | None = None
    end = None if max_seconds is None else started + max_seconds
    # A plain loop, not asyncio.Runner: in 3.11 its SIGINT check formats the repr of every
    # run's result (milliseconds per example).
    with contextlib.closing(asyncio.new_event_loop()) as loop:
        batch = 0
        while stats.examples < examples and (end is None or time.perf_counter() < end):
            count = min(BATCH, examples - stats.examples)
            test = _batch(strategy, make_agent, loop, stats, count, end)
            try:
                hypothesis_seed(base + batch)(test)()
            except Exception as exc:  # the shrunk example's error
                if stats.last_failed is None:
                    raise  # not a run's failure: a bug in the fuzzer or the factory
                failure = _failure(stats.last_failed, exc, make_agent, target)
                break
            batch += 1
            if progress is not None:
                progress(
                    FuzzProgress(
                        stats.examples,
                        len(stats.paths),
                        stats.invariants,
                        time.perf_counter() - started,
                        stats.slowest_s,
                    )
                )
    return FuzzReport(
        examples=stats.examples,
        distinct_paths=len(stats.paths),
        invariants_checked=stats.invariants,
        elapsed_s=time.perf_counter() - started,
        seed=base,
        slowest_s=stats.slowest_s,
        slowest_case=stats.slowest_case,
        failure=failure,
    )


def _batch(
    strategy: SearchStrategy[FuzzCase],
    make_agent: AgentFactory | None,
    loop: asyncio.AbstractEventLoop,
    stats: _Stats,
    count: int,
    end: float | None,
) -> Callable[[], None]:
    """One hypothesis run of ``count`` examples that records into ``stats``."""

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        derandomize=False,
        print_blob=False,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def test(case: FuzzCase) -> None:
        if end is not None and time.perf_counter() >= end and stats.last_failed is None:
            return  # time is up: let the batch run out without work
        began = time.perf_counter()
        try:
            record = run_case(case, make_agent, loop=loop)
            checked = check_invariants(record)
        except Exception:
            stats.last_failed = case
            raise
        took = time.perf_counter() - began
        stats.examples += 1
        stats.invariants += checked
        stats.paths.add(hash(tuple(m.row for m in record.result.trace)))
        if took > stats.slowest_s:
            stats.slowest_s, stats.slowest_case = took, case

    return test


def _failure(
    case: FuzzCase, exc: Exception, make_agent: AgentFactory | None, target: str | None
) -> FuzzFailure:
    if isinstance(exc, InvariantViolation):
        error, number = str(exc), exc.number
    else:
        error, number = f"the run raised {type(exc).__name__}: {exc}", None
    if make_agent is not None and target is None:
        module = getattr(make_agent, "__module__", None)
        name = getattr(make_agent, "__qualname__", "")
        if module and name and "<" not in name:
            target = f"{module}:{name}"
    return FuzzFailure(case, error, number, regression_test(case, error, target, number))


_IMPORTS = {
    "fsm_agent": (
        "AuthenticationError",
        "CompactionSettings",
        "ContextWindowExceededError",
        "MalformedResponseError",
        "ModelTimeoutError",
        "Policy",
        "ProviderServerError",
        "RateLimitError",
        "RetryPolicy",
        "Usage",
        "UsageLimits",
    ),
    "fsm_agent.fuzzing": ("FuzzCase", "HookPlan", "check_case"),
    "fsm_agent.policy": ("ToolOutputSettings",),
    "fsm_agent.testing": ("fail", "finish", "text", "tool_calls"),
}


def regression_test(
    case: FuzzCase, error: str, target: str | None = None, invariant: int | None = None
) -> str:
    """A pytest test that runs ``case`` and fails while the bug is there. ``target``
    (``"module:factory"``) is the agent factory; ``None``: the built-in agent."""
    body = case.source("    ")
    factory = ""
    lines: list[str] = []
    used = set(re.findall(r"\b([A-Za-z_]\w*)\(", body)) | {"check_case"}
    for module, names in _IMPORTS.items():
        wanted = sorted(n for n in names if n in used)
        if wanted:
            lines.append(f"from {module} import {', '.join(wanted)}")
    if target is not None:
        module, _, name = target.partition(":")
        lines.append(f"from {module} import {name.split('.')[0]}")
        factory = f", {name}"
    what = (
        f"this run breaks invariant {invariant} ({INVARIANTS[invariant]})"
        if invariant
        else "this run crashes the kernel"
    )
    comment = "\n".join(f"    # {line}" for line in error.splitlines()[:6])
    return "\n".join(
        [
            *lines,
            "",
            "",
            "def test_fuzz_counterexample() -> None:",
            f'    """Found by fsm-agent fuzz: {what}."""',
            comment,
            f"    case = {body.strip()}",
            f"    check_case(case{factory})",
            "",
        ]
    )
