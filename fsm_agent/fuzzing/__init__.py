"""Fuzzing: seeded bytes decode into runs, the real kernel plays them, the invariants judge each.

A generated :class:`FuzzCase` is a model script (text, tool calls with malformed arguments,
unknown tools and repeated ids, every finish reason, retryable and fatal errors with
Retry-After, streamed in fragments or not) plus, for the built-in agent, a policy, verifier
answers, hook behaviours, a stop condition, human decisions and a cancel or pause point, and
maybe a fallback chain whose primary fails or an output type (some plain answers then valid
JSON of it, the rest failing validation). The built-in agent's tools cover every tool
behaviour: ok, raise, hang (a 1 ms timeout), slow (virtual time), huge output, done, ask a
human, needs approval, cancel from inside, and an MCP-style tool that errs or goes quiet. An
agent of yours with an output type gets answers that follow its schema.

:func:`fuzz` runs cases on the real kernel with a virtual clock (retry backoff takes no time),
resumes suspended runs, and checks every run invariant after every run (invariant 2
against :func:`fsm_agent.analysis.bounds.bounds`). A run that does not end by itself is stopped and
reported. Cases are decoded from seeded random bytes (the same seed, the same examples); on a
violation the bytes are shrunk (:mod:`.shrink`), and the report carries the shrunk case
as a ready-to-paste pytest test. To fuzz your own agent, pass a factory ``make_agent(model) ->
Agent`` (your tools, hooks, verifier, policy); the fuzzer gives it the scripted model and
replaces the runtime of the agent, and of every agent it uses as a tool, with its virtual
clock.

:func:`fuzz` does not need hypothesis. The hypothesis strategies for your own property tests
(``cases``, ``scripts``, ``policies``, ``hook_plans``, ``verifiers``) decode cases the same way;
they are in :mod:`fsm_agent.testing`, beside ``fuzz_agent``.

Read in order: :mod:`.decoding` (bytes to cases), :mod:`.case` (a case, the built-in agent,
running one), :mod:`.source` (a case printed as Python), :mod:`.invariants` (what every run
must keep), :mod:`.engine` (the search), :mod:`.oracle` (every move checked against a machine
built from the table, not against ``decide()``), :mod:`.seams` and :mod:`.seam_checks` (the
seams mode and its invariants), :mod:`.primary` (a primary model that always fails, for
fallback chains), :mod:`.shrink` (smaller failing cases), :mod:`.jobs` (several processes)
and :mod:`.phases` (a phase table attacked with illegal moves and out-of-phase tools).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .case import (
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
from .decoding import Choices, read_case, read_hook_plan, read_policy, read_script
from .engine import Engine, Found, ModeName, Session, check_limits
from .invariants import (
    ABORT_REASONS,
    DONE_REASONS,
    INVARIANTS,
    InvariantViolation,
    RunRecord,
    check_history,
    check_invariants,
)
from .seam_checks import SEAM_INVARIANTS, RunCrashed, SeamViolation, check_seam_record
from .seams import (
    ALL_ATTACKS,
    Attack,
    FailingStore,
    SeamCase,
    SeamRecord,
    read_seam_case,
    run_seam_case,
)

__all__ = [
    "ABORT_REASONS",
    "ALL_ATTACKS",
    "DEFAULT_TOOLS",
    "DONE_REASONS",
    "INVARIANTS",
    "PROFILES",
    "RUNAWAY_MOVES",
    "SEAM_INVARIANTS",
    "AgentFactory",
    "Attack",
    "Choices",
    "FailingStore",
    "FuzzCase",
    "FuzzDeps",
    "FuzzFailure",
    "FuzzModel",
    "FuzzProfile",
    "FuzzProgress",
    "FuzzReport",
    "HookPlan",
    "InvariantViolation",
    "ModeName",
    "RunCrashed",
    "RunRecord",
    "SeamCase",
    "SeamRecord",
    "SeamViolation",
    "StreamingFuzzModel",
    "check_case",
    "check_history",
    "check_invariants",
    "check_seam_case",
    "check_seam_record",
    "fuzz",
    "read_case",
    "read_hook_plan",
    "read_policy",
    "read_script",
    "read_seam_case",
    "regression_test",
    "run_case",
    "run_seam_case",
    "turn_source",
]


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

    case: FuzzCase | SeamCase
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
    slowest_case: FuzzCase | SeamCase | None
    failure: FuzzFailure | None
    cut: int = 0  # examples the time limit stopped before their end: neither passed nor failed

    @property
    def ok(self) -> bool:
        """No violation was found, in at least one example that ran to its end."""
        return self.failure is None and self.examples > 0

    @property
    def examples_per_s(self) -> float:
        """Throughput of the session."""
        return self.examples / self.elapsed_s if self.elapsed_s else 0.0

    def format(self) -> str:
        """The summary as text; on a violation, the error and the reproducing test."""
        verdict = "VIOLATION" if self.failure is not None else "OK" if self.ok else "NO RESULT"
        lines = [
            f"fuzz: {verdict} (seed {self.seed})",
            f"  examples run:         {self.examples:,} in {self.elapsed_s:.1f} s "
            f"({self.examples_per_s:,.0f}/s)",
        ]
        if self.cut:
            lines.append(
                f"  cut by the time limit: {self.cut:,} example(s) in progress (neither passed "
                "nor failed)"
            )
        if not self.examples and self.failure is None:
            lines.append("  no example finished within the time limit: give it more seconds")
        lines += [
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


def check_case(case: FuzzCase, make_agent: AgentFactory | None = None) -> RunRecord:
    """Run ``case`` (on the built-in agent, or ``make_agent``'s) and check every invariant;
    raises :class:`InvariantViolation` at the first broken one."""
    record = run_case(case, make_agent)
    check_invariants(record)
    return record


def check_seam_case(case: SeamCase, make_agent: AgentFactory | None = None) -> SeamRecord:
    """Play the seam case ``case`` (on the built-in agent, or ``make_agent``'s) and check every
    seam invariant; raises :class:`SeamViolation` at the first broken one. It runs on the real
    clock: a case found by the fuzzer may need a few runs to fail again."""
    record = run_seam_case(case, make_agent)
    check_seam_record(record)
    return record


def fuzz(
    make_agent: AgentFactory | None = None,
    *,
    examples: int = 1_000,
    seed: int | None = None,
    max_seconds: float | None = None,
    target: str | None = None,
    progress: Callable[[FuzzProgress], None] | None = None,
    mode: ModeName = "runs",
    attacks: Iterable[Attack | str] = ALL_ATTACKS,
) -> FuzzReport:
    """Run up to ``examples`` generated cases, fewer if ``max_seconds`` runs out first, and
    stop at the first violation, shrunk. ``max_seconds`` is a budget for the whole session:
    the example in progress when it ends is cut (counted in :attr:`FuzzReport.cut`, neither a
    pass nor a violation), and shrinking stops there too. ``target`` (``"module:factory"``) names
    ``make_agent`` in the reproducing test; by default it is taken from the factory.

    ``mode="seams"`` attacks the seams instead: each case runs on the real clock with a short
    deadline, a cancel or ``asyncio.timeout`` from outside, a stalling listener, user code that
    raises, hangs or returns garbage, and a store whose writes fail (see
    :mod:`fsm_agent.fuzzing.seams`), and the seam invariants judge each run; ``attacks``
    narrows its cases to some :class:`Attack` families."""
    check_limits(examples, max_seconds)
    started = time.perf_counter()
    base = seed if seed is not None else random.randrange(2**32)
    end = None if max_seconds is None else time.time() + max_seconds

    def report_progress(session: Session) -> None:
        if progress is not None:
            elapsed = time.perf_counter() - started
            paths, invariants = len(session.paths), session.invariants
            progress(FuzzProgress(session.examples, paths, invariants, elapsed, session.slowest_s))

    engine = Engine(make_agent, base, mode, frozenset(Attack(a) for a in attacks))
    try:
        session = engine.run(range(examples), end, report_progress)
        found = None if session.found is None else engine.shrink(session.found, end)
    finally:
        engine.close()
    slowest = None if session.slowest_data is None else engine.case(session.slowest_data)
    return FuzzReport(
        examples=session.examples,
        distinct_paths=len(session.paths),
        invariants_checked=session.invariants,
        elapsed_s=time.perf_counter() - started,
        seed=base,
        slowest_s=session.slowest_s,
        slowest_case=slowest,
        failure=None if found is None else fuzz_failure(found, make_agent, target),
        cut=session.cut,
    )


def fuzz_failure(
    found: Found, make_agent: AgentFactory | None = None, target: str | None = None
) -> FuzzFailure:
    """The report of a (shrunk) failing example, with its reproducing test; ``target`` is taken
    from ``make_agent`` when not given."""
    if make_agent is not None and target is None:
        module = getattr(make_agent, "__module__", None)
        name = getattr(make_agent, "__qualname__", "")
        if module and name and "<" not in name:
            target = f"{module}:{name}"
    test = regression_test(found.case, found.error, target, found.invariant)
    return FuzzFailure(found.case, found.error, found.invariant, test)


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
    "fsm_agent.fuzzing": ("FuzzCase", "HookPlan", "SeamCase", "check_case", "check_seam_case"),
    "fsm_agent.policy": ("ToolOutputSettings",),
    "fsm_agent.testing": ("fail", "finish", "text", "tool_calls"),
}


def regression_test(
    case: FuzzCase | SeamCase, error: str, target: str | None = None, invariant: int | None = None
) -> str:
    """A pytest test that runs ``case`` and fails while the bug is there. ``target``
    (``"module:factory"``) is the agent factory; ``None``: the built-in agent."""
    body = case.source("    ")
    factory = ""
    lines: list[str] = []
    seams = isinstance(case, SeamCase)
    check = "check_seam_case" if seams else "check_case"
    used = set(re.findall(r"\b([A-Za-z_]\w*)\(", body)) | {check}
    for module, names in _IMPORTS.items():
        wanted = sorted(n for n in names if n in used)
        if wanted:
            lines.append(f"from {module} import {', '.join(wanted)}")
    if target is not None:
        module, _, name = target.partition(":")
        lines.append(f"from {module} import {name.split('.')[0]}")
        factory = f", {name}"
    catalogue = SEAM_INVARIANTS if seams else INVARIANTS
    what = (
        f"this run breaks {'seam ' if seams else ''}invariant {invariant} ({catalogue[invariant]})"
        if invariant
        else "this run crashes the kernel"
    )
    if seams:
        what += " (on the real clock: it may take a few runs to fail)"
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
            f"    {check}(case{factory})",
            "",
        ]
    )
