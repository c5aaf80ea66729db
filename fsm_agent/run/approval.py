"""Human approval and human input: the permission hook's answer, and the handle that resumes a
suspended run.

A run suspends when a permission hook answers :meth:`Approval.ask` (or a tool marked
``needs_approval`` is not decided by any hook), when a tool calls ``ctx.ask_human(...)``, or when
``RunHandle.pause()`` was called. The :class:`~fsm_agent.RunResult` then carries a
:class:`ResumeHandle`; ``agent.resume(handle, decisions)`` continues the same run from
``dispatching``. A handle works once: a second use, or a handle that does not belong to a
suspended run, raises :class:`~fsm_agent.ResumeError` and nothing runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from ..errors import ResumeError
from ..machine.table import State
from ..values.define import record
from .state import HumanRequest, RunState

__all__ = ["Approval", "Decision", "HumanDecision", "ResumeHandle", "apply_decisions"]


class Decision(StrEnum):
    """A permission hook's verdict on one tool call."""

    ALLOW = "allow"  # run the call
    DENY = "deny"  # do not run it; the model sees the reason as an is_error result
    ASK = "ask"  # ask a human: the run suspends until ``agent.resume``


@record(kw_only=False)
class Approval:
    """What an ``approve_tool`` hook returns (``True``/``False``/``None`` work too: ``None``
    means no opinion, leaving the call to the next hook or the default)."""

    decision: Decision
    reason: str | None = None

    @classmethod
    def allow(cls) -> Approval:
        """Run the call."""
        return cls(Decision.ALLOW)

    @classmethod
    def deny(cls, reason: str = "the call was not approved") -> Approval:
        """Do not run the call; ``reason`` goes back to the model as an ``is_error`` result."""
        return cls(Decision.DENY, reason)

    @classmethod
    def ask(cls, reason: str | None = None) -> Approval:
        """Let a human decide: the run suspends with this call pending."""
        return cls(Decision.ASK, reason)


HumanDecision = bool | Approval | str
"""A human's answer for one pending call: for an approval ``True``/``False`` or an
:class:`Approval` (allow or deny with a reason); for a tool's question, the answer text."""


def _token(run_id: str, suspension: int) -> str:
    return f"{run_id}#{suspension}"


@record(kw_only=False)
class ResumeHandle:
    """Resumes one suspension of one run, once. ``requests`` are the calls waiting for a human
    (empty after a pause); ``run_state`` is the run's state, which a resume continues."""

    run_id: str
    token: str
    requests: tuple[HumanRequest, ...]
    run_state: RunState

    @classmethod
    def of(cls, run_state: RunState) -> ResumeHandle:
        """The handle of a suspended run state (for instance one loaded from a checkpoint)."""
        if run_state.state is not State.SUSPENDED or run_state.resume_token is None:
            raise ResumeError(f"run {run_state.run_id!r} is not suspended; nothing to resume")
        return cls(
            run_state.run_id, run_state.resume_token, tuple(run_state.human_requests), run_state
        )

    @property
    def questions(self) -> dict[str, str]:
        """The pending questions and approval reasons by call id."""
        return {r.call.id: r.question for r in self.requests if r.question is not None}


def suspend(rs: RunState) -> None:
    """Record a new suspension: its resume token becomes the only valid one."""
    rs.suspensions += 1
    rs.resume_token = _token(rs.run_id, rs.suspensions)


def apply_decisions(handle: ResumeHandle, decisions: Mapping[str, HumanDecision]) -> RunState:
    """Check ``handle`` and ``decisions`` and record the decisions in the run state (which then
    no longer accepts this handle). Raises :class:`ResumeError`, changing nothing, when the
    handle is unknown or used, or the decisions do not fit the pending calls."""
    if not isinstance(handle, ResumeHandle):
        raise ResumeError(f"resume needs the ResumeHandle of a result, got {type(handle).__name__}")
    rs = handle.run_state
    if rs.resume_token != handle.token:
        issued = {_token(rs.run_id, n) for n in range(1, rs.suspensions + 1)}
        if handle.token in issued:
            raise ResumeError(
                f"this resume handle of run {rs.run_id!r} was already used; resume a run once, "
                "with the handle of its latest result"
            )
        raise ResumeError(f"unknown resume handle {handle.token!r} for run {rs.run_id!r}")
    if rs.state is not State.SUSPENDED:
        raise ResumeError(f"run {rs.run_id!r} is not suspended (it is {rs.state.value!r})")
    if not isinstance(decisions, Mapping):
        raise ResumeError("decisions must be a mapping of call id to decision")
    requests = {r.call.id: r for r in rs.human_requests}
    problems = [f"no pending call has id {cid!r}" for cid in decisions if cid not in requests]
    problems += [f"call {cid!r} needs a decision" for cid in requests if cid not in decisions]
    updated: list[HumanRequest] = []
    for call_id, request in requests.items():
        if call_id not in decisions:
            continue
        decided = _decide(request, decisions[call_id])
        if isinstance(decided, str):
            problems.append(f"call {call_id!r}: {decided}")
        else:
            updated.append(decided)
    if problems:
        raise ResumeError("the decisions do not fit the pending calls: " + "; ".join(problems))
    rs.human_requests = tuple(updated)
    rs.resume_token = None
    return rs


def _decide(request: HumanRequest, decision: object) -> HumanRequest | str:
    """The request with the decision recorded, or what is wrong with the decision."""
    if request.kind == "question":
        if not isinstance(decision, str):
            return f"the tool asked a question; answer it with text, not {type(decision).__name__}"
        return request.model_copy(update={"decision": "answer", "reply": decision})
    if isinstance(decision, bool):
        decision = Approval.allow() if decision else Approval.deny()
    if not isinstance(decision, Approval) or decision.decision is Decision.ASK:
        return "an approval needs True, False, Approval.allow() or Approval.deny(reason)"
    if decision.decision is Decision.ALLOW:
        return request.model_copy(update={"decision": "allow"})
    return request.model_copy(
        update={"decision": "deny", "reply": decision.reason or "the call was not approved"}
    )
