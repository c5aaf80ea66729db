"""The transition table: every state, every outcome, and the ordered rows that connect them.

Read it top to bottom. A handler runs in a state and reports an :class:`Outcome`; the rows for
that (state, outcome) are tried in order and the first whose guard holds decides the move: the
destination, the stop reason (if the move sets one) and the counter updates. Guards are small
pure functions of the run's :class:`Counters` and the policy's :class:`Limits`, registered with
what they read in :mod:`fsm_agent.machine.guards`; they see the counters as they were *before*
the move. Nothing else chooses a state.

Bounds this table guarantees (the exhaustive checker proves them per policy):
every successful model turn spends a step; retries reset only on a successful turn or a move
to the next model of a fallback chain, and those moves never reset;
compaction attempts reset only on a turn that fits the context (not on ``length``), so they
bound compactions in a row; verification rejections (a verifier's, or an answer that does not
validate as the agent's output type) and continuations never reset.
"""

from __future__ import annotations

from enum import StrEnum

from ..values.define import record
from .guards import (
    GUARDS,
    Counter,
    Counters,
    Guard,
    Limits,
    can_retry,
    can_switch_model,
    compactions_and_steps_left,
    continuations_left,
    error_turns_spent,
    loop_guard_finalizes,
    needs_verification,
    repeats_spent,
    steps_left,
    verifications_and_steps_left,
    verifications_left,
)

__all__ = [
    "ANSWERED",
    "DECLARATIONS",
    "GUARDS",
    "LIMITS",
    "NON_TERMINAL",
    "TABLE",
    "TERMINAL",
    "Counter",
    "Counters",
    "Declaration",
    "Guard",
    "Limits",
    "Outcome",
    "Row",
    "State",
    "StopReason",
    "Update",
    "can_retry",
    "can_switch_model",
    "compactions_and_steps_left",
    "continuations_left",
    "error_turns_spent",
    "loop_guard_finalizes",
    "needs_verification",
    "repeats_spent",
    "steps_left",
    "verifications_and_steps_left",
    "verifications_left",
]


class State(StrEnum):
    """Where a run is."""

    IDLE = "idle"  # created, not started
    COMPACTING = "compacting"  # context budget check; compaction when over budget or forced
    CALLING = "calling"  # one model call; a retry is a calling → calling move
    DISPATCHING = "dispatching"  # run the tool calls of the last response
    VERIFYING = "verifying"  # the verifier and/or the done-tool requirement
    SUSPENDED = "suspended"  # waiting for a human; the run returns and can be resumed
    FINALIZING = "finalizing"  # produce the final answer (summary call at the step limit)
    DONE = "done"  # terminal: finished, successfully or by a graceful limit
    ABORTED = "aborted"  # terminal: cancelled, fatal error, or error budget spent


TERMINAL = frozenset({State.DONE, State.ABORTED})
NON_TERMINAL = tuple(s for s in State if s not in TERMINAL)


class Outcome(StrEnum):
    """What a handler (or the driver, for the interrupts at the end) reports."""

    START = "start"  # idle: the input is enqueued
    PROCEED = "proceed"  # compacting: within budget, nothing to do
    COMPACTED = "compacted"  # compacting: history shortened
    CANNOT_COMPACT = "cannot_compact"  # compacting: over budget and nothing (more) can go
    TOOL_CALLS = "tool_calls"  # calling: finish reason tool_calls
    STOP = "stop"  # calling: finish reason stop
    LENGTH = "length"  # calling: a context-window error, or finish reason length near the budget
    OUTPUT_CUT = "output_cut"  # calling: finish reason length with room left in the context
    CONTENT_FILTER = "content_filter"  # calling: finish reason content_filter
    OTHER = "other"  # calling: any other finish reason (raw reason kept)
    FINISH_ERROR = "finish_error"  # calling: the provider reported finish reason error
    RETRYABLE_ERROR = "retryable_error"  # calling: a model error that may pass on retry
    FATAL_ERROR = "fatal_error"  # calling: a model error that retrying cannot fix
    FALLBACK = "fallback"  # calling: a model error the fallback chain hands to its next model
    TOOLS_DONE = "tools_done"  # dispatching: every call answered, at least one succeeded
    TOOLS_FAILED = "tools_failed"  # dispatching: every call of the turn failed
    TOOLS_REPEATED = "tools_repeated"  # dispatching: tools_done, repeating a recent turn's calls
    TOOL_ABORT = "tool_abort"  # dispatching: a tool failed under tool_failure_mode="fail"
    DONE_TOOL = "done_tool"  # dispatching: a tool signalled TaskComplete
    NEEDS_HUMAN = "needs_human"  # dispatching: an approval or an answer is pending
    VERIFIED = "verified"  # verifying: the answer is accepted
    REJECTED = "rejected"  # verifying: the answer is not accepted; feedback goes back
    OUTPUT_INVALID = "output_invalid"  # verifying: the answer does not validate as output_type
    RESUME = "resume"  # suspended: the human's decisions arrived
    FINALIZED = "finalized"  # finalizing: the final answer exists
    CANCEL = "cancel"  # any state: the run was cancelled
    DEADLINE = "deadline"  # the wall-clock limit passed
    USAGE_EXCEEDED = "usage_exceeded"  # a usage limit was reached
    STOP_CONDITION = "stop_condition"  # a user stop condition fired
    HOOK_ERROR = "hook_error"  # a hook failed under hook_failure_mode="fail"


class StopReason(StrEnum):
    """Why a run stopped (or paused)."""

    COMPLETED = "completed"  # the model answered (and the verifier accepted)
    DONE_TOOL = "done_tool"  # a tool signalled completion [S000 §4.4]
    MAX_STEPS = "max_steps"  # the step limit; the answer is the summary call's [S000 §6]
    CONTEXT_LIMIT = "context_limit"  # the context could not be made to fit [S001 §6]
    OUTPUT_LIMIT = "output_limit"  # the output cap cut the answer; the partial text is the output
    CONTENT_FILTER = "content_filter"  # the provider filtered the answer
    UNVERIFIED = "unverified"  # the verifier kept rejecting; its budget is spent
    OUTPUT_INVALID = "output_invalid"  # answers kept failing output_type; the budget is spent
    TIMEOUT = "timeout"  # the wall-clock limit [S001 §10]
    USAGE_LIMIT = "usage_limit"  # a token, request or cost limit [S002]
    STOP_CONDITION = "stop_condition"  # a user stop condition [S002]
    CANCELLED = "cancelled"  # cancelled by the caller [S000 §2.3]
    MODEL_ERROR = "model_error"  # a model error that retrying cannot fix
    MAX_ERRORS = "max_errors"  # the retry or error budget is spent [S002]
    TOOL_ERROR = "tool_error"  # a tool failed under tool_failure_mode="fail" [S004]
    SUSPENDED = "suspended"  # waiting for a human; resumable [S002 human_input_needed]
    REPEATED_TOOL_CALLS = "repeated_tool_calls"  # the loop guard tripped (policy: finalize)
    HOOK_ERROR = "hook_error"  # a hook failed under hook_failure_mode="fail" [S001 §10]


ANSWERED = frozenset({StopReason.COMPLETED, StopReason.DONE_TOOL})
"""The stop reasons of a ``done`` run that answered its task (the others end it on a limit or
a budget, with the best output it had, if any)."""


@record(kw_only=False)
class Update:
    """Add one to a counter, or reset it to zero."""

    counter: Counter
    reset: bool = False

    def __str__(self) -> str:
        return f"{self.counter.value} = 0" if self.reset else f"{self.counter.value} += 1"

    def apply(self, counters: Counters) -> Counters:
        """The counters after this update."""
        name = self.counter.value
        return counters._replace(**{name: 0 if self.reset else getattr(counters, name) + 1})


@record(kw_only=False)
class Row:
    """One transition: from ``source`` on ``outcome``, if ``guard`` holds, go to ``dest``."""

    source: State
    outcome: Outcome
    dest: State
    guard: Guard | None = None
    stop: StopReason | None = None
    updates: tuple[Update, ...] = ()
    note: str = ""

    @property
    def guard_name(self) -> str | None:
        """The guard's name, or ``None`` for an unguarded row."""
        return None if self.guard is None else self.guard.__name__


@record(kw_only=False)
class Declaration:
    """What may end a state: the outcomes its handler may report, and the interrupts the driver
    (or an interrupted effect) may report instead. The machine checks this against the rows
    when it is built; the kernel, the checker, the bounds and the diagrams all read it."""

    outcomes: frozenset[Outcome]
    interrupts: frozenset[Outcome] = frozenset()

    @property
    def all(self) -> frozenset[Outcome]:
        """Every outcome that may be reported in the state."""
        return self.outcomes | self.interrupts


S, On, R = State, Outcome, StopReason
# Cancel, and a hook that fails under hook_failure_mode="fail", may end every non-terminal state;
# the limits end the states that are doing work (not idle, and not a suspended run waiting for a
# human). The driver checks them before the handler of each state that declares all of LIMITS.
# Finalizing is already on its way out: its handler reports the deadline or a usage limit only
# when the step-limit summary call cannot be made or is cut short, with a fallback output.
_ALWAYS = frozenset({On.CANCEL, On.HOOK_ERROR})
LIMITS = frozenset({On.DEADLINE, On.USAGE_EXCEEDED, On.STOP_CONDITION})
_WORKING = _ALWAYS | LIMITS

DECLARATIONS: dict[State, Declaration] = {
    S.IDLE: Declaration(frozenset({On.START}), _ALWAYS),
    S.COMPACTING: Declaration(frozenset({On.PROCEED, On.COMPACTED, On.CANNOT_COMPACT}), _WORKING),
    S.CALLING: Declaration(
        frozenset(
            {
                On.TOOL_CALLS,
                On.STOP,
                On.LENGTH,
                On.OUTPUT_CUT,
                On.CONTENT_FILTER,
                On.OTHER,
                On.FINISH_ERROR,
                On.RETRYABLE_ERROR,
                On.FATAL_ERROR,
                On.FALLBACK,
            }
        ),
        _WORKING,
    ),
    S.DISPATCHING: Declaration(
        frozenset(
            {
                On.TOOLS_DONE,
                On.TOOLS_FAILED,
                On.TOOLS_REPEATED,
                On.TOOL_ABORT,
                On.DONE_TOOL,
                On.NEEDS_HUMAN,
            }
        ),
        _WORKING,
    ),
    S.VERIFYING: Declaration(frozenset({On.VERIFIED, On.REJECTED, On.OUTPUT_INVALID}), _WORKING),
    S.SUSPENDED: Declaration(frozenset({On.RESUME}), _ALWAYS),
    S.FINALIZING: Declaration(
        frozenset({On.FINALIZED}), _ALWAYS | {On.DEADLINE, On.USAGE_EXCEEDED}
    ),
    S.DONE: Declaration(frozenset()),
    S.ABORTED: Declaration(frozenset()),
}
"""Each state's outcomes and interrupts, declared once. A handler that reports anything else is
a bug the driver catches under the test suite (see ``docs/machine.md``)."""

_TURN = (Update(Counter.STEPS), Update(Counter.RETRIES, reset=True))  # a successful model turn
# A turn that fits the context also ends a run of compactions: the attempts bound compactions
# in a row (length → compact → length ...), so a long run can keep compacting as it grows.
_FIT_TURN = (*_TURN, Update(Counter.COMPACTIONS, reset=True))
_ERROR = (Update(Counter.TOTAL_ERRORS),)
_RETRY = (Update(Counter.RETRIES), *_ERROR)
# The next model of a fallback chain takes the call with a fresh retry budget; the switches
# never reset, so a run moves down the chain at most once per model.
_SWITCH = (Update(Counter.MODEL_SWITCHES), Update(Counter.RETRIES, reset=True), *_ERROR)
_NO_REPEAT = Update(Counter.REPEATED_TURNS, reset=True)
_TOOLS_OK = (Update(Counter.CONSECUTIVE_ERROR_TURNS, reset=True), _NO_REPEAT)
_REPEAT = (Update(Counter.CONSECUTIVE_ERROR_TURNS, reset=True), Update(Counter.REPEATED_TURNS))

TABLE: tuple[Row, ...] = (
    Row(S.IDLE, On.START, S.COMPACTING, note="system prompt and input enqueued"),
    Row(S.COMPACTING, On.PROCEED, S.CALLING),
    Row(S.COMPACTING, On.COMPACTED, S.CALLING, updates=(Update(Counter.COMPACTIONS),)),
    Row(S.COMPACTING, On.CANNOT_COMPACT, S.FINALIZING, stop=R.CONTEXT_LIMIT),
    Row(S.CALLING, On.TOOL_CALLS, S.DISPATCHING, updates=_FIT_TURN),
    Row(S.CALLING, On.STOP, S.VERIFYING, needs_verification, updates=_FIT_TURN),
    Row(S.CALLING, On.STOP, S.FINALIZING, stop=R.COMPLETED, updates=_FIT_TURN),
    Row(
        S.CALLING,
        On.LENGTH,
        S.COMPACTING,
        compactions_and_steps_left,
        updates=_TURN,
        note="forced compaction",
    ),
    Row(S.CALLING, On.LENGTH, S.FINALIZING, stop=R.CONTEXT_LIMIT, updates=_TURN),
    Row(
        S.CALLING,
        On.OUTPUT_CUT,
        S.COMPACTING,
        continuations_left,
        updates=(*_FIT_TURN, Update(Counter.CONTINUATIONS)),
        note="continuation turn",
    ),
    Row(S.CALLING, On.OUTPUT_CUT, S.FINALIZING, stop=R.OUTPUT_LIMIT, updates=_FIT_TURN),
    Row(S.CALLING, On.CONTENT_FILTER, S.FINALIZING, stop=R.CONTENT_FILTER, updates=_FIT_TURN),
    Row(S.CALLING, On.OTHER, S.VERIFYING, needs_verification, updates=_FIT_TURN),
    Row(
        S.CALLING,
        On.OTHER,
        S.FINALIZING,
        stop=R.COMPLETED,
        updates=_FIT_TURN,
        note="raw reason kept",
    ),
    Row(
        S.CALLING, On.FINISH_ERROR, S.CALLING, can_retry, updates=_RETRY, note="backoff, then retry"
    ),
    Row(S.CALLING, On.FINISH_ERROR, S.ABORTED, stop=R.MAX_ERRORS, updates=_ERROR),
    Row(
        S.CALLING,
        On.RETRYABLE_ERROR,
        S.CALLING,
        can_retry,
        updates=_RETRY,
        note="backoff, then retry",
    ),
    Row(
        S.CALLING,
        On.RETRYABLE_ERROR,
        S.CALLING,
        can_switch_model,
        updates=_SWITCH,
        note="retries spent: the next model",
    ),
    Row(S.CALLING, On.RETRYABLE_ERROR, S.ABORTED, stop=R.MAX_ERRORS, updates=_ERROR),
    Row(
        S.CALLING,
        On.FALLBACK,
        S.CALLING,
        can_switch_model,
        updates=_SWITCH,
        note="the next model takes the call",
    ),
    Row(
        S.CALLING,
        On.FALLBACK,
        S.CALLING,
        can_retry,
        updates=_RETRY,
        note="last model: backoff, then retry",
    ),
    Row(S.CALLING, On.FALLBACK, S.ABORTED, stop=R.MAX_ERRORS, updates=_ERROR),
    Row(S.CALLING, On.FATAL_ERROR, S.ABORTED, stop=R.MODEL_ERROR, updates=_ERROR),
    Row(
        S.DISPATCHING,
        On.TOOLS_DONE,
        S.COMPACTING,
        steps_left,
        updates=_TOOLS_OK,
        note="next iteration",
    ),
    Row(
        S.DISPATCHING,
        On.TOOLS_DONE,
        S.FINALIZING,
        stop=R.MAX_STEPS,
        updates=_TOOLS_OK,
        note="summary call",
    ),
    Row(
        S.DISPATCHING,
        On.TOOLS_REPEATED,
        S.FINALIZING,
        loop_guard_finalizes,
        stop=R.REPEATED_TOOL_CALLS,
        updates=_REPEAT,
        note="loop guard",
    ),
    Row(
        S.DISPATCHING,
        On.TOOLS_REPEATED,
        S.COMPACTING,
        steps_left,
        updates=_REPEAT,
        note="warned once the guard trips",
    ),
    Row(S.DISPATCHING, On.TOOLS_REPEATED, S.FINALIZING, stop=R.MAX_STEPS, updates=_REPEAT),
    Row(
        S.DISPATCHING,
        On.TOOLS_FAILED,
        S.ABORTED,
        error_turns_spent,
        stop=R.MAX_ERRORS,
        updates=(Update(Counter.CONSECUTIVE_ERROR_TURNS), *_ERROR, _NO_REPEAT),
        note="failed tool turns spent",
    ),
    Row(
        S.DISPATCHING,
        On.TOOLS_FAILED,
        S.COMPACTING,
        steps_left,
        updates=(Update(Counter.CONSECUTIVE_ERROR_TURNS), *_ERROR, _NO_REPEAT),
    ),
    Row(
        S.DISPATCHING,
        On.TOOLS_FAILED,
        S.FINALIZING,
        stop=R.MAX_STEPS,
        updates=(Update(Counter.CONSECUTIVE_ERROR_TURNS), *_ERROR, _NO_REPEAT),
    ),
    Row(
        S.DISPATCHING,
        On.TOOL_ABORT,
        S.ABORTED,
        stop=R.TOOL_ERROR,
        updates=_ERROR,
        note="tool_failure_mode=fail",
    ),
    Row(S.DISPATCHING, On.DONE_TOOL, S.FINALIZING, stop=R.DONE_TOOL, note="the done tool ran"),
    Row(S.DISPATCHING, On.NEEDS_HUMAN, S.SUSPENDED, stop=R.SUSPENDED, note="run returns"),
    Row(S.VERIFYING, On.VERIFIED, S.FINALIZING, stop=R.COMPLETED),
    Row(
        S.VERIFYING,
        On.REJECTED,
        S.COMPACTING,
        verifications_and_steps_left,
        updates=(Update(Counter.VERIFICATIONS),),
        note="feedback injected",
    ),
    Row(
        S.VERIFYING,
        On.REJECTED,
        S.FINALIZING,
        verifications_left,
        stop=R.MAX_STEPS,
        updates=(Update(Counter.VERIFICATIONS),),
    ),
    Row(S.VERIFYING, On.REJECTED, S.FINALIZING, stop=R.UNVERIFIED),
    Row(
        S.VERIFYING,
        On.OUTPUT_INVALID,
        S.COMPACTING,
        verifications_and_steps_left,
        updates=(Update(Counter.VERIFICATIONS),),
        note="validation error as feedback",
    ),
    Row(
        S.VERIFYING,
        On.OUTPUT_INVALID,
        S.FINALIZING,
        verifications_left,
        stop=R.MAX_STEPS,
        updates=(Update(Counter.VERIFICATIONS),),
    ),
    Row(S.VERIFYING, On.OUTPUT_INVALID, S.FINALIZING, stop=R.OUTPUT_INVALID),
    Row(S.SUSPENDED, On.RESUME, S.DISPATCHING, note="the human's decisions applied"),
    Row(S.FINALIZING, On.FINALIZED, S.DONE, note="exactly one final event"),
    Row(
        S.FINALIZING,
        On.DEADLINE,
        S.DONE,
        stop=R.TIMEOUT,
        note="summary call not made or cut short; fallback output",
    ),
    Row(
        S.FINALIZING,
        On.USAGE_EXCEEDED,
        S.DONE,
        stop=R.USAGE_LIMIT,
        note="summary call not made; fallback output",
    ),
    # Interrupts, checked by the driver before a state's handler runs (see DECLARATIONS).
    *(Row(s, On.CANCEL, S.ABORTED, stop=R.CANCELLED) for s in NON_TERMINAL),
    *(Row(s, On.HOOK_ERROR, S.ABORTED, stop=R.HOOK_ERROR) for s in NON_TERMINAL),
    *(
        Row(s, outcome, S.FINALIZING, stop=stop)
        for s in NON_TERMINAL
        if DECLARATIONS[s].interrupts >= LIMITS
        for outcome, stop in (
            (On.DEADLINE, R.TIMEOUT),
            (On.USAGE_EXCEEDED, R.USAGE_LIMIT),
            (On.STOP_CONDITION, R.STOP_CONDITION),
        )
    ),
)
"""The rows, in the order they are tried."""
