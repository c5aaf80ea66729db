"""Events a run emits: frozen slotted dataclasses, one union discriminated on ``type``.

Per iteration, in this order: ``reasoning``, ``text`` (not for a terminal no-tool
answer), then per tool call ``step_start``, ``tool_call``, any ``tool_progress`` the running
tool reports, ``tool_result``, ``step_complete``.
Every move of the machine emits ``state_changed``. A run ends with exactly one terminal event
(``final``, ``aborted`` or ``suspended``) and nothing after it.

An event's constructor validates nothing (the kernel builds them at every move of a watched
run); :data:`event_adapter` validates and serialises them where they cross a boundary (a
recording, the durable workflow's stream), and each type's ``model_validate`` and
``model_dump`` (from :class:`~fsm_agent.values.record.Record`) do the same for one type.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from ..machine.table import Outcome, State, StopReason
from ..values.define import record
from ..values.messages import FinishReason, ModelRequest, ModelResponse, ToolCall, Usage
from ..values.record import Record
from ..values.schema import JsonValue, Schema

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = [
    "TERMINAL_EVENT_TYPES",
    "AbortedEvent",
    "AttemptDiscardedEvent",
    "ChildEvent",
    "CompactedEvent",
    "Event",
    "FinalEvent",
    "HandoffEvent",
    "HookErrorEvent",
    "LoopDetectedEvent",
    "ModelRequestEvent",
    "ModelResponseEvent",
    "ModelSwitchedEvent",
    "PartialOutputEvent",
    "PhaseChangedEvent",
    "ReasoningDeltaEvent",
    "ReasoningEvent",
    "RetryingEvent",
    "StateChangedEvent",
    "StepCompleteEvent",
    "StepStartEvent",
    "SuspendedEvent",
    "TextDeltaEvent",
    "TextEvent",
    "ToolCallDeltaEvent",
    "ToolCallEvent",
    "ToolProgressEvent",
    "ToolResultEvent",
    "UsageEvent",
    "VerificationFailedEvent",
    "event_adapter",
]


@record
class _Event(Record):
    run_id: str


@record
class StateChangedEvent(_Event):
    """The machine moved: ``row`` is the index of the table row that fired."""

    type: Literal["state_changed"] = "state_changed"
    source: State
    outcome: Outcome
    dest: State
    row: int
    stop_reason: StopReason | None = None
    phase: str | None = None  # the task's phase after the move (an agent with phases)


@record
class ModelRequestEvent(_Event):
    """A model call is about to start (attempt counts retries from 1)."""

    type: Literal["model_request"] = "model_request"
    step: int
    attempt: int
    request: ModelRequest


@record
class ModelResponseEvent(_Event):
    """A model call returned a response."""

    type: Literal["model_response"] = "model_response"
    step: int
    response: ModelResponse


@record
class TextDeltaEvent(_Event):
    """A fragment of streamed assistant text."""

    type: Literal["text_delta"] = "text_delta"
    text: str


@record
class PartialOutputEvent(_Event):
    """A typed-output answer as it arrives: ``partial`` is the JSON value parsed so far (its
    last field may be cut; not validated). Emitted after each text delta that changes it."""

    type: Literal["partial_output"] = "partial_output"
    partial: JsonValue


@record
class ReasoningDeltaEvent(_Event):
    """A fragment of streamed reasoning."""

    type: Literal["reasoning_delta"] = "reasoning_delta"
    text: str


@record
class ToolCallDeltaEvent(_Event):
    """A fragment of a streamed tool call."""

    type: Literal["tool_call_delta"] = "tool_call_delta"
    index: int
    call_id: str | None = None
    name: str | None = None
    arguments_fragment: str = ""


@record
class ReasoningEvent(_Event):
    """The model's reasoning for this turn."""

    type: Literal["reasoning"] = "reasoning"
    text: str


@record
class TextEvent(_Event):
    """Assistant text of a turn that does not end the run."""

    type: Literal["text"] = "text"
    text: str


@record
class StepStartEvent(_Event):
    """A tool call is about to be handled."""

    type: Literal["step_start"] = "step_start"
    step: int
    call_id: str
    tool_name: str
    phase: str | None = None  # the task's phase when the call starts (an agent with phases)


@record
class ToolCallEvent(_Event):
    """The call as the model made it; unparseable arguments show as ``{"_raw": text}``."""

    type: Literal["tool_call"] = "tool_call"
    call_id: str
    tool_name: str
    args: dict[str, JsonValue]


@record
class ToolProgressEvent(_Event):
    """A running tool call reported progress (an MCP server's progress notification, or
    :meth:`~fsm_agent.ToolContext.report_progress`): ``progress`` of ``total`` when known."""

    type: Literal["tool_progress"] = "tool_progress"
    call_id: str
    tool_name: str
    progress: float
    total: float | None = None
    message: str | None = None


@record
class ToolResultEvent(_Event):
    """The result recorded for a call."""

    type: Literal["tool_result"] = "tool_result"
    call_id: str
    tool_name: str
    content: str
    is_error: bool


@record
class StepCompleteEvent(_Event):
    """A tool call is finished."""

    type: Literal["step_complete"] = "step_complete"
    call_id: str
    status: Literal["ok", "error"]
    duration_s: float


@record
class RetryingEvent(_Event):
    """A model call failed and will be retried after ``delay_s``."""

    type: Literal["retrying"] = "retrying"
    attempt: int
    delay_s: float
    error: str
    finish_reason: FinishReason | None = None


@record
class ModelSwitchedEvent(_Event):
    """A model call failed and the next model of the fallback chain takes it, at once.
    ``switches`` counts the moves down the chain so far (1 for the first)."""

    type: Literal["model_switched"] = "model_switched"
    from_model: str
    to_model: str
    switches: int
    error: str


@record
class AttemptDiscardedEvent(_Event):
    """A streamed model call failed: drop the text, reasoning and tool-call deltas shown since
    the last ``model_request`` event. A retry streams its own answer; ``attempt`` counts the
    failed attempts so far (the ``retrying`` event follows when the call is retried; a failed
    step-limit summary call is not, and the run's ``final`` event follows)."""

    type: Literal["attempt_discarded"] = "attempt_discarded"
    attempt: int


@record
class CompactedEvent(_Event):
    """The history was compacted. ``strategy`` names the strategies that changed it (joined by
    ``+``); ``errors`` are the strategies that failed and were skipped (a failed summary)."""

    type: Literal["compacted"] = "compacted"
    strategy: str
    forced: bool
    tokens_before: int
    tokens_after: int
    messages_removed: int
    errors: tuple[str, ...] = ()


@record
class VerificationFailedEvent(_Event):
    """The verifier rejected the answer; the feedback goes back to the model."""

    type: Literal["verification_failed"] = "verification_failed"
    feedback: str


@record
class HookErrorEvent(_Event):
    """A hook raised or overran its timeout; the run went on (or aborted, per the policy)."""

    type: Literal["hook_error"] = "hook_error"
    hook: str
    error: str


@record
class LoopDetectedEvent(_Event):
    """The loop guard tripped: the model made the same tool calls ``repeats`` times in a row
    (or kept an A,B,A,B cycle going); ``action`` says whether it was warned or the run
    finalizes."""

    type: Literal["loop_detected"] = "loop_detected"
    tool_names: list[str]
    repeats: int
    action: Literal["warn", "finalize"]


@record
class PhaseChangedEvent(_Event):
    """The task moved from phase ``source`` to ``dest``, ``by`` the model (``move_to_phase``),
    by code (a tool's :class:`~fsm_agent.phases.MovePhase`) or by a spent step budget."""

    type: Literal["phase_changed"] = "phase_changed"
    source: str
    dest: str
    by: Literal["model", "code", "budget"]
    step: int


@record
class HandoffEvent(_Event):
    """The conversation went from the agent ``source`` (``None``: the one the run started with)
    to the agent ``dest`` (a :class:`~fsm_agent.Handoff`'s name) by the call ``call_id``;
    the next model turn is ``dest``'s. ``step`` is the run's steps then."""

    type: Literal["handoff"] = "handoff"
    source: str | None
    dest: str
    call_id: str
    step: int


@record
class UsageEvent(_Event):
    """Usage of the last model call and the run so far."""

    type: Literal["usage"] = "usage"
    call: Usage
    total: Usage


@record
class FinalEvent(_Event):
    """Terminal: the run finished with an answer."""

    type: Literal["final"] = "final"
    output: str
    stop_reason: StopReason


@record
class AbortedEvent(_Event):
    """Terminal: the run was aborted."""

    type: Literal["aborted"] = "aborted"
    stop_reason: StopReason
    error: str | None = None


@record
class SuspendedEvent(_Event):
    """Terminal for this invocation: the run waits for a human; ``pending`` are the calls."""

    type: Literal["suspended"] = "suspended"
    pending: tuple[ToolCall, ...]
    questions: dict[str, str] = field(default_factory=dict)


@record
class ChildEvent(_Event):
    """An event of a child run: an agent used as a tool (``Agent.as_tool``) by the call
    ``call_id`` of run ``run_id``. ``event`` keeps the child's own run id; ``depth`` is 1 for a
    child of the listened run, 2 for a grandchild (whose parent, ``run_id``, is a child);
    ``path`` names the child from the listened run down, one ``tool_name:step.call_id`` per
    level, ``step`` being the parent's step of the call, as call ids repeat across turns
    (``("research:1.c1", "dig:1.c4")`` for a grandchild)."""

    type: Literal["child"] = "child"
    call_id: str
    tool_name: str
    child_run_id: str
    depth: int
    event: Event
    path: tuple[str, ...] = ()


Event: TypeAlias = Annotated[
    StateChangedEvent
    | ModelRequestEvent
    | ModelResponseEvent
    | TextDeltaEvent
    | PartialOutputEvent
    | ReasoningDeltaEvent
    | ToolCallDeltaEvent
    | ReasoningEvent
    | TextEvent
    | StepStartEvent
    | ToolCallEvent
    | ToolProgressEvent
    | ToolResultEvent
    | StepCompleteEvent
    | RetryingEvent
    | ModelSwitchedEvent
    | AttemptDiscardedEvent
    | CompactedEvent
    | VerificationFailedEvent
    | HookErrorEvent
    | UsageEvent
    | FinalEvent
    | AbortedEvent
    | SuspendedEvent
    | LoopDetectedEvent
    | PhaseChangedEvent
    | HandoffEvent
    | ChildEvent,
    Schema(discriminator="type"),
]


TERMINAL_EVENT_TYPES = frozenset({"final", "aborted", "suspended"})

if TYPE_CHECKING:
    event_adapter: TypeAdapter[Event]
    """Validates and serialises any event (``event_adapter.validate_json(line)`` reads a JSONL
    line); made when first read, its validator and serializer built when first used."""


def __getattr__(name: str) -> Any:
    """``event_adapter``, made on first use (pydantic is imported then, not with the events)."""
    if name != "event_adapter":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from pydantic import ConfigDict, TypeAdapter

    made = globals()["event_adapter"] = TypeAdapter(Event, config=ConfigDict(defer_build=True))
    return made
