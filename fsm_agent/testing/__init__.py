"""Test doubles for your tests: a scripted model, its builders, a virtual clock, and
``fuzz_agent``, the fuzzer in one line.

``ScriptedModel`` replays a list of turns, one per model call, and records every request it
receives. Build turns with :func:`text`, :func:`answer`, :func:`tool_call`, :func:`tool_calls`,
:func:`finish` and :func:`fail`::

    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])

The doubles live in :mod:`fsm_agent.scripted`, below this package in the import graph (the
fuzzer and replay build on them, and this package on the fuzzer); this package adds
:func:`fuzz_agent`, which runs the fuzzer, and the crash simulation: :func:`crash_and_resume`
stops a run as a crash would (with :class:`CrashingCheckpointer`, in :mod:`.crash`) and
resumes it, and :func:`resume_differences` compares the result with an uninterrupted run's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from ..errors import MissingExtraError, RunFinishedError
from ..kernel.run import RunResult
from ..messages import ToolResult
from ..persistence import UNKNOWN_OUTCOME_PREFIX, Checkpointer, InMemoryCheckpointer
from ..scripted import (
    DEFAULT_USAGE,
    Failure,
    ScriptedModel,
    ScriptExhaustedError,
    Turn,
    VirtualClock,
    answer,
    fail,
    finish,
    text,
    tool_call,
    tool_calls,
)
from .crash import CrashingCheckpointer, SimulatedCrash

if TYPE_CHECKING:
    from ..fuzzing import FuzzReport
    from ..kernel.agent import Agent
    from ..models import Model

__all__ = [
    "DEFAULT_USAGE",
    "CrashingCheckpointer",
    "Failure",
    "ScriptExhaustedError",
    "ScriptedModel",
    "SimulatedCrash",
    "Turn",
    "VirtualClock",
    "answer",
    "crash_and_resume",
    "fail",
    "finish",
    "fuzz_agent",
    "resume_differences",
    "text",
    "tool_call",
    "tool_calls",
]


def fuzz_agent(
    make_agent: Callable[[Model], Agent[Any, Any]],
    *,
    examples: int | None = None,
    seed: int | None = None,
    max_seconds: float | None = None,
) -> FuzzReport:
    """Fuzz your agent in your own test suite: one line, ``fuzz_agent(make_agent)``.

    ``make_agent(model)`` builds your agent (tools, hooks, verifier, policy) around the model
    it is given. Generated scripts run on the real kernel and every run invariant is
    checked after every run (see :mod:`fsm_agent.fuzzing`). Raises ``AssertionError`` with
    the shrunk case, as a ready-to-paste test, on a violation (or when ``max_seconds`` cut the
    first example: no example finished). ``examples`` defaults to the
    loaded hypothesis profile's ``max_examples``; ``seed`` to 0 when that profile is
    derandomized (as hypothesis's ``ci`` profile is), else random: this helper follows your
    suite's hypothesis profile, so it needs the ``[testing]`` extra.
    """
    try:
        from hypothesis import settings
    except ImportError:
        raise MissingExtraError("fuzz_agent", extra="testing", module="hypothesis") from None

    from ..fuzzing import fuzz

    profile = settings.default
    assert profile is not None, "hypothesis always has a current profile"
    if seed is None and profile.derandomize:
        seed = 0
    report = fuzz(
        make_agent,
        examples=examples if examples is not None else profile.max_examples,
        seed=seed,
        max_seconds=max_seconds,
    )
    if not report.ok:  # a violation, or no example finished within max_seconds
        raise AssertionError(report.format())
    return report


async def crash_and_resume(
    agent: Agent[Any, Any],
    prompt: str,
    *,
    crash_after: int,
    at: Literal["checkpoint", "any"] = "checkpoint",
    store: Checkpointer | None = None,
) -> tuple[RunResult[Any], bool]:
    """Run ``agent`` on ``prompt`` with a fresh store (``store``, default in memory), stop it as
    a crash would right after the store's ``crash_after``-th write, then resume it from its
    latest checkpoint with the same agent, whose model and tools stand for the outside world
    that a crash does not reset. Returns the final result and whether the crash happened (a
    run with fewer writes just ends). A crash before the first checkpoint starts the run again.

    Compare the result with an uninterrupted run's using :func:`resume_differences`. The
    agent's own ``checkpointer`` is replaced for the duration of the call."""
    inner = store if store is not None else InMemoryCheckpointer()
    crashing = CrashingCheckpointer(inner, crash_after, at=at)
    saved = agent.checkpointer
    try:
        agent.checkpointer = crashing
        try:
            return await agent.run(prompt), False
        except SimulatedCrash:
            pass
        agent.checkpointer = inner
        runs = inner.runs()
        if not runs:
            return await agent.run(prompt), True
        run_id = runs[0].run_id
        try:
            return await agent.resume(run_id), True
        except RunFinishedError:
            return RunResult.of(inner.load(run_id).state, None, agent._plan.output_spec), True
    finally:
        agent.checkpointer = saved


def resume_differences(expected: RunResult[Any], actual: RunResult[Any]) -> list[str]:
    """What differs between an uninterrupted run's result and a resumed one's: output, stop
    reason, final state, usage and message thread (invariant 10). A tool result that
    reads "outcome unknown" in ``actual`` (a non-idempotent call a crash cut short) may stand
    in for any result in ``expected``; everything else must be equal."""
    problems: list[str] = []
    for name in ("output", "stop_reason", "state", "usage"):
        want, got = getattr(expected, name), getattr(actual, name)
        if want != got:
            problems.append(f"{name}: expected {want!r}, got {got!r}")
    if len(expected.messages) != len(actual.messages):
        problems.append(f"messages: expected {len(expected.messages)}, got {len(actual.messages)}")
    for index, (want_m, got_m) in enumerate(zip(expected.messages, actual.messages, strict=False)):
        if want_m == got_m:
            continue
        unknown = any(
            isinstance(p, ToolResult) and p.content.startswith(UNKNOWN_OUTCOME_PREFIX)
            for p in got_m.parts
        )
        if unknown and len(want_m.parts) == len(got_m.parts):
            continue
        problems.append(f"message {index} differs: expected {want_m!r}, got {got_m!r}")
        break
    return problems
