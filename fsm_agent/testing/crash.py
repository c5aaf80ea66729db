"""Crash simulation: a store that stops a run the way a crash would, right after a chosen write.

:func:`fsm_agent.testing.crash_and_resume` runs an agent on a :class:`CrashingCheckpointer` and
resumes it from the inner store (invariant 10, resume equivalence); property tests and the
durability tests use the store directly.
"""

from __future__ import annotations

from typing import Literal

from ..persistence import Checkpoint, Checkpointer, EffectRecord, RunSummary
from ..run_state import RunState

__all__ = ["CrashingCheckpointer", "SimulatedCrash"]


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
