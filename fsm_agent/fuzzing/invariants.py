"""The run invariants, checked on one finished run of the real kernel.

:func:`check_invariants` takes a :class:`RunRecord` (what a run did: its result, every event,
the requests its model saw) and raises :class:`InvariantViolation`, naming the invariant, at
the first one that does not hold. Nothing here imports hypothesis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..analysis.bounds import Bounds, bounds
from ..kernel.agent import RunResult
from ..machine.agent_machine import AgentMachine, default_machine
from ..machine.table import Counters, Limits, State, StopReason
from ..models.scripted import Turn
from ..policy import Policy
from ..run.events import ChildEvent, Event, StateChangedEvent, UsageEvent
from ..values.messages import Message, ModelRequest, ModelResponse, Role, Usage
from .oracle import oracle_for

__all__ = [
    "ABORT_REASONS",
    "DONE_REASONS",
    "INVARIANTS",
    "TERMINAL_EVENTS",
    "InvariantViolation",
    "RecordedModel",
    "RunRecord",
    "check_history",
    "check_invariants",
]

INVARIANTS: dict[int, str] = {
    1: "termination",
    2: "bounded work",
    3: "legal moves only",
    4: "one ending",
    5: "well-formed history",
    6: "stop reason agrees",
    7: "usage adds up",
    8: "nothing starts after cancel",
    9: "counters within limits",
    10: "resume equivalence",
}
"""The run invariants by number (docs/testing.md lists them)."""

DONE_REASONS = frozenset(
    {
        StopReason.COMPLETED,
        StopReason.DONE_TOOL,
        StopReason.MAX_STEPS,
        StopReason.CONTEXT_LIMIT,
        StopReason.OUTPUT_LIMIT,
        StopReason.CONTENT_FILTER,
        StopReason.UNVERIFIED,
        StopReason.OUTPUT_INVALID,
        StopReason.TIMEOUT,
        StopReason.USAGE_LIMIT,
        StopReason.STOP_CONDITION,
        StopReason.REPEATED_TOOL_CALLS,
    }
)
"""The stop reasons of a run that ends in ``done``."""
ABORT_REASONS = frozenset(
    {
        StopReason.CANCELLED,
        StopReason.MODEL_ERROR,
        StopReason.MAX_ERRORS,
        StopReason.TOOL_ERROR,
        StopReason.HOOK_ERROR,
    }
)
"""The stop reasons of a run that ends in ``aborted``."""
TERMINAL_EVENTS = ("final", "aborted", "suspended")
"""The event types that end an invocation of a run (a resume starts the next one)."""


class InvariantViolation(AssertionError):
    """A run broke invariant ``number`` (see :data:`INVARIANTS`)."""

    def __init__(self, number: int, message: str) -> None:
        super().__init__(f"invariant {number} ({INVARIANTS[number]}): {message}")
        self.number = number


class RecordedModel(Protocol):
    """A scripted model that records its requests (``ScriptedModel``, ``FuzzModel``)."""

    @property
    def requests(self) -> list[ModelRequest]:
        """Every request the model received, in order."""
        ...

    @property
    def turns(self) -> list[Turn]:
        """The script."""
        ...


@dataclass
class RunRecord:
    """What one run did, as the invariant checks need it.

    ``invocations`` splits ``events`` by invocation (the run, then each resume; default: one).
    ``played`` is the turn answered to each request (default: the script's first turns).
    ``runaway`` says why the fuzzer stopped a run that did not end by itself; ``reference`` is
    the same run without its pause (invariant 10); ``paused`` says whether the pause took effect
    (a pause asked for after the run's last tool turn does not).
    """

    result: RunResult[Any]
    events: list[Event]
    model: RecordedModel
    policy: Policy
    limits: Limits
    cancelled_at: tuple[int, int] | None = None  # (model requests, tool executions) at cancel
    invocations: list[list[Event]] = field(default_factory=list)
    machine: AgentMachine = default_machine
    bounds: Bounds | None = None  # default: bounds(policy) with the limits' verification
    runaway: str | None = None
    played: list[Turn] | None = None
    reference: RunResult[Any] | None = None
    paused: bool = False


def check_history(messages: Sequence[Message], *, pending: bool = False) -> None:
    """Invariant 5: the system prompt at most once and first; every tool call answered by
    exactly one result, in order, before anything else; no orphan result. With ``pending``
    (a suspended run), the last message's calls may still wait for their results."""
    for index, message in enumerate(messages):
        if message.role is Role.SYSTEM and index != 0:
            raise InvariantViolation(5, "system message not first")
    i = 0
    while i < len(messages):
        message = messages[i]
        if message.role is Role.TOOL:
            raise InvariantViolation(5, f"orphan tool result at message {i}")
        i += 1
        if message.role is Role.ASSISTANT and message.tool_calls:
            expected = [c.id for c in message.tool_calls]
            if len(set(expected)) != len(expected):
                raise InvariantViolation(5, f"duplicate call ids {expected}")
            got: list[str] = []
            while i < len(messages) and messages[i].role is Role.TOOL:
                got.extend(r.call_id for r in messages[i].tool_results)
                i += 1
            if got != expected and not (pending and i == len(messages) and not got):
                raise InvariantViolation(5, f"results {got} do not answer calls {expected}")


def check_invariants(record: RunRecord) -> int:
    """Check invariants 1–9 on one run, and 10 when the run has a reference;
    return how many were checked. Raises :class:`InvariantViolation` at the first broken one."""
    _check_work(record)
    _check_moves(record)
    _check_termination(record)
    _check_endings(record)
    _check_histories(record)
    _check_stop_reason(record)
    _check_usage(record)
    _check_cancel(record)
    if record.reference is None:
        return 9
    _check_resume(record, record.reference)
    return 10


def _check_termination(record: RunRecord) -> None:
    """Invariant 1: the run rests (a runaway run was stopped by the fuzzer; its other checks
    ran before this one)."""
    if record.runaway is not None:
        raise InvariantViolation(1, record.runaway or "")
    if record.result.state not in (State.DONE, State.ABORTED, State.SUSPENDED):
        raise InvariantViolation(1, "run not resting")


def _check_endings(record: RunRecord) -> None:
    """Invariant 4: one ending per invocation, last."""
    for invocation in record.invocations or [record.events]:
        ends = [i for i, e in enumerate(invocation) if e.type in TERMINAL_EVENTS]
        if ends != [len(invocation) - 1]:
            raise InvariantViolation(4, f"terminal events at {ends} of {len(invocation)}")


def _check_histories(record: RunRecord) -> None:
    """Invariant 5: a well-formed history at every model request, and at the end."""
    for request in record.model.requests:
        check_history(request.messages)
    result = record.result
    check_history(result.messages, pending=result.state is State.SUSPENDED)


def _check_stop_reason(record: RunRecord) -> None:
    """Invariant 6: the stop reason agrees with the last move and the end state."""
    result = record.result
    stops = [m.stop for m in result.trace if m.stop is not None]
    if not (bool(stops) and stops[-1] is result.stop_reason):
        raise InvariantViolation(6, f"stop reason {result.stop_reason}")
    if result.state is State.DONE:
        if result.stop_reason not in DONE_REASONS:
            raise InvariantViolation(6, f"done with {result.stop_reason}")
        if result.trace[-1].source is not State.FINALIZING:
            raise InvariantViolation(6, "done but not from finalizing")
        if result.output_text is None:
            raise InvariantViolation(6, "done without an output")
        checked = record.limits.verification or record.limits.output_validation
        if (
            checked
            and result.stop_reason is StopReason.COMPLETED
            and result.trace[-2].source is not State.VERIFYING
        ):
            raise InvariantViolation(
                6, f"completed from {result.trace[-2].source} without the answer's check"
            )
        if (
            record.limits.output_validation
            and result.stop_reason is StopReason.COMPLETED
            and result.trace[-2].source is State.VERIFYING
            and result.output is None
        ):
            raise InvariantViolation(6, "a verified typed answer without its validated output")
    elif result.state is State.ABORTED:
        if result.stop_reason not in ABORT_REASONS:
            raise InvariantViolation(6, f"aborted with {result.stop_reason}")
    elif result.stop_reason is not StopReason.SUSPENDED:
        raise InvariantViolation(6, f"resting with {result.stop_reason}")


def _check_cancel(record: RunRecord) -> None:
    """Invariant 8: after cancel no model call or tool starts; the run ends aborted/cancelled."""
    if record.cancelled_at is None:
        return
    result = record.result
    if result.state is not State.ABORTED:
        raise InvariantViolation(8, f"cancelled run ended {result.state}")
    if result.stop_reason is not StopReason.CANCELLED:
        raise InvariantViolation(8, f"stop {result.stop_reason}")
    # The run's own executions: a child cut short by the cancel is charged when it ends.
    after = (len(record.model.requests), result.own.tool_executions)
    if after != record.cancelled_at:
        raise InvariantViolation(
            8,
            f"(model calls, tool executions) went from {record.cancelled_at} at the cancel to "
            f"{after}",
        )


def _check_resume(record: RunRecord, ref: RunResult[Any]) -> None:
    """Invariant 10: checkpoint (pause, JSON, reload) and resume = the uninterrupted run
    ``ref``."""
    result = record.result
    # Without the pause the two runs should be the same run twice: say so, or the search for the
    # difference starts in the checkpoint.
    where = (
        "after a checkpoint and resume"
        if record.paused
        else "between two runs of the case (its pause took no effect: neither run paused)"
    )
    for name in ("state", "stop_reason", "output", "model_calls", "tool_executions", "messages"):
        if getattr(result, name) != getattr(ref, name):
            raise InvariantViolation(
                10,
                f"{name} differs {where}: {getattr(result, name)!r:.200} vs "
                f"{getattr(ref, name)!r:.200} uninterrupted",
            )


def _check_work(record: RunRecord) -> None:
    """Invariant 2: the work stays within ``bounds(policy)``."""
    result = record.result
    limit = record.bounds or bounds(record.policy, verification=record.limits.verification)
    calls = len(record.model.requests)
    if calls != result.model_calls:
        raise InvariantViolation(2, f"{calls} requests, {result.model_calls} counted")
    if limit.max_model_calls is not None and calls > limit.max_model_calls:
        raise InvariantViolation(
            2,
            f"{calls} model calls; the bound is {limit.max_model_calls} "
            f"({limit.model_calls_derivation})",
        )
    turns = sum(
        1 for m in result.trace if m.source is State.CALLING and m.dest is State.DISPATCHING
    )
    if limit.max_tool_turns is not None and turns > limit.max_tool_turns:
        raise InvariantViolation(
            2,
            f"{turns} tool turns; the bound is {limit.max_tool_turns} "
            f"({limit.tool_turns_derivation})",
        )
    executions = limit.max_tool_executions
    if executions is not None and result.tool_executions > executions:
        raise InvariantViolation(
            2,
            f"{result.tool_executions} tool executions; the bound is {limit.max_tool_executions}",
        )
    handed = len(result.run_state.handoff_trace) if result.run_state is not None else 0
    if limit.max_handoffs is not None and handed > limit.max_handoffs:
        raise InvariantViolation(
            2, f"{handed} handoffs; the bound is {limit.max_handoffs} ({limit.handoffs_derivation})"
        )


def _check_moves(record: RunRecord) -> None:
    """Invariants 3 and 9: from zero counters, the oracle (a ``transitions`` machine built from
    the rows, not the kernel's ``decide()``) makes every recorded move (so each row's guard
    held), and no counter passes its limit."""
    result, limits = record.result, record.limits
    oracle = oracle_for(record.machine.rows)
    moves = [e for e in record.events if isinstance(e, StateChangedEvent)]
    if len(moves) != len(result.trace):
        raise InvariantViolation(3, f"{len(moves)} events, {len(result.trace)} moves")
    counters = Counters()
    state = State.IDLE
    for event, move in zip(moves, result.trace, strict=True):
        if event.source is not state or move.source is not state:
            raise InvariantViolation(3, f"move from {event.source} while in {state}")
        try:
            expected = oracle.move(event.source, event.outcome, counters, limits)
        except ValueError as exc:
            raise InvariantViolation(3, str(exc)) from None
        if (event.row, event.dest) != (expected.row, expected.dest) or move != expected:
            raise InvariantViolation(
                3,
                f"{event.source} --{event.outcome}--> {event.dest} (row {event.row}); the table "
                f"says row {expected.row} to {expected.dest}",
            )
        counters = expected.counters
        state = expected.dest
        _check_counters(counters, limits)
    if state is not result.state:
        raise InvariantViolation(3, f"moves end in {state}, the run in {result.state}")


def _check_counters(c: Counters, lim: Limits) -> None:
    """Invariant 9 after one move."""
    for name, value, limit in (
        ("steps", c.steps, lim.max_steps),
        ("retries", c.retries, lim.max_retries),
        ("consecutive_error_turns", c.consecutive_error_turns, lim.max_consecutive_errors),
        ("compactions", c.compactions, lim.max_compaction_attempts),
        ("verifications", c.verifications, lim.max_verifications),
    ):
        if limit is not None and value > limit:
            raise InvariantViolation(9, f"{name}={value} passed its limit {limit}")


def _check_accounts(record: RunRecord) -> None:
    """Invariant 7, per agent of a composition: what the result says each run used by itself
    (``own``, ``children`` by path) is the usage its own events reported."""
    reported: dict[str, tuple[int, int, int]] = {}
    for event in record.events:
        path = ""
        if isinstance(event, ChildEvent):
            path = "/".join(event.path)
            while isinstance(event, ChildEvent):
                event = event.event
        if isinstance(event, UsageEvent):
            call = event.call
            had = reported.get(path, (0, 0, 0))
            reported[path] = (
                had[0] + call.requests,
                had[1] + call.input_tokens,
                had[2] + call.output_tokens,
            )
    result = record.result
    for path, account in (("", result.own), *result.children.items()):
        usage = account.usage
        counted = (usage.requests, usage.input_tokens, usage.output_tokens)
        if counted != reported.get(path, (0, 0, 0)):
            name = repr(path) if path else "the run itself"
            raise InvariantViolation(
                7,
                f"{name} is accounted {counted} (requests, input, output tokens), its events "
                f"report {reported.get(path, (0, 0, 0))}",
            )


def _check_usage(record: RunRecord) -> None:
    """Invariant 7: the run's usage is the sum of its per-call usages; without a cancel, the
    model-made calls add up to the usage of the turns the model played."""
    reported = Usage()
    from_model = Usage()
    for event in record.events:
        while isinstance(event, ChildEvent):  # a child's usage is its parent's too
            event = event.event
        if isinstance(event, UsageEvent):
            reported = reported + event.call
            if event.call.requests:  # the kernel counts a request for every model call
                from_model = from_model + event.call
    if record.result.usage != reported:
        raise InvariantViolation(7, f"{record.result.usage} != {reported}")
    _check_accounts(record)
    if record.cancelled_at is not None or record.runaway is not None:
        return  # a call cut short by a cancel reports no usage
    played = record.played
    if played is None:
        played = record.model.turns[: len(record.model.requests)]
    total = Usage()
    for turn in played:
        if isinstance(turn, ModelResponse):
            usage = turn.usage
            total = total + (usage if usage.requests else usage + Usage(requests=1))
    if from_model != total:
        raise InvariantViolation(7, f"model calls report {from_model}, the script {total}")
