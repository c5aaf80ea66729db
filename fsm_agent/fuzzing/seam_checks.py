"""The seam invariants, checked on one attacked run (see :mod:`fsm_agent.fuzzing.seams`).

:func:`check_seam_record` raises :class:`SeamViolation`, naming the invariant, at the first one
that does not hold, and :class:`RunCrashed` when the run raised something nobody planted.
Nothing here imports hypothesis.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import cast

from ..errors import UnknownRunError
from ..kernel.agent import RunHandle
from ..machine.table import TERMINAL, State
from ..run.events import Event
from .invariants import TERMINAL_EVENTS, InvariantViolation, check_history
from .seams import GRACE_S, SeamRecord

__all__ = ["SEAM_INVARIANTS", "RunCrashed", "SeamViolation", "check_seam_record"]

SEAM_INVARIANTS: dict[int, str] = {
    1: "one ending",
    2: "well-formed history",
    3: "the caller's cancellation propagates",
    4: "a failing approval gate never runs the call",
    5: "terminal or resumable",
    6: "after_run once",
    7: "ends in time",
}
"""The seam invariants by number (docs/testing.md lists them)."""


class SeamViolation(AssertionError):
    """An attacked run broke seam invariant ``number`` (see :data:`SEAM_INVARIANTS`)."""

    def __init__(self, number: int, message: str) -> None:
        super().__init__(f"seam invariant {number} ({SEAM_INVARIANTS[number]}): {message}")
        self.number = number


class RunCrashed(AssertionError):
    """The run raised an exception nobody planted; ``kind`` is its type's name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def check_seam_record(record: SeamRecord) -> int:
    """Check every seam invariant on ``record``; return how many were checked."""
    ending = record.ending
    if ending == "hung":
        raise SeamViolation(7, f"the run had not ended after {GRACE_S:g} s")
    if ending.startswith("raised "):
        kind = ending.removeprefix("raised ").partition(":")[0]
        raise RunCrashed(kind, f"the run {ending}")
    _check_cancellation(record)
    _check_ending(record)
    _check_histories(record)
    gated = sorted(set(record.failed_gates) & set(record.ran))
    if gated:
        raise SeamViolation(4, f"call(s) {gated} ran although their approval check failed")
    _check_rest(record)
    calls = record.after_run_calls
    if calls is not None and (calls > 1 or (ending == "returned" and calls != 1)):
        raise SeamViolation(6, f"after_run was called {calls} times in a run that {ending}")
    return len(SEAM_INVARIANTS)


def _check_cancellation(record: SeamRecord) -> None:
    """Invariant 3: a cancel from outside (or the timeout's) ends the caller's task cancelled
    (or with the timeout's ``TimeoutError``); nothing else does."""
    ending = record.ending
    if record.cancel_delivered:
        if ending not in ("cancelled", "timeout"):
            where = " inside an expired asyncio.timeout" if record.timeout_expired else ""
            how = {"returned": "returned", "store": "raised the store's error"}.get(ending, ending)
            raise SeamViolation(3, f"the caller's cancel was swallowed{where}: the run {how}")
    elif ending == "cancelled":
        raise SeamViolation(3, "the run raised CancelledError, but nobody cancelled its task")
    if ending == "returned" and record.cancelling_at_return:
        raise SeamViolation(
            3,
            f"the run returned with its task still being cancelled ({record.cancelling_at_return})",
        )


def _check_ending(record: SeamRecord) -> None:
    """Invariant 1: one terminal event, the last; a run that returned has its result."""
    events = record.events
    ends = [i for i, e in enumerate(events) if e.type in TERMINAL_EVENTS]
    if record.ending == "returned":
        if record.result is None:
            raise SeamViolation(1, "the run returned without a result on its handle")
        if record.case.listen and ends != [len(events) - 1]:
            raise SeamViolation(1, f"terminal events at {ends} of {len(events)}")
    elif len(ends) > 1 or (ends and ends[-1] != len(events) - 1):
        raise SeamViolation(1, f"terminal events at {ends} of {len(events)}")


def _check_histories(record: SeamRecord) -> None:
    """Invariant 2: every request's history, and the run's at the end, well formed (calls may
    still wait for results in a run that suspended, lost its store or lost its listener)."""
    try:
        if record.model is not None:
            for request in record.model.requests:
                check_history(request.messages)
        rs = record.run_state
        if rs is not None:
            pending = rs.state is State.SUSPENDED or record.ending == "store" or record.abandoned
            check_history(rs.messages, pending=pending)
    except InvariantViolation as exc:
        raise SeamViolation(2, str(exc).partition(": ")[2]) from None


def _check_rest(record: SeamRecord) -> None:
    """Invariant 5: the run rests (ended, or suspended with a resume handle); a run its store
    failed resumes from the last good checkpoint to an ending; a stored run's checkpoint says
    where it rests."""
    rs, result, ending = record.run_state, record.result, record.ending
    if ending == "returned":
        assert result is not None  # invariant 1
        if result.state is State.SUSPENDED and result.resume_handle is None:
            raise SeamViolation(5, "the run suspended without a resume handle")
        if result.state not in TERMINAL and result.state is not State.SUSPENDED:
            raise SeamViolation(5, f"the run returned in {result.state.value!r}")
        if record.store is not None:
            saved = record.store.load(result.run_id).state.state
            if saved is not result.state:
                raise SeamViolation(
                    5, f"the run rests {result.state.value}, its checkpoint {saved}"
                )
    elif ending in ("cancelled", "timeout") and not record.abandoned:
        if rs is not None and rs.state not in TERMINAL and rs.state is not State.SUSPENDED:
            raise SeamViolation(5, f"the cancelled run was left in {rs.state.value!r}")
    elif ending == "store":
        _check_resume(record)


def _check_resume(record: SeamRecord) -> None:
    """Resume a run whose store failed, from its last good checkpoint, with the store healed."""
    store, agent, rs = record.store, record.agent, record.run_state
    assert store is not None
    assert agent is not None
    assert rs is not None
    try:
        checkpoint = store.load(rs.run_id)
    except UnknownRunError:
        return  # the first write failed: there is no run to resume
    if checkpoint.state.state in TERMINAL or checkpoint.state.state is State.SUSPENDED:
        return
    handle = RunHandle()
    events: list[Event] = []

    async def resume() -> None:
        stream = cast("AsyncGenerator[Event, None]", agent.resume_stream(rs.run_id, handle=handle))
        async with contextlib.aclosing(stream) as listened:
            async for event in listened:
                events.append(event)

    async def bounded() -> bool:
        try:
            async with asyncio.timeout(GRACE_S):
                await resume()
        except TimeoutError:
            return False
        return True

    with contextlib.closing(asyncio.new_event_loop()) as loop:
        ended = loop.run_until_complete(bounded())
    if not ended:
        if record.case.deadline_s is None:
            return  # a hanging verifier with no deadline hangs the resumed run: by design
        raise SeamViolation(5, f"the run resumed from its checkpoint had not ended in {GRACE_S} s")
    result = handle.result
    if result is None or [e.type for e in events][-1:] != [_end_of(result.state)]:
        raise SeamViolation(5, "the run resumed from its last good checkpoint did not end")
    try:
        check_history(result.messages, pending=result.state is State.SUSPENDED)
    except InvariantViolation as exc:
        raise SeamViolation(2, f"after resuming: {exc}") from None


def _end_of(state: State) -> str:
    return {State.DONE: "final", State.ABORTED: "aborted"}.get(state, "suspended")
