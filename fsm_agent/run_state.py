"""The run state: the one JSON-serialisable value that holds everything about a run.

It includes the machine's position (``state``), so saving it after a move saves where the run
is. The kernel mutates one instance in place as the run goes; ``model_copy``
or ``model_dump_json`` take a snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from .errors import SchemaVersionError
from .machine.agent_machine import Move
from .machine.table import Counters, State, StopReason
from .messages import Message, ModelResponse, TextPart, ToolCall, ToolResult, Usage
from .record import adapter

__all__ = [
    "HumanRequest",
    "PhaseChange",
    "RunState",
    "StoredCounters",
    "StoredMove",
    "build_run_validators",
    "strip_unknown",
    "unknown_write_error",
]

# -- counters and moves by name ----------------------------------------------------------------
# Stored positionally, a counter added or reordered would silently change what every older
# checkpoint means; by name, a counter an older checkpoint lacks reads 0. Checkpoints written in
# the positional format still load, through the field order it had.
_POSITIONAL_COUNTERS = (
    "steps",
    "retries",
    "total_errors",
    "consecutive_error_turns",
    "compactions",
    "verifications",
    "repeated_turns",
)
_POSITIONAL_MOVE = ("source", "outcome", "dest", "row", "counters", "stop")


def _counters_in(value: object) -> object:
    if isinstance(value, list | tuple) and not isinstance(value, Counters):
        if len(value) != len(_POSITIONAL_COUNTERS):
            raise ValueError(
                f"positional counters hold {len(_POSITIONAL_COUNTERS)} values in the older "
                f"checkpoint format, not {len(value)}"
            )
        return dict(zip(_POSITIONAL_COUNTERS, value, strict=True))
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(Counters._fields))
        if unknown:  # not a ValueError: pydantic lets it through, unwrapped
            raise SchemaVersionError(
                f"unknown counter(s) {', '.join(unknown)}: the checkpoint was written by a "
                "newer fsm_agent; upgrade to read it"
            )
    return value


def _move_in(value: object) -> object:
    if isinstance(value, list | tuple) and not isinstance(value, Move):
        if len(value) not in (len(_POSITIONAL_MOVE) - 1, len(_POSITIONAL_MOVE)):
            raise ValueError(f"a positional move holds 5 or 6 values, not {len(value)}")
        value = dict(zip(_POSITIONAL_MOVE, value, strict=False))
    if isinstance(value, dict) and "counters" in value:
        value = {**value, "counters": _counters_in(value["counters"])}
    return value


def _counters_out(counters: Counters) -> dict[str, int]:
    """The counters that are not 0, by name (a missing counter reads 0)."""
    return {name: value for name, value in zip(Counters._fields, counters, strict=True) if value}


def _move_out(move: Move) -> dict[str, Any]:
    stored: dict[str, Any] = {
        "source": move.source.value,
        "outcome": move.outcome.value,
        "dest": move.dest.value,
        "row": move.row,
        "counters": _counters_out(move.counters),
    }
    if move.stop is not None:
        stored["stop"] = move.stop.value
    return stored


StoredCounters = Annotated[Counters, BeforeValidator(_counters_in), PlainSerializer(_counters_out)]
"""The run's counters as stored: an object of the counters that are not 0, by name (older
positional lists load)."""

StoredMove = Annotated[Move, BeforeValidator(_move_in), PlainSerializer(_move_out)]
"""One move as stored: an object by field name, its counters by name (older positional lists
load)."""


class HumanRequest(BaseModel):
    """A tool call a suspended run waits on: an ``approval`` asked by the permission hook, or a
    ``question`` the tool asked with ``ToolContext.ask_human``. ``resume`` fills ``decision``
    (``allow``, ``deny`` or ``answer``) and ``reply`` (the denial reason or the answer)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    kind: Literal["approval", "question"]
    call: ToolCall
    question: str | None = None  # the tool's question, or the hook's reason for asking
    decision: Literal["allow", "deny", "answer"] | None = None
    reply: str | None = None


class PhaseChange(BaseModel):
    """One move of the task machine, as the run state's ``phase_trace`` keeps it: from
    ``source`` (``None`` at the start) to ``dest``, made ``by`` the model (the move tool), by
    code (a tool that returned :class:`~fsm_agent.phases.MovePhase`), by a spent budget, or
    at the ``start``; ``step`` is the run's steps then and ``move`` the index in ``trace`` of
    the loop move that followed (the two traces line up)."""

    # Built on first use, like the messages: a run without phases never validates one.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    source: str | None
    dest: str
    by: Literal["start", "model", "code", "budget"]
    step: int
    move: int


class RunState(BaseModel):
    """Everything a run knows: position, counters, usage, thread, pending work, the ending."""

    # Built on first use, like the messages: a run that keeps no checkpoint never validates one.
    model_config = ConfigDict(extra="forbid", defer_build=True)

    # The kernel assigns a dozen fields per step; the run state validates on the way in and out
    # (model_validate/model_dump), never on assignment, so a plain attribute write does. It
    # skips pydantic's ``model_fields_set`` bookkeeping: nothing here dumps with exclude_unset.
    # ``__delattr__`` too: CPython writes through the C slot only when both are object's (with
    # pydantic's ``__delattr__`` left in place, every write calls ``__setattr__`` from Python,
    # six times slower).
    # A name that is not a field would never reach a checkpoint: the kernel takes back such a
    # write made by user code it calls, and reports it (see ``strip_unknown``), rather than pay
    # a Python-level ``__setattr__`` on each of the dozen writes of every step.
    if not TYPE_CHECKING:
        __setattr__ = object.__setattr__
        __delattr__ = object.__delattr__

    run_id: str
    conversation_id: str | None = None  # the Conversation the run belongs to, if any
    state: State = State.IDLE
    counters: StoredCounters = Counters()
    usage: Usage = Field(default_factory=Usage)
    messages: list[Message] = Field(default_factory=list)
    context_tokens: int = 0  # estimate for ``messages``, kept up to date as they change
    pending_tool_calls: list[ToolCall] = Field(default_factory=list)
    last_text: str = ""  # the text of the last model answer, the output candidate
    feedback: str | None = None  # verifier feedback waiting to be injected
    done_message: str | None = None  # what the done tool asked to be the output
    model_calls: int = 0  # attempts, failed ones included
    active_s: float = 0.0  # seconds spent running over all invocations (max_wall_clock_s)
    tool_executions: int = 0
    stop_reason: StopReason | None = None
    output: str | None = None
    error: str | None = None  # the error that ended the run, as text
    stop_detail: str | None = None  # what a stop condition that fired returned, when a string
    raw_finish_reason: str | None = None  # the provider's own reason for an ``other`` finish
    trace: list[StoredMove] = Field(default_factory=list)
    # The current tool turn and human input (empty between turns):
    tool_results: list[ToolResult] = Field(default_factory=list)  # finished, not yet in messages
    approved_calls: list[str] = Field(default_factory=list)  # pending call ids already approved
    human_requests: list[HumanRequest] = Field(default_factory=list)  # what a suspension awaits
    resume_token: str | None = None  # the valid resume handle's token while suspended
    suspensions: int = 0
    tool_outputs: dict[str, str] = Field(default_factory=dict)  # full text of cut outputs by id
    recent_turns: list[str] = Field(default_factory=list)  # the last two turns' calls (loop guard)
    definition: str | None = None  # a stored run's agent fingerprint (kernel.definition)
    model: str | None = None  # a stored run's model by name (a fallback chain's, joined by " | ")
    answered_by: dict[str, int] = Field(default_factory=dict)  # a fallback chain's answers by model
    # The task machine (an agent with phases): the current phase, the steps when it was
    # entered, and every phase move (None and () without phases).
    phase: str | None = None
    phase_since: int = 0
    phase_trace: tuple[PhaseChange, ...] = ()
    # A fork (``Agent.fork``): the run and the move (its trace's length) it started from.
    forked_from: str | None = None
    forked_at: int | None = None
    # Composition under a durable parent: a child run's parent run and call; a parent's child
    # runs by the id of the call that started each.
    parent_run_id: str | None = None
    parent_call_id: str | None = None
    child_runs: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def start(cls, run_id: str) -> RunState:
        """The state a new run starts from: ``RunState(run_id=run_id)`` without validating
        the defaults (a run starts several times faster; ``tests/test_run_state.py`` checks
        that the two are equal)."""
        fields = _START.copy()  # the immutable defaults; fresh containers below
        fields["run_id"] = run_id
        fields["messages"] = []
        fields["pending_tool_calls"] = []
        fields["trace"] = []
        fields["tool_results"] = []
        fields["approved_calls"] = []
        fields["human_requests"] = []
        fields["tool_outputs"] = {}
        fields["recent_turns"] = []
        fields["answered_by"] = {}
        fields["child_runs"] = {}
        rs = _new(cls)
        _set(rs, "__dict__", fields)
        _set(rs, "__pydantic_fields_set__", {"run_id"})
        _set(rs, "__pydantic_extra__", None)
        _set(rs, "__pydantic_private__", None)
        return rs


_new = object.__new__
_set = object.__setattr__
_FIELD_NAMES = frozenset(RunState.model_fields)
_FIELD_COUNT = len(_FIELD_NAMES)


def strip_unknown(rs: RunState) -> list[str]:
    """Remove the attributes of ``rs`` that are not fields (a misspelt name written by a hook,
    a verifier or a stop condition) and return their names; ``[]`` at the cost of one ``len``
    when there are none."""
    attributes = rs.__dict__
    if len(attributes) == _FIELD_COUNT:
        return []
    unknown = sorted(name for name in attributes if name not in _FIELD_NAMES)
    for name in unknown:
        del attributes[name]
    return unknown


def unknown_write_error(names: list[str]) -> str:
    """What a hook-failure report says about writes to ``names``, which are not fields."""
    return (
        f"set {', '.join(repr(n) for n in names)} on the run state, which has no such field "
        f"(the write was undone; the fields are: {', '.join(RunState.model_fields)})"
    )


_START: dict[str, object] = {name: field.default for name, field in RunState.model_fields.items()}
"""A new run's fields in declaration order, from their plain defaults: ``RunState.start``
replaces the run id and each field a factory makes (the mutable containers, and the zero usage
below). Not from ``model_construct``, which would call the factories, validating a ``Usage``
and inspecting the signatures of ``list`` and ``dict`` (about 3 ms of every import)."""
_START["usage"] = Usage()  # frozen: every new run may share it


def build_run_validators(*, durable: bool) -> None:
    """Build the validators of the models every run makes (and, for a ``durable`` agent, of the
    run state its checkpoints encode). Import leaves them to first use; an agent builds them
    when it is built, so that the first run of a service does not spend milliseconds building
    them on its event loop, where every other run waits. Each model is built once per process."""
    for value_type in (Message, ModelResponse, ToolCall, ToolResult, TextPart, Usage):
        adapter(value_type)
    models: list[type[BaseModel]] = [RunState, HumanRequest] if durable else []
    for model in models:
        if not model.__pydantic_complete__:
            model.model_rebuild()
