"""Crash simulation: a store that stops a run the way a crash would, right after a chosen write.

:func:`crash_and_resume` runs an agent on a :class:`CrashingCheckpointer` and resumes it from
the inner store; :func:`resume_differences` compares the result with an uninterrupted run's
(invariant 10, resume equivalence). Property tests and the durability tests use the store
directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from ..errors import RunFinishedError
from ..kernel.plan import plan_of
from ..kernel.run import RunResult
from ..persistence import (
    UNKNOWN_OUTCOME_PREFIX,
    Checkpoint,
    Checkpointer,
    EffectRecord,
    InMemoryCheckpointer,
    RunSummary,
)
from ..run.state import RunState
from ..values.messages import ToolResult

if TYPE_CHECKING:
    from ..kernel.agent import Agent

__all__ = ["CrashingCheckpointer", "SimulatedCrash", "crash_and_resume", "resume_differences"]


class SimulatedCrash(BaseException):
    """Raised by :class:`CrashingCheckpointer` to stop a run the way a crash would. A
    ``BaseException``, so that no handler in the kernel or in a tool catches it."""


class CrashingCheckpointer:
    """Wraps a checkpointer and raises :class:`SimulatedCrash` right after its ``crash_after``-th
    write has been stored, as if the process died at that boundary. ``at="checkpoint"`` counts
    the checkpoints only; ``at="any"`` counts effect records (intents and results) too."""

    def __init__(
        self,
        inner: Checkpointer,
        crash_after: int,
        *,
        at: Literal["checkpoint", "any"] = "checkpoint",
    ) -> None:
        self.inner = inner
        self.crash_after = crash_after
        self.at = at
        self.writes = 0
        self.crashed = False

    def _wrote(self) -> None:
        self.writes += 1
        if self.writes == self.crash_after:
            self.crashed = True
            raise SimulatedCrash(f"simulated crash after write {self.writes}")

    def save(self, state: RunState, *, version: int) -> None:
        """Store, then crash when this is the chosen write."""
        self.inner.save(state, version=version)
        self._wrote()

    def load(self, run_id: str) -> Checkpoint:
        """The inner store's latest checkpoint."""
        return self.inner.load(run_id)

    def record_intent(
        self, run_id: str, key: str, kind: Literal["model", "tool"], *, version: int
    ) -> None:
        """Record, then crash when effect records count and this is the chosen write."""
        self.inner.record_intent(run_id, key, kind, version=version)
        if self.at == "any":
            self._wrote()

    def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
        """Record, then crash when effect records count and this is the chosen write."""
        self.inner.record_result(run_id, key, result, version=version)
        if self.at == "any":
            self._wrote()

    def effects(self, run_id: str) -> dict[str, EffectRecord]:
        """The inner store's journal."""
        return self.inner.effects(run_id)

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """The inner store's checkpoints of ``run_id``, oldest first."""
        return self.inner.checkpoints(run_id)  # type: ignore[attr-defined,no-any-return]

    def runs(self) -> list[RunSummary]:
        """The inner store's runs."""
        return self.inner.runs()

    def io_threads(self) -> None:
        """None: an agent calls this store in place, so that the simulated crash stops the run
        right at the chosen write, as a real one would (on a store's thread it would surface
        only at the run's next awaited write)."""
        return

    def forget(self, run_id: str) -> None:
        """Let the inner store drop what it keeps for ``run_id``."""
        forget = getattr(self.inner, "forget", None)
        if callable(forget):
            forget(run_id)

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()


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
            return RunResult.of(inner.load(run_id).state, None, plan_of(agent).output_spec), True
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
